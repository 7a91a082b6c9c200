// properties/fuzz.cpp — `attncheck fuzz`: runs the properties against kernels and decoders and
// prints a table (property x subject), the shrunk failures with their replay lines, and
// optionally the mutant zoo's kill table.
//
// Subjects: every kernel at kernel level (kernel_properties.hpp) and every decoder at decoder
// level (decoder_properties.hpp): the reference decoder in float32 and the optimized decoder
// with each kernel plugged in. A kernel from a shared library (--kernel-lib) runs in a worker
// process, one per property, so a crash or a hang is reported and the run carries on
// (properties/isolation.hpp describes the protocol: the worker is this same program started as
// `fuzz --worker ...`, announcing each case on a channel and writing its results as JSON).
//
// Seeds: one seed S for the run (time-based unless --seed); every property runs RapidCheck at S
// with --cases as maxSuccess, so `--property P --seed S --cases N` replays any line exactly.
#include "properties/fuzz.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attncheck/error.hpp"
#include "attncheck/isa.hpp"
#include "attncheck/kernels.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/isolation.hpp"
#include "properties/kernel_lib.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/mutants.hpp"
#include "properties/property_runs.hpp"
#include "properties/runner.hpp"

namespace attncheck::properties {
namespace {

// The default budget: cases per property. Measured on the 2-core development machine the whole
// default run (2 kernels x 11 properties, 3 decoders x 6-7, with the large-shape tiers) takes
// 10-20 s, well under the 60 s the issue allows (see docs/properties.md for the numbers).
constexpr int kDefaultKernelCases = 300;
constexpr int kDefaultDecoderCases = 40;
// A worker process (one property of a --kernel-lib kernel) is killed when one case takes longer
// than the case timeout (--timeout; a hang is caught within it), or the whole property longer
// than the property timeout (a kernel that makes progress, only too slowly to finish).
constexpr double kWorkerCaseTimeoutS = 20;
constexpr double kWorkerPropertyTimeoutS = 600;

const char* kUsage = R"(usage: attncheck fuzz [options]

Property-tests attention kernels (through the C ABI) and decoders against the float64 reference.
With no options: every built-in kernel, the reference decoder and the optimized decoder with each
built-in kernel, at the default budget; prints a table property x subject.

  --kernel NAME        only this kernel (a built-in or a mutant name) and the optimized decoder with it
  --decoder reference  only the reference decoder
  --kernel-lib PATH    a kernel from a shared library (with --symbol), run in a worker process
  --symbol NAME        the kernel's exported (extern "C") symbol in --kernel-lib
  --timeout SECONDS    --kernel-lib: a case that runs longer is a hang (default 20); after a
                       kernel's first crash or timeout its remaining properties are skipped
  --property P         only this property (names: see the table, or --list)
  --level L            only kernel-level or only decoder-level properties (L = kernel | decoder)
  --cases N            cases per property (default: 300 per kernel property, 40 per decoder property)
  --seed S             RapidCheck seed (default: time-based, printed)
  --mutants            run the mutant zoo: every mutant must be killed (exit 0 only if all are)
  --json FILE          write the results as JSON
  --list               list the properties and what each catches
  --verbose            print the input spread (RC_TAG) of every passing property
  --help               this text

Exit: 0 every property passed (every mutant killed), 1 something failed, 2 bad usage.
A failure prints the shrunk case and `attncheck fuzz ... --property P --seed S --cases N` to replay it.
)";

struct Options {
    std::vector<std::string> kernels;  // names; empty = all built-ins
    bool kernel_flag = false;
    std::optional<std::string> decoder;  // --decoder reference
    std::string kernel_lib, symbol;
    std::string property;
    std::string level;  // "", "kernel" or "decoder"
    std::optional<int> cases;
    std::optional<std::uint64_t> seed;
    double timeout_s = kWorkerCaseTimeoutS;
    bool mutants = false, list = false, verbose = false, help = false;
    std::string json;
    bool worker = false;
    std::string worker_out;
};

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

long long parse_int(const std::string& flag, const std::string& text, long long lo, long long hi) {
    try {
        std::size_t used = 0;
        const long long v = std::stoll(text, &used);
        if (used == text.size() && v >= lo && v <= hi) return v;
    } catch (const std::exception&) {
    }
    throw UsageError(flag + " " + text + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

Options parse(const std::vector<std::string>& args) {
    Options o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
            return args[++i];
        };
        if (a == "--help" || a == "-h") o.help = true;
        else if (a == "--kernel") { o.kernels.push_back(value()); o.kernel_flag = true; }
        else if (a == "--decoder") o.decoder = value();
        else if (a == "--kernel-lib") o.kernel_lib = value();
        else if (a == "--symbol") o.symbol = value();
        else if (a == "--property") o.property = value();
        else if (a == "--level") {
            o.level = value();
            if (o.level != "kernel" && o.level != "decoder")
                throw UsageError("--level " + o.level + ": expected kernel or decoder");
        }
        else if (a == "--cases") o.cases = int(parse_int(a, value(), 1, 100000000));
        else if (a == "--seed") {
            const std::string v = value();
            try {
                std::size_t used = 0;
                o.seed = std::stoull(v, &used);
                if (used != v.size() || v.empty() || v[0] == '-') throw UsageError("");
            } catch (const std::exception&) {
                throw UsageError("--seed " + v + ": expected a non-negative integer");
            }
        } else if (a == "--timeout") {
            const std::string v = value();
            try {
                std::size_t used = 0;
                o.timeout_s = std::stod(v, &used);
                if (used != v.size() || !(o.timeout_s > 0 && o.timeout_s <= 86400)) throw UsageError("");
            } catch (const std::exception&) {
                throw UsageError("--timeout " + v + ": expected seconds, more than 0 and at most 86400");
            }
        } else if (a == "--mutants") o.mutants = true;
        else if (a == "--json") o.json = value();
        else if (a == "--list") o.list = true;
        else if (a == "--verbose") o.verbose = true;
        else if (a == "--worker") o.worker = true;
        else if (a == "--worker-out") o.worker_out = value();
        else throw UsageError("unknown option '" + a + "' (see attncheck fuzz --help)");
    }
    if (!o.kernel_lib.empty() && o.symbol.empty()) throw UsageError("--kernel-lib needs --symbol NAME");
    if (o.kernel_lib.empty() && !o.symbol.empty()) throw UsageError("--symbol needs --kernel-lib PATH");
    if (o.decoder && *o.decoder != "reference")
        throw UsageError("--decoder " + *o.decoder + ": only 'reference' (the optimized decoder is --kernel NAME)");
    if (o.mutants && (o.kernel_flag || !o.kernel_lib.empty() || o.decoder))
        throw UsageError("--mutants runs the zoo; it does not combine with --kernel, --kernel-lib or --decoder");
    if (!o.property.empty()) {
        bool known = false;
        for (const auto& p : kernel_properties()) known |= p.name == o.property;
        for (const auto& p : decoder_properties()) known |= p.name == o.property;
        if (!known) throw UsageError("--property " + o.property + ": no such property (see attncheck fuzz --list)");
    }
    return o;
}

// One line of the results: a property run against a subject.
struct Row {
    std::string kind;      // "kernel", "decoder", "mutant", "control"
    std::string subject;   // kernel name, or decoder name
    std::string replay_flag;  // what selects the subject on the command line
    RunParams params;
    PropertyResult result;
};

// The progress line on a terminal: "[kernel optimized] causality 120/300", rewritten in place.
class ProgressLine {
public:
    ProgressLine() : tty_(isatty(2) != 0) {}
    Progress track(const std::string& label, int total) {
        if (!tty_) return {};
        return [this, label, total](int done) {
            const auto now = std::chrono::steady_clock::now();
            if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
            last_ = now;
            std::fprintf(stderr, "\r\033[K%s %d/%d", label.c_str(), done, total);
            std::fflush(stderr);
        };
    }
    void clear() {
        if (tty_) std::fprintf(stderr, "\r\033[K");
    }

private:
    bool tty_;
    std::chrono::steady_clock::time_point last_{};
};

std::string cell(const PropertyResult& r) {
    std::ostringstream s;
    switch (r.status) {
        case Status::pass:
            s << "pass " << r.cases;
            if (r.unsupported) s << " (" << r.unsupported << " unsup)";
            break;
        case Status::fail: s << "FAIL @" << r.failed_at; break;
        case Status::unsupported: s << "unsupported"; break;
        case Status::error: s << "ERROR"; break;
        case Status::skipped: s << "skipped"; break;
    }
    return s.str();
}

void print_table(std::ostream& os, const std::vector<Row>& rows, const std::string& kind, const std::string& title) {
    std::vector<std::string> subjects, props;
    std::map<std::pair<std::string, std::string>, const Row*> at;
    for (const Row& r : rows) {
        if (r.kind != kind) continue;
        if (std::find(subjects.begin(), subjects.end(), r.subject) == subjects.end()) subjects.push_back(r.subject);
        if (std::find(props.begin(), props.end(), r.result.property) == props.end()) props.push_back(r.result.property);
        at[{r.result.property, r.subject}] = &r;
    }
    if (subjects.empty()) return;
    std::size_t w0 = title.size();
    for (const auto& p : props) w0 = std::max(w0, p.size());
    std::vector<std::size_t> w;
    for (const auto& s : subjects) w.push_back(std::max<std::size_t>(s.size(), 18));
    os << std::left << std::setw(int(w0)) << title;
    for (std::size_t i = 0; i < subjects.size(); ++i) os << "  " << std::setw(int(w[i])) << subjects[i];
    os << "\n";
    for (const auto& p : props) {
        os << std::setw(int(w0)) << p;
        for (std::size_t i = 0; i < subjects.size(); ++i) {
            const auto it = at.find({p, subjects[i]});
            os << "  " << std::setw(int(w[i])) << (it == at.end() ? std::string("-") : cell(it->second->result));
        }
        os << "\n";
    }
    os << "\n";
}

void print_failure(std::ostream& os, const Row& r) {
    const PropertyResult& p = r.result;
    if (p.status == Status::skipped) {
        os << p.property << " on " << r.kind << " " << r.subject << ": " << p.message << "\n";
        return;
    }
    os << p.property << " " << to_string(p.status) << " on " << r.kind << " " << r.subject;
    if (p.status == Status::fail) os << " at case " << p.failed_at << (p.counterexample.empty() ? "" : " (shrunk below)");
    os << "\n";
    if (!p.counterexample.empty()) os << p.counterexample;
    os << "  " << p.message << "\n";
    os << "  replay: " << replay_command(r.replay_flag, p.property, r.params) << "\n";
    // A float result, and so a verdict near the bound, depends on the code path that ran it.
    os << "  ran on: " << isa_line() << "\n";
    os << "  (in the Catch2 test: RC_PARAMS=\"seed=" << r.params.seed << " max_success=" << r.params.cases << "\")\n\n";
}

nlohmann::json to_json(const Row& r) {
    const PropertyResult& p = r.result;
    nlohmann::json j = {{"kind", r.kind},         {"subject", r.subject},         {"property", p.property},
                        {"status", to_string(p.status)}, {"cases", p.cases},     {"unsupported", p.unsupported},
                        {"notes", p.notes},       {"seconds", p.seconds},         {"seed", r.params.seed},
                        {"max_cases", r.params.cases}};
    if (!p.note.empty()) j["note"] = p.note;
    if (p.status != Status::pass) {
        j["failed_at"] = p.failed_at;
        j["message"] = p.message;
        j["counterexample"] = p.counterexample;
        j["replay"] = replay_command(r.replay_flag, p.property, r.params);
    }
    if (!p.spread.empty()) j["spread"] = p.spread;
    return j;
}

PropertyResult from_json(const nlohmann::json& j) {
    PropertyResult p;
    p.property = j.value("property", "");
    const std::string st = j.value("status", "ERROR");
    p.status = st == "pass" ? Status::pass : st == "FAIL" ? Status::fail : st == "unsupported" ? Status::unsupported
                                                                                                    : st == "skipped" ? Status::skipped
                                                                                                                      : Status::error;
    p.cases = j.value("cases", 0);
    p.unsupported = j.value("unsupported", 0);
    p.notes = j.value("notes", 0);
    p.note = j.value("note", "");
    p.failed_at = j.value("failed_at", 0);
    p.message = j.value("message", "");
    p.counterexample = j.value("counterexample", "");
    p.seconds = j.value("seconds", 0.0);
    return p;
}

bool selected(const Options& o, const std::string& property) { return o.property.empty() || o.property == property; }

int kernel_cases(const Options& o) { return o.cases.value_or(kDefaultKernelCases); }
int decoder_cases(const Options& o) { return o.cases.value_or(kDefaultDecoderCases); }

void run_kernel_subject(const Options& o, std::uint64_t seed, const KernelUnderTest& k, const std::string& kind,
                        std::vector<Row>& rows, ProgressLine& line, const WorkerChannel* channel = nullptr) {
    if (o.level == "decoder") return;
    for (const KernelProperty& prop : kernel_properties()) {
        if (!selected(o, prop.name)) continue;
        const RunParams params{seed, kernel_cases(o)};
        Row row{kind, k.name, "--kernel " + k.name, params, {}};
        row.result = run_kernel_property(prop, k, params, line.track("[" + kind + " " + k.name + "] " + prop.name, params.cases), channel);
        line.clear();
        rows.push_back(std::move(row));
    }
}

void run_decoder_subject(const Options& o, std::uint64_t seed, const DecoderUnderTest& d, const std::string& flag,
                         std::vector<Row>& rows, ProgressLine& line, const WorkerChannel* channel = nullptr) {
    if (o.level == "kernel") return;
    for (const DecoderProperty& prop : decoder_properties()) {
        if (!selected(o, prop.name) || (prop.optimized_only && !d.optimized())) continue;
        const RunParams params{seed, decoder_cases(o)};
        Row row{"decoder", d.name, flag, params, {}};
        row.result = run_decoder_property(prop, d, params, line.track("[decoder " + d.name + "] " + prop.name, params.cases),
                                          channel);
        line.clear();
        rows.push_back(std::move(row));
    }
}

// --kernel-lib in a worker per property: a crash or hang costs that property only.
void run_library_isolated(const Options& o, std::uint64_t seed, std::vector<Row>& rows) {
    const std::string name = o.symbol;
    std::vector<std::pair<std::string, bool>> props;  // name, is decoder-level
    for (const auto& p : kernel_properties())
        if (selected(o, p.name) && o.level != "decoder") props.push_back({p.name, false});
    for (const auto& p : decoder_properties())
        if (selected(o, p.name) && o.level != "kernel") props.push_back({p.name, true});
    const std::string out_file = "/tmp/attncheck-worker-" + std::to_string(getpid()) + ".json";
    const std::string flag = "--kernel-lib " + o.kernel_lib + " --symbol " + o.symbol;
    // After the kernel's first crash or hang, its other properties would most likely crash or
    // hang the same way, each costing a worker start or a whole timeout: they are skipped.
    std::string broken;  // what happened first, "" while the kernel has not crashed or hung
    for (const auto& [prop, is_decoder] : props) {
        const RunParams params{seed, is_decoder ? decoder_cases(o) : kernel_cases(o)};
        if (!broken.empty()) {
            Row row{is_decoder ? "decoder" : "kernel", is_decoder ? "optimized[" + name + "]" : name, flag, params, {}};
            row.result.property = prop;
            row.result.status = Status::skipped;
            row.result.message = "skipped (kernel crashed/timed out earlier: " + broken + ")";
            rows.push_back(std::move(row));
            continue;
        }
        std::vector<std::string> args = {"fuzz", "--worker", "--kernel-lib", o.kernel_lib, "--symbol", o.symbol,
                                         "--property", prop, "--seed", std::to_string(seed),
                                         "--cases", std::to_string(params.cases), "--worker-out", out_file};
        std::remove(out_file.c_str());
        WorkerOptions wo;
        wo.timeout_s = std::max(kWorkerPropertyTimeoutS, o.timeout_s);
        wo.case_timeout_s = o.timeout_s;
        const WorkerOutcome w = run_worker(args, wo);
        if (w.kind == WorkerOutcome::Kind::crashed || w.kind == WorkerOutcome::Kind::timed_out)
            broken = prop + " " + w.describe();
        bool have = false;
        if (w.kind == WorkerOutcome::Kind::exited) {
            std::ifstream in(out_file);
            nlohmann::json j;
            try {
                if (in && (in >> j) && j.contains("results"))
                    for (const auto& r : j["results"]) {
                        Row row{r.value("kind", "kernel"), r.value("subject", name), flag, params, from_json(r)};
                        rows.push_back(std::move(row));
                        have = true;
                    }
            } catch (const std::exception&) {
            }
        }
        if (!have) {
            Row row{is_decoder ? "decoder" : "kernel", is_decoder ? "optimized[" + name + "]" : name, flag, params, {}};
            row.result.property = prop;
            row.result.status = Status::fail;
            row.result.message = "worker " + w.describe();
            if (!w.output_tail.empty()) row.result.message += "\n  worker output (tail):\n" + w.output_tail;
            // The worker announces case numbers from 1, as failed_at counts them.
            if (w.last_case) row.result.failed_at = int(w.last_case->index);
            rows.push_back(std::move(row));
        }
    }
    std::remove(out_file.c_str());
}

int run_mutants(const Options& o, std::uint64_t seed, std::vector<Row>& rows, nlohmann::json& json_out) {
    ProgressLine line;
    // The wild types first: the correct kernels the mutants derive from must pass everything,
    // or a "kill" would prove nothing.
    bool controls_ok = true;
    for (const auto& [name, fn] : {std::pair<std::string, attncheck_kernel_fn>{"zoo_base", mutant_base_kernel()},
                                   {"zoo_online_base", mutant_online_base_kernel()}}) {
        run_kernel_subject(o, seed, KernelUnderTest{name, fn, true}, "control", rows, line);
    }
    for (const Row& r : rows)
        if (r.kind == "control" && r.result.status != Status::pass) controls_ok = false;

    std::cout << "mutant zoo (seed " << seed << ", up to " << kernel_cases(o) << " cases per property)\n";
    std::cout << std::left << std::setw(30) << "mutant" << std::setw(12) << "verdict" << std::setw(20) << "first killed by"
              << std::setw(8) << "cases" << "also killed by\n";
    int survivors = 0;
    std::vector<int> kill_cases;
    for (const Mutant& m : mutant_kernels()) {
        std::vector<Row> mine;
        run_kernel_subject(o, seed, KernelUnderTest{m.name, m.fn, true}, "mutant", mine, line);
        const Row* best = nullptr;
        std::string others;
        for (const Row& r : mine)
            if (r.result.status == Status::fail) {
                if (!best || r.result.failed_at < best->result.failed_at) best = &r;
            }
        for (const Row& r : mine)
            if (r.result.status == Status::fail && &r != best)
                others += (others.empty() ? "" : " ") + r.result.property + "@" + std::to_string(r.result.failed_at);
        nlohmann::json jm = {{"mutant", m.name}, {"bug", m.bug}, {"killed", best != nullptr}};
        if (best) {
            kill_cases.push_back(best->result.failed_at);
            jm["by"] = best->result.property;
            jm["after_cases"] = best->result.failed_at;
            jm["also"] = others;
            jm["message"] = best->result.message;
            jm["counterexample"] = best->result.counterexample;
        } else {
            ++survivors;
        }
        json_out["mutants"].push_back(jm);
        std::cout << std::setw(30) << m.name << std::setw(12) << (best ? "killed" : "SURVIVED") << std::setw(20)
                  << (best ? best->result.property : "-") << std::setw(8)
                  << (best ? std::to_string(best->result.failed_at) : "-") << others << "\n";
        for (Row& r : mine) rows.push_back(std::move(r));
    }
    std::sort(kill_cases.begin(), kill_cases.end());
    const double median = kill_cases.empty() ? 0
                          : kill_cases.size() % 2 ? kill_cases[kill_cases.size() / 2]
                                                  : 0.5 * (kill_cases[kill_cases.size() / 2 - 1] + kill_cases[kill_cases.size() / 2]);
    std::cout << "\n" << mutant_kernels().size() - std::size_t(survivors) << " of " << mutant_kernels().size()
              << " mutants killed; median cases to the first kill: " << median << "\n";
    json_out["median_cases_to_kill"] = median;
    if (!controls_ok) {
        std::cout << "\nthe zoo's correct base kernels FAILED a property (a kill proves nothing then):\n";
        for (const Row& r : rows)
            if (r.kind == "control" && r.result.status != Status::pass) print_failure(std::cout, r);
    }
    return survivors == 0 && controls_ok ? 0 : 1;
}

int worker_main(const Options& o, std::uint64_t seed) {
    // Runs in the child: one kernel from a library, in process, results to --worker-out.
    const LoadedKernel lk = load_kernel_library(o.kernel_lib, o.symbol);
    const WorkerChannel channel = WorkerChannel::from_environment();
    std::vector<Row> rows;
    ProgressLine line;
    const KernelUnderTest k{o.symbol, lk.fn, false};
    run_kernel_subject(o, seed, k, "kernel", rows, line, &channel);
    run_decoder_subject(o, seed, DecoderUnderTest{"optimized[" + o.symbol + "]", lk.fn}, "", rows, line, &channel);
    nlohmann::json j;
    j["results"] = nlohmann::json::array();
    bool ok = true;
    for (const Row& r : rows) {
        j["results"].push_back(to_json(r));
        ok &= r.result.status == Status::pass;
    }
    if (!o.worker_out.empty()) std::ofstream(o.worker_out) << j.dump() << "\n";
    return ok ? 0 : 1;
}

}  // namespace

int fuzz_main(const std::vector<std::string>& args) {
    {
        // RapidCheck prints "Using configuration: seed=..." when it first loads its global
        // configuration; our seed is the one that matters (printed below), so load it quietly.
        std::streambuf* err = std::cerr.rdbuf(nullptr);
        (void)rc::detail::configuration();
        std::cerr.rdbuf(err);
    }
    Options o;
    try {
        o = parse(args);
    } catch (const UsageError& e) {
        std::cerr << "attncheck fuzz: " << e.what() << "\n";
        return 2;
    }
    if (o.help) {
        std::cout << kUsage;
        return 0;
    }
    if (o.list) {
        std::cout << "kernel-level properties:\n";
        for (const auto& p : kernel_properties()) std::cout << "  " << std::left << std::setw(18) << p.name << p.summary << "\n";
        std::cout << "decoder-level properties:\n";
        for (const auto& p : decoder_properties()) std::cout << "  " << std::left << std::setw(18) << p.name << p.summary << "\n";
        return 0;
    }
    const std::uint64_t seed =
        o.seed.value_or(std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007ull);

    try {
        if (o.worker) return worker_main(o, seed);

        // Resolve the kernels before running anything: a typo is bad usage, not a failure.
        std::vector<KernelUnderTest> kernels;
        for (const std::string& name : o.kernels) {
            if (const KernelEntry* e = find_builtin_kernel(name)) kernels.push_back({e->name, e->fn, true});
            else if (const Mutant* m = find_mutant(name)) kernels.push_back({m->name, m->fn, true});
            else if (name == "zoo_base") kernels.push_back({name, mutant_base_kernel(), true});
            else if (name == "zoo_online_base") kernels.push_back({name, mutant_online_base_kernel(), true});
            else {
                std::string known;
                for (const auto& e : builtin_kernels()) known += " " + e.name;
                std::cerr << "attncheck fuzz: --kernel " << name << ": no such kernel (built-ins:" << known
                          << "; or a mutant name from --mutants)\n";
                return 2;
            }
        }
        if (!o.kernel_lib.empty()) load_kernel_library(o.kernel_lib, o.symbol);  // clear errors up front

        std::cout << "attncheck fuzz: seed " << seed << "; " << isa_line() << "\n";
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<Row> rows;
        nlohmann::json json_out;
        json_out["seed"] = seed;
        json_out["isa"] = isa_line();
        int code = 0;
        ProgressLine line;
        if (o.mutants) {
            code = run_mutants(o, seed, rows, json_out);
        } else {
            const bool everything = !o.kernel_flag && o.kernel_lib.empty() && !o.decoder;
            if (everything)
                for (const auto& e : builtin_kernels()) kernels.push_back({e.name, e.fn, true});
            for (const auto& k : kernels) run_kernel_subject(o, seed, k, "kernel", rows, line);
            if (everything || o.decoder)
                run_decoder_subject(o, seed, DecoderUnderTest{"reference", nullptr}, "--decoder reference", rows, line);
            for (const auto& k : kernels)
                run_decoder_subject(o, seed, DecoderUnderTest{"optimized[" + k.name + "]", k.fn}, "--kernel " + k.name, rows, line);
            if (!o.kernel_lib.empty()) run_library_isolated(o, seed, rows);

            print_table(std::cout, rows, "kernel", "kernel property");
            print_table(std::cout, rows, "decoder", "decoder property");
            for (const Row& r : rows) {
                if (r.result.status != Status::pass) code = 1;
                if (r.result.notes)
                    std::cout << "note: " << r.subject << " / " << r.result.property << ": " << r.result.notes
                              << " case(s): " << r.result.note << "\n";
            }
            for (const Row& r : rows)
                if (r.result.status != Status::pass) print_failure(std::cout, r);
        }
        if (o.verbose)
            for (const Row& r : rows) {
                std::cout << r.kind << " " << r.subject << " / " << r.result.property << " spread:";
                for (const auto& [tags, n] : r.result.spread) std::cout << " {" << tags << "}:" << n;
                std::cout << "\n";
            }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        int total_cases = 0;
        for (const Row& r : rows) total_cases += r.result.cases;
        std::cout << (o.mutants ? (code == 0 ? "every mutant killed" : "FAILED") : (code == 0 ? "all passed" : "FAILED")) << ": " << rows.size() << " property runs, " << total_cases
                  << " cases in " << std::fixed << std::setprecision(1) << seconds << " s (seed " << seed << ")\n";
        if (!o.json.empty()) {
            json_out["results"] = nlohmann::json::array();
            for (const Row& r : rows) json_out["results"].push_back(to_json(r));
            json_out["seconds"] = seconds;
            json_out["passed"] = code == 0;
            std::ofstream f(o.json);
            if (!f) {
                std::cerr << "attncheck fuzz: --json " << o.json << ": cannot write\n";
                return 2;
            }
            f << json_out.dump(2) << "\n";
        }
        return code;
    } catch (const InputError& e) {
        std::cerr << "attncheck fuzz: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace attncheck::properties
