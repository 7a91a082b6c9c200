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
// with --cases as maxSuccess, so `--property P --seed S --cases N` replays any line exactly (the
// failing case exactly; how far it shrinks depends on the shrink budget, --shrink-time).
// ATTNCHECK_SEED, ATTNCHECK_CASES and ATTNCHECK_PROPERTY set the same as for check_kernel()
// (properties/check.cpp); a flag overrides its variable.
#include "properties/fuzz.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attncheck/declaration.hpp"
#include "attncheck/error.hpp"
#include "attncheck/isa.hpp"
#include "kernels/registry.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/isolation.hpp"
#include "properties/kernel_lib.hpp"
#include "properties/kernel_properties.hpp"
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
// Shrinking a failure is bounded in wall-clock time per property: a decoder case of a broken
// kernel can take seconds per shrink step at d=256 h=8 T=80, and RapidCheck would spend minutes
// on it. Past the budget the smallest counterexample found so far is reported.
constexpr double kDefaultShrinkBudgetS = 5;
// Once a kernel has failed at kernel level its decoder-level properties only add evidence that
// it is broken: they run at most this many cases each (unless --cases or ATTNCHECK_CASES asks).
constexpr int kCappedDecoderCases = 10;
// --json's layout (documented in docs/cli.md). 1 is the unversioned layout from before
// "schema_version" (without "case", "counterexample_values", "shrink_*", "replay_env" and
// "capped_from").
constexpr int kJsonSchemaVersion = 2;

const char* kUsage = R"(usage: attncheck fuzz [options]

Property-tests attention kernels (through the C ABI) and decoders against the float64 reference.
With no options: every built-in kernel, the reference decoder and the optimized decoder with each
built-in kernel, at the default budget; prints a table property x subject.

  --kernel NAME        only this kernel (a built-in or a mutant name) and the optimized decoder with it
  --decoder reference  only the reference decoder
  --kernel-lib PATH    a kernel from a shared library (with --symbol), run in a worker process
                       per property; each property's verdict is printed as it finishes
  --symbol NAME        the kernel's exported (extern "C") symbol in --kernel-lib
  --timeout SECONDS    --kernel-lib: a case that runs longer is a hang (default 20); after a
                       kernel's first crash or timeout its remaining properties are skipped
  --property P[,P...]  only these properties (repeatable; names: see the table, or --list);
                       selecting no property at all is bad usage
  --level L            only kernel-level or only decoder-level properties (L = kernel | decoder)
  --cases N            cases per property (default: 300 per kernel property, 40 per decoder
                       property; 10 per decoder property of a kernel that failed at kernel level,
                       unless --cases or ATTNCHECK_CASES is given)
  --seed S             RapidCheck seed (default: time-based, printed)
  --shrink-time S      seconds of shrinking per failed property (default 5; 0: no limit); past it
                       the smallest counterexample so far is reported, marked as such
  --declare ITEMS      what the kernel declares (e.g. "head_dim=64,128; empty_rows=nan"; see
                       docs/kernel-authors.md), over a --kernel-lib's exported <symbol>_declaration;
                       the cases are fitted to it and problems outside it must be refused
  --empty-rows zero|nan, --head-dim LIST, --deterministic yes|no
                       the same as --declare empty_rows=..., head_dim=..., deterministic=...
  --allow-unchecked    a property with fewer than 10 supported cases (NOT CHECKED) does not fail
                       the run (it is still reported)
  --mutants            run the mutant zoo: every mutant must be killed (exit 0 only if all are)
  --json FILE          write the results as JSON (schema: docs/cli.md)
  --junit FILE         write the results as JUnit XML (a testsuite per subject; not with --mutants)
  --progress           cases done per property on stderr (always shown when it is a terminal)
  --list               list the properties and what each catches
  --verbose            print the input spread (RC_TAG) of every property that passed
  --help               this text

Environment: ATTNCHECK_SEED, ATTNCHECK_CASES, ATTNCHECK_PROPERTY (comma list) as --seed,
--cases, --property; a flag overrides its variable. TMPDIR: where --kernel-lib's worker writes.
The files of --json and --junit are checked before the run starts.

Exit: 0 every property passed (every mutant killed), 1 something failed or was not checked
(fewer than 10 supported cases; more than 20% unsupported prints a warning), 2 bad usage (or a
--json/--junit file that could not be written, unless something failed: then 1).
A failure prints the shrunk case and `attncheck fuzz ... --property P --seed S --cases N` to
replay it; for --kernel-lib also `ATTNCHECK_SEED=S ATTNCHECK_CASES=N ATTNCHECK_PROPERTY=P
<test binary>`, which replays it in a test that calls check_kernel() on the same kernel.
A crash names the case (numbered as failures are) and its shape; the properties skipped after
it are listed on one line. A shrunk case shared by several failures is printed once.
)";

struct Options {
    std::vector<std::string> kernels;  // names; empty = all built-ins
    bool kernel_flag = false;
    std::optional<std::string> decoder;  // --decoder reference
    std::string kernel_lib, symbol;
    std::vector<std::string> properties;  // empty = all
    std::string level;  // "", "kernel" or "decoder"
    std::optional<int> cases;
    std::optional<std::uint64_t> seed;
    double timeout_s = kWorkerCaseTimeoutS;
    double shrink_time_s = kDefaultShrinkBudgetS;
    bool mutants = false, list = false, verbose = false, help = false, progress = false;
    bool allow_unchecked = false;
    // Declaration items from --declare, --empty-rows, --head-dim, --deterministic, in order;
    // applied over what a --kernel-lib library exports (attncheck/declaration.hpp).
    std::string declare;
    std::string json, junit;
    bool worker = false;
    std::string worker_out;
};

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The properties named in a comma list ("a,b"), appended to `to`; an empty name is skipped.
void add_property_list(const std::string& list, std::vector<std::string>& to) {
    std::stringstream names(list);
    for (std::string name; std::getline(names, name, ',');)
        if (!name.empty() && std::find(to.begin(), to.end(), name) == to.end()) to.push_back(name);
}

std::uint64_t parse_seed(const std::string& what, const std::string& v) {
    try {
        std::size_t used = 0;
        const std::uint64_t seed = std::stoull(v, &used);
        if (used == v.size() && !v.empty() && v[0] != '-') return seed;
    } catch (const std::exception&) {
    }
    throw UsageError(what + ": expected a non-negative integer");
}

long long parse_int(const std::string& flag, const std::string& text, long long lo, long long hi) {
    try {
        std::size_t used = 0;
        const long long v = std::stoll(text, &used);
        if (used == text.size() && v >= lo && v <= hi) return v;
    } catch (const std::exception&) {
    }
    throw UsageError(flag + (flag.back() == '=' ? "" : " ") + text + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
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
        else if (a == "--property") {
            add_property_list(value(), o.properties);
            if (o.properties.empty()) throw UsageError("--property needs a property name");
        }
        else if (a == "--level") {
            o.level = value();
            if (o.level != "kernel" && o.level != "decoder")
                throw UsageError("--level " + o.level + ": expected kernel or decoder");
        }
        else if (a == "--cases") o.cases = int(parse_int(a, value(), 1, 100000000));
        else if (a == "--seed") {
            const std::string v = value();
            o.seed = parse_seed("--seed " + v, v);
        } else if (a == "--shrink-time") {
            const std::string v = value();
            try {
                std::size_t used = 0;
                o.shrink_time_s = std::stod(v, &used);
                if (used != v.size() || !(o.shrink_time_s >= 0 && o.shrink_time_s <= 86400)) throw UsageError("");
            } catch (const std::exception&) {
                throw UsageError("--shrink-time " + v + ": expected seconds, from 0 (no limit) to 86400");
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
        } else if (a == "--declare" || a == "--empty-rows" || a == "--head-dim" || a == "--deterministic") {
            const std::string v = value();
            const std::string item = a == "--declare"      ? v
                                     : a == "--empty-rows" ? "empty_rows=" + v
                                     : a == "--head-dim"   ? "head_dim=" + v
                                                           : "deterministic=" + v;
            try {
                (void)KernelDeclaration::parse(item);
            } catch (const std::invalid_argument& e) {
                throw UsageError(a + " " + v + ": " + e.what());
            }
            o.declare += (o.declare.empty() ? "" : "; ") + item;
        } else if (a == "--allow-unchecked") o.allow_unchecked = true;
        else if (a == "--mutants") o.mutants = true;
        else if (a == "--json") o.json = value();
        else if (a == "--junit") o.junit = value();
        else if (a == "--progress") o.progress = true;
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
    if (o.mutants && !o.junit.empty()) throw UsageError("--junit does not combine with --mutants (use --json)");
    // The environment fills in what the flags left open (as CheckOptions::from_environment);
    // --help and --list work whatever it holds.
    if (o.help || o.list) return o;
    if (!o.seed)
        if (const char* v = std::getenv("ATTNCHECK_SEED")) o.seed = parse_seed(std::string("ATTNCHECK_SEED=") + v, v);
    if (!o.cases)
        if (const char* v = std::getenv("ATTNCHECK_CASES"))
            o.cases = int(parse_int("ATTNCHECK_CASES=", v, 1, 100000000));
    bool from_env = false;
    if (o.properties.empty())
        if (const char* v = std::getenv("ATTNCHECK_PROPERTY")) {
            add_property_list(v, o.properties);
            from_env = !o.properties.empty();
        }
    for (const std::string& name : o.properties) {
        bool known = false;
        for (const auto& p : kernel_properties()) known |= p.name == name;
        for (const auto& p : decoder_properties()) known |= p.name == name;
        if (!known)
            throw UsageError((from_env ? "ATTNCHECK_PROPERTY: " : "--property ") + name +
                             ": no such property (see attncheck fuzz --list)");
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
    bool library = false;     // a --kernel-lib kernel: check_kernel() on it replays the row too
    int capped_from = 0;      // > 0: the default budget this decoder-level run was capped from
};

// The progress line: "[kernel optimized] causality 120/300" on stderr, rewritten in place on a
// terminal (at most every 100 ms); with --progress and no terminal, a plain line at most every
// second (a CI log keeps every line).
class ProgressLine {
public:
    explicit ProgressLine(bool forced = false) : tty_(isatty(2) != 0), on_(tty_ || forced) {}
    Progress track(const std::string& label, int total) {
        if (!on_) return {};
        return [this, label, total](int done) {
            show(label + " " + std::to_string(done) + "/" + std::to_string(total), done == total);
        };
    }
    // Any other state of the run ("... shrinking case 17, step 4").
    void show(const std::string& text, bool force = false) {
        if (!on_) return;
        const auto now = std::chrono::steady_clock::now();
        if (!force && now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000))) return;
        last_ = now;
        if (tty_) std::fprintf(stderr, "\r\033[K%s", text.c_str());
        else std::fprintf(stderr, "%s\n", text.c_str());
        std::fflush(stderr);
    }
    void clear() {
        if (tty_) std::fprintf(stderr, "\r\033[K");
    }

private:
    bool tty_, on_;
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
        case Status::not_checked: s << "NOT CHECKED (" << r.cases - r.unsupported << "/" << r.cases << " supported)"; break;
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

// The line that replays a --kernel-lib row in a test binary calling check_kernel() on the same
// kernel (CheckOptions::from_environment reads these; ATTNCHECK_CASES sets both budgets).
std::string check_kernel_replay(const Row& r) {
    return "ATTNCHECK_SEED=" + std::to_string(r.params.seed) + " ATTNCHECK_CASES=" + std::to_string(r.params.cases) +
           " ATTNCHECK_PROPERTY=" + r.result.property + " <test binary>";
}

std::string seconds_text(double s) {
    std::ostringstream t;
    t << std::fixed << std::setprecision(1) << s;
    return t.str();
}

// Prints one failed row. `seen` maps a counterexample already printed to where it was, so that
// several properties failing on the same shrunk case print it once.
void print_failure(std::ostream& os, const Row& r, std::map<std::string, std::string>& seen) {
    const PropertyResult& p = r.result;
    os << p.property << " " << to_string(p.status) << " on " << r.kind << " " << r.subject;
    if (p.status == Status::fail) os << " at case " << p.failed_at << (p.counterexample.empty() ? "" : " (shrunk below)");
    os << "\n";
    if (!p.counterexample.empty()) {
        const std::string where = p.property + " on " + r.kind + " " + r.subject;
        const auto [it, first] = seen.emplace(p.counterexample, where);
        if (first) os << p.counterexample;
        else os << "  case: the same as for " << it->second << " above\n";
        if (p.shrink_stopped)
            os << "  (shrinking stopped after " << seconds_text(p.shrink_seconds)
               << " s: the smallest failing case found by then; --shrink-time for more)\n";
    }
    os << "  " << p.message << "\n";
    os << "  replay: " << replay_command(r.replay_flag, p.property, r.params) << "\n";
    if (r.library) os << "  replay in a test that calls check_kernel() on this kernel: " << check_kernel_replay(r) << "\n";
    // A float result, and so a verdict near the bound, depends on the code path that ran it.
    os << "  ran on: " << isa_line() << "\n\n";
}

// The properties skipped after a kernel crashed or hung, on one line.
void print_skipped(std::ostream& os, const std::vector<Row>& rows) {
    std::string names, why;
    int n = 0;
    for (const Row& r : rows) {
        if (r.result.status != Status::skipped) continue;
        names += (n++ ? ", " : "") + r.result.property;
        why = r.result.message;
    }
    if (n) os << "skipped " << n << " " << (n == 1 ? "property" : "properties") << " (" << why << "): " << names << "\n\n";
}

// "B=1 H=2 q_offset=0 (decode) kv_valid_len=[3,1] ..." (kernel_case.cpp, decoder_case.cpp's
// describe()) as a JSON object: numbers, lists and booleans typed; a parenthesised word after a
// field is kept as FIELD_note ("q_offset_note": "decode").
nlohmann::json shape_fields(const std::string& text) {
    nlohmann::json j = nlohmann::json::object();
    std::stringstream words(text);
    std::string last;
    for (std::string w; words >> w;) {
        while (!w.empty() && w.back() == ';') w.pop_back();
        if (w.size() > 2 && w.front() == '(' && w.back() == ')') {
            if (!last.empty()) j[last + "_note"] = w.substr(1, w.size() - 2);
            continue;
        }
        const auto eq = w.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        const std::string key = w.substr(0, eq), v = w.substr(eq + 1);
        last = key;
        const nlohmann::json parsed = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
        j[key] = parsed.is_discarded() ? nlohmann::json(v) : parsed;
    }
    return j;
}

nlohmann::json to_json(const Row& r) {
    const PropertyResult& p = r.result;
    nlohmann::json j = {{"kind", r.kind},         {"subject", r.subject},         {"property", p.property},
                        {"status", to_string(p.status)}, {"cases", p.cases},     {"unsupported", p.unsupported},
                        {"notes", p.notes},       {"seconds", p.seconds},         {"seed", r.params.seed},
                        {"max_cases", r.params.cases}};
    if (!p.note.empty()) j["note"] = p.note;
    if (!p.warning.empty()) j["warning"] = p.warning;
    if (r.capped_from) j["capped_from"] = r.capped_from;
    if (p.status != Status::pass) {
        j["failed_at"] = p.failed_at;
        j["message"] = p.message;
        j["counterexample"] = p.counterexample;
        j["replay"] = replay_command(r.replay_flag, p.property, r.params);
        if (r.library) j["replay_env"] = check_kernel_replay(r);
    }
    if (!p.counterexample_values.empty()) {
        nlohmann::json values = nlohmann::json::object();
        for (const auto& [label, value] : p.counterexample_values) {
            values[label] = value;
            if (label == "case") j["case"] = shape_fields(value);
        }
        j["counterexample_values"] = values;
        j["shrink_seconds"] = p.shrink_seconds;
        j["shrink_stopped"] = p.shrink_stopped;
    }
    if (!p.spread.empty()) j["spread"] = p.spread;
    return j;
}

PropertyResult from_json(const nlohmann::json& j) {
    PropertyResult p;
    p.property = j.value("property", "");
    const std::string st = j.value("status", "ERROR");
    p.status = st == "pass"          ? Status::pass
               : st == "FAIL"        ? Status::fail
               : st == "not checked" ? Status::not_checked
               : st == "skipped"     ? Status::skipped
                                     : Status::error;
    p.warning = j.value("warning", "");
    p.cases = j.value("cases", 0);
    p.unsupported = j.value("unsupported", 0);
    p.notes = j.value("notes", 0);
    p.note = j.value("note", "");
    p.failed_at = j.value("failed_at", 0);
    p.message = j.value("message", "");
    p.counterexample = j.value("counterexample", "");
    p.seconds = j.value("seconds", 0.0);
    p.shrink_seconds = j.value("shrink_seconds", 0.0);
    p.shrink_stopped = j.value("shrink_stopped", false);
    // The worker writes the object in the order the generators drew the values; nlohmann's
    // object sorts keys, so the labels' order in the text version is the one to trust.
    if (j.contains("counterexample_values") && j["counterexample_values"].is_object()) {
        std::stringstream lines(p.counterexample);
        for (std::string line; std::getline(lines, line);) {
            const auto eq = line.find(" = ");
            if (eq == std::string::npos) continue;
            const std::string label = line.substr(line.find_first_not_of(' '), eq - line.find_first_not_of(' '));
            p.counterexample_values.emplace_back(label, j["counterexample_values"].value(label, ""));
        }
    }
    if (j.contains("spread") && j["spread"].is_object())
        for (const auto& [tags, n] : j["spread"].items()) p.spread[tags] = n.get<int>();
    return p;
}

std::string xml_escape(const std::string& text) {
    std::string out;
    for (const char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default:
                // XML 1.0 allows no control characters but tab and newline (a kernel's message
                // may quote anything).
                if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') out += "?";
                else out += c;
        }
    }
    return out;
}

// JUnit XML: a <testsuite> per subject ("kernel NAME", "decoder optimized[NAME]"), a <testcase>
// per property; FAIL and "not checked" are <failure>, ERROR is <error>, skipped is <skipped>.
std::string junit_xml(const std::vector<Row>& rows, std::uint64_t seed, double seconds) {
    std::vector<std::string> suites;
    for (const Row& r : rows) {
        const std::string name = r.kind + " " + r.subject;
        if (std::find(suites.begin(), suites.end(), name) == suites.end()) suites.push_back(name);
    }
    int failures = 0, errors = 0, skipped = 0;
    for (const Row& r : rows) {
        failures += r.result.status == Status::fail || r.result.status == Status::not_checked;
        errors += r.result.status == Status::error;
        skipped += r.result.status == Status::skipped;
    }
    std::ostringstream x;
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"attncheck fuzz\" tests=\"" << rows.size() << "\" failures=\"" << failures
      << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << seconds << "\">\n";
    for (const std::string& suite : suites) {
        int n = 0, f = 0, e = 0, sk = 0;
        double t = 0;
        for (const Row& r : rows) {
            if (r.kind + " " + r.subject != suite) continue;
            ++n;
            f += r.result.status == Status::fail || r.result.status == Status::not_checked;
            e += r.result.status == Status::error;
            sk += r.result.status == Status::skipped;
            t += r.result.seconds;
        }
        x << "  <testsuite name=\"" << xml_escape(suite) << "\" tests=\"" << n << "\" failures=\"" << f
          << "\" errors=\"" << e << "\" skipped=\"" << sk << "\" time=\"" << t << "\">\n"
          << "    <properties><property name=\"seed\" value=\"" << seed << "\"/>"
          << "<property name=\"isa\" value=\"" << xml_escape(isa_line()) << "\"/></properties>\n";
        for (const Row& r : rows) {
            if (r.kind + " " + r.subject != suite) continue;
            const PropertyResult& p = r.result;
            x << "    <testcase classname=\"" << xml_escape("attncheck." + r.kind + "." + r.subject) << "\" name=\""
              << xml_escape(p.property) << "\" time=\"" << p.seconds << "\"";
            if (p.status == Status::pass) {
                x << "/>\n";
                continue;
            }
            x << ">\n";
            const std::string first_line = p.message.substr(0, p.message.find('\n'));
            std::string body = p.counterexample + p.message + "\nreplay: " + replay_command(r.replay_flag, p.property, r.params) + "\n";
            if (r.library) body += "replay in a test that calls check_kernel(): " + check_kernel_replay(r) + "\n";
            if (p.status == Status::skipped)
                x << "      <skipped message=\"" << xml_escape(first_line) << "\"/>\n";
            else
                x << "      <" << (p.status == Status::error ? "error" : "failure") << " type=\"" << to_string(p.status)
                  << "\" message=\"" << xml_escape(first_line) << "\">" << xml_escape(body) << "</"
                  << (p.status == Status::error ? "error" : "failure") << ">\n";
            x << "    </testcase>\n";
        }
        x << "  </testsuite>\n";
    }
    x << "</testsuites>\n";
    return x.str();
}

// A --json/--junit path that cannot be written is bad usage, found before the run rather than
// after minutes of it. A file that does not exist yet is created and removed again.
std::string unwritable(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return "is a directory";
        if (::access(path.c_str(), W_OK) != 0) return std::string("cannot write: ") + std::strerror(errno);
        return "";
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return std::string("cannot create: ") + std::strerror(errno);
    ::close(fd);
    ::unlink(path.c_str());
    return "";
}

// Writes text to path; false (errno set) when any part of it could not be written.
bool write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    f.close();
    return !f.fail();
}

bool selected(const Options& o, const std::string& property) {
    return o.properties.empty() || std::find(o.properties.begin(), o.properties.end(), property) != o.properties.end();
}

int kernel_cases(const Options& o) { return o.cases.value_or(kDefaultKernelCases); }
int decoder_cases(const Options& o) { return o.cases.value_or(kDefaultDecoderCases); }

// The decoder-level budget for a kernel; `kernel_failed`: it already failed at kernel level.
// Sets `capped_from` when the budget was lowered for that reason.
int decoder_cases(const Options& o, bool kernel_failed, int& capped_from) {
    capped_from = 0;
    if (o.cases || !kernel_failed || kDefaultDecoderCases <= kCappedDecoderCases) return decoder_cases(o);
    capped_from = kDefaultDecoderCases;
    return kCappedDecoderCases;
}

RunParams run_params(const Options& o, std::uint64_t seed, int cases) { return RunParams{seed, cases, o.shrink_time_s}; }

// The declaration flags of the run, for its replay lines: " --declare '...'" or "".
std::string declare_flag(const Options& o) { return o.declare.empty() ? "" : " --declare '" + o.declare + "'"; }

// What a --kernel-lib kernel declares: its exported <symbol>_declaration, then the flags' items.
KernelDeclaration declaration_of(const LoadedKernel& lk, const Options& o) {
    KernelDeclaration d = KernelDeclaration::parse(lk.declaration);
    d.apply(o.declare);
    return d;
}

void run_kernel_subject(const Options& o, std::uint64_t seed, const KernelUnderTest& k, const std::string& kind,
                        std::vector<Row>& rows, ProgressLine& line, const WorkerChannel* channel = nullptr) {
    if (o.level == "decoder") return;
    for (const KernelProperty& prop : kernel_properties()) {
        if (!selected(o, prop.name)) continue;
        const RunParams params = run_params(o, seed, kernel_cases(o));
        Row row{kind, k.name, "--kernel " + k.name + declare_flag(o), params, {}};
        row.result = run_kernel_property(prop, k, params, line.track("[" + kind + " " + k.name + "] " + prop.name, params.cases), channel);
        line.clear();
        rows.push_back(std::move(row));
    }
}

void run_decoder_subject(const Options& o, const RunParams& params, int capped_from, const DecoderUnderTest& d,
                         const std::string& flag, std::vector<Row>& rows, ProgressLine& line,
                         const WorkerChannel* channel = nullptr) {
    if (o.level == "kernel") return;
    for (const DecoderProperty& prop : decoder_properties()) {
        if (!selected(o, prop.name) || (prop.optimized_only && !d.optimized())) continue;
        Row row{"decoder", d.name, flag, params, {}};
        row.capped_from = capped_from;
        row.result = run_decoder_property(prop, d, params, line.track("[decoder " + d.name + "] " + prop.name, params.cases),
                                          channel);
        line.clear();
        rows.push_back(std::move(row));
    }
}

bool kernel_failed(const std::vector<Row>& rows, const std::string& kernel) {
    for (const Row& r : rows)
        if (r.kind == "kernel" && r.subject == kernel && r.result.status != Status::pass) return true;
    return false;
}

// How many property runs the options select: 0 is bad usage (a run that checks nothing must not
// say "all passed").
int planned_runs(const Options& o, int kernel_subjects, bool reference_decoder, int optimized_decoders) {
    int n = 0;
    if (o.level != "decoder")
        for (const auto& p : kernel_properties()) n += selected(o, p.name) ? kernel_subjects : 0;
    if (o.level != "kernel")
        for (const auto& p : decoder_properties())
            if (selected(o, p.name)) n += optimized_decoders + (reference_decoder && !p.optimized_only ? 1 : 0);
    return n;
}

// The worker's result file: mkstemp in $TMPDIR (else /tmp), removed when the run ends.
class WorkerOutFile {
public:
    WorkerOutFile() {
        const char* dir = std::getenv("TMPDIR");
        const std::string base = dir && *dir ? dir : "/tmp";
        std::string tmpl = base + "/attncheck-worker-XXXXXX.json";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        const int fd = ::mkstemps(buf.data(), 5);
        if (fd < 0)
            throw InputError("cannot create the worker's result file in " + base + " (TMPDIR): " + std::strerror(errno));
        ::close(fd);
        path_ = buf.data();
    }
    ~WorkerOutFile() { std::remove(path_.c_str()); }
    WorkerOutFile(const WorkerOutFile&) = delete;
    WorkerOutFile& operator=(const WorkerOutFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// --kernel-lib in a worker per property: a crash or hang costs that property only. Prints each
// property's verdict as it finishes (a default run takes minutes), with progress on stderr.
void run_library_isolated(const Options& o, std::uint64_t seed, std::vector<Row>& rows) {
    const std::string name = o.symbol;
    std::vector<std::pair<std::string, bool>> props;  // name, is decoder-level
    for (const auto& p : kernel_properties())
        if (selected(o, p.name) && o.level != "decoder") props.push_back({p.name, false});
    for (const auto& p : decoder_properties())
        if (selected(o, p.name) && o.level != "kernel") props.push_back({p.name, true});
    const WorkerOutFile out_file;
    const std::string flag = "--kernel-lib " + o.kernel_lib + " --symbol " + o.symbol + declare_flag(o);
    ProgressLine line(o.progress);
    // After the kernel's first crash or hang, its other properties would most likely crash or
    // hang the same way, each costing a worker start or a whole timeout: they are skipped.
    std::string broken;  // the property where it happened, "" while the kernel has not crashed or hung
    for (const auto& [prop, is_decoder] : props) {
        int capped_from = 0;
        const int cases = is_decoder ? decoder_cases(o, kernel_failed(rows, name), capped_from) : kernel_cases(o);
        const RunParams params = run_params(o, seed, cases);
        const std::string kind = is_decoder ? "decoder" : "kernel";
        const std::string subject = is_decoder ? "optimized[" + name + "]" : name;
        Row base{kind, subject, flag, params, {}};
        base.library = true;
        base.capped_from = capped_from;
        base.result.property = prop;
        if (!broken.empty()) {
            Row row = base;
            row.result.status = Status::skipped;
            row.result.message = "the kernel crashed or timed out earlier, in " + broken;
            rows.push_back(std::move(row));
            continue;
        }
        std::ostringstream shrink_time;
        shrink_time << o.shrink_time_s;
        std::vector<std::string> args = {"fuzz", "--worker", "--kernel-lib", o.kernel_lib, "--symbol", o.symbol,
                                         "--property", prop, "--seed", std::to_string(seed),
                                         "--cases", std::to_string(params.cases), "--shrink-time", shrink_time.str(),
                                         "--worker-out", out_file.path()};
        if (!o.declare.empty()) args.insert(args.end(), {"--declare", o.declare});
        if (std::FILE* f = std::fopen(out_file.path().c_str(), "w")) std::fclose(f);  // empty it
        WorkerOptions wo;
        wo.timeout_s = std::max(kWorkerPropertyTimeoutS, o.timeout_s);
        wo.case_timeout_s = o.timeout_s;
        const std::string label = "[" + kind + " " + subject + "] " + prop;
        const Progress progress = line.track(label, params.cases);
        wo.on_case = [&](const CaseMark& m) {
            if (m.shrink_step == 0) {
                if (progress) progress(int(m.index) - 1);
            } else {
                line.show(label + " shrinking case " + std::to_string(m.index) + ", step " + std::to_string(m.shrink_step));
            }
        };
        const WorkerOutcome w = run_worker(args, wo);
        line.clear();
        if (w.kind == WorkerOutcome::Kind::crashed || w.kind == WorkerOutcome::Kind::timed_out) broken = prop;
        const std::size_t first_new = rows.size();
        if (w.kind == WorkerOutcome::Kind::exited) {
            std::ifstream in(out_file.path());
            nlohmann::json j;
            try {
                if (in && (in >> j) && j.contains("results"))
                    for (const auto& r : j["results"]) {
                        Row row = base;
                        row.kind = r.value("kind", kind);
                        row.subject = r.value("subject", subject);
                        row.result = from_json(r);
                        rows.push_back(std::move(row));
                    }
            } catch (const std::exception&) {
                rows.resize(first_new);
            }
        }
        if (rows.size() == first_new) {
            Row row = base;
            row.result.status = Status::fail;
            row.result.message = "worker " + w.describe();
            if (!w.output_tail.empty()) row.result.message += "\n  worker output (tail):\n" + w.output_tail;
            // The announced case number counts from 1, as "FAIL @N" does.
            if (w.last_case) row.result.failed_at = int(w.last_case->index);
            if (w.last_case) row.result.cases = std::max(0, int(w.last_case->index) - 1);
            row.result.seconds = w.seconds;
            rows.push_back(std::move(row));
        }
        for (std::size_t i = first_new; i < rows.size(); ++i) {
            const Row& r = rows[i];
            line.show(label + " " + std::to_string(r.result.cases) + "/" + std::to_string(params.cases), true);
            line.clear();
            std::cout << label << ": " << cell(r.result);
            if (r.result.status == Status::fail && w.kind != WorkerOutcome::Kind::exited)
                std::cout << " (" << (w.kind == WorkerOutcome::Kind::crashed ? "crashed" : "timed out") << ")";
            std::cout << " in " << seconds_text(r.result.seconds) << " s\n";
        }
        std::cout.flush();
    }
}

int run_mutants(const Options& o, std::uint64_t seed, std::vector<Row>& rows, nlohmann::json& json_out) {
    ProgressLine line(o.progress);
    // The wild types first: the correct kernels the mutants derive from must pass everything,
    // or a "kill" would prove nothing.
    bool controls_ok = true;
    for (const KernelEntry* base : kernels_of(KernelRole::zoo_base))
        run_kernel_subject(o, seed, KernelUnderTest{base->name, base->fn, true}, "control", rows, line);
    for (const Row& r : rows)
        if (r.kind == "control" && r.result.status != Status::pass) controls_ok = false;

    std::cout << "mutant zoo (seed " << seed << ", up to " << kernel_cases(o) << " cases per property)\n";
    std::cout << std::left << std::setw(30) << "mutant" << std::setw(12) << "verdict" << std::setw(20) << "first killed by"
              << std::setw(8) << "cases" << "also killed by\n";
    int survivors = 0;
    std::vector<int> kill_cases;
    const std::vector<const KernelEntry*> mutants = kernels_of(KernelRole::mutant);
    for (const KernelEntry* mp : mutants) {
        const KernelEntry& m = *mp;
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
    std::cout << "\n" << mutants.size() - std::size_t(survivors) << " of " << mutants.size()
              << " mutants killed; median cases to the first kill: " << median << "\n";
    json_out["median_cases_to_kill"] = median;
    if (!controls_ok) {
        std::cout << "\nthe zoo's correct base kernels FAILED a property (a kill proves nothing then):\n";
        std::map<std::string, std::string> seen;
        for (const Row& r : rows)
            if (r.kind == "control" && r.result.status != Status::pass) print_failure(std::cout, r, seen);
    }
    return survivors == 0 && controls_ok ? 0 : 1;
}

int worker_main(const Options& o, std::uint64_t seed) {
    // Runs in the child: one kernel from a library, in process, results to --worker-out.
    const LoadedKernel lk = load_kernel_library(o.kernel_lib, o.symbol);
    const WorkerChannel channel = WorkerChannel::from_environment();
    std::vector<Row> rows;
    ProgressLine line;
    const KernelDeclaration declaration = declaration_of(lk, o);
    const KernelUnderTest k{o.symbol, lk.fn, false, declaration};
    run_kernel_subject(o, seed, k, "kernel", rows, line, &channel);
    run_decoder_subject(o, run_params(o, seed, decoder_cases(o)), 0,
                        DecoderUnderTest{"optimized[" + o.symbol + "]", lk.fn, declaration}, "", rows, line, &channel);
    nlohmann::json j;
    j["results"] = nlohmann::json::array();
    bool ok = true;
    for (const Row& r : rows) {
        j["results"].push_back(to_json(r));
        ok &= r.result.status == Status::pass;
    }
    if (!o.worker_out.empty() && !write_file(o.worker_out, j.dump() + "\n"))
        std::cerr << "attncheck fuzz --worker: cannot write " << o.worker_out << ": " << std::strerror(errno) << "\n";
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
            if (const KernelEntry* e = find_kernel(name)) kernels.push_back({e->name, e->fn, true});
            else {
                std::string known;
                for (const KernelEntry* e : kernels_of(KernelRole::builtin)) known += " " + e->name;
                std::cerr << "attncheck fuzz: --kernel " << name << ": no such kernel (built-ins:" << known
                          << "; or a mutant name from --mutants)\n";
                return 2;
            }
        }
        // Clear errors up front (the library, its declaration and the flags over it).
        std::string declared = KernelDeclaration::parse(o.declare).to_string();
        if (!o.kernel_lib.empty()) declared = declaration_of(load_kernel_library(o.kernel_lib, o.symbol), o).to_string();
        const bool everything = !o.mutants && !o.kernel_flag && o.kernel_lib.empty() && !o.decoder;
        if (everything)
            for (const KernelEntry* e : kernels_of(KernelRole::builtin)) kernels.push_back({e->name, e->fn, true});
        // A built-in's registry declaration, then the flags' items over it.
        for (auto& k : kernels) {
            k.declaration = KernelDeclaration::parse(find_kernel(k.name)->declaration);
            k.declaration.apply(o.declare);
        }

        const int library = o.kernel_lib.empty() ? 0 : 1;
        const int planned = o.mutants ? planned_runs(o, 1, false, 0)
                                      : planned_runs(o, int(kernels.size()) + library, everything || o.decoder.has_value(),
                                                     int(kernels.size()) + library);
        if (planned == 0) {
            std::string filter;
            if (!o.properties.empty()) {
                filter = "--property ";
                for (std::size_t i = 0; i < o.properties.size(); ++i) filter += (i ? "," : "") + o.properties[i];
            }
            if (!o.level.empty()) filter += (filter.empty() ? "" : " with ") + std::string("--level ") + o.level;
            std::cerr << "attncheck fuzz: no property selected: " << filter
                      << " leaves nothing to run on the selected subjects"
                      << (o.decoder && !o.properties.empty() ? " (the reference decoder has no kernel-level properties)" : "")
                      << "; see attncheck fuzz --list\n";
            return 2;
        }
        for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--json", o.json}, {"--junit", o.junit}}) {
            if (path.empty()) continue;
            const std::string why = unwritable(path);
            if (!why.empty()) {
                std::cerr << "attncheck fuzz: " << flag << " " << path << ": " << why << "\n";
                return 2;
            }
        }

        std::cout << "attncheck fuzz: seed " << seed << "; " << isa_line() << std::endl;
        if (!declared.empty()) std::cout << "declared: " << declared << std::endl;
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<Row> rows;
        nlohmann::json json_out;
        json_out["schema_version"] = kJsonSchemaVersion;
        json_out["seed"] = seed;
        json_out["isa"] = isa_line();
        int code = 0;
        ProgressLine line(o.progress);
        if (o.mutants) {
            code = run_mutants(o, seed, rows, json_out);
        } else {
            for (const auto& k : kernels) run_kernel_subject(o, seed, k, "kernel", rows, line);
            if (everything || o.decoder)
                run_decoder_subject(o, run_params(o, seed, decoder_cases(o)), 0, DecoderUnderTest{"reference", nullptr},
                                    "--decoder reference", rows, line);
            for (const auto& k : kernels) {
                int capped_from = 0;
                const int cases = decoder_cases(o, kernel_failed(rows, k.name), capped_from);
                run_decoder_subject(o, run_params(o, seed, cases), capped_from,
                                    DecoderUnderTest{"optimized[" + k.name + "]", k.fn, k.declaration},
                                    "--kernel " + k.name + declare_flag(o),
                                    rows, line);
            }
            if (!o.kernel_lib.empty()) run_library_isolated(o, seed, rows);

            print_table(std::cout, rows, "kernel", "kernel property");
            print_table(std::cout, rows, "decoder", "decoder property");
            std::vector<std::string> capped;
            for (const Row& r : rows) {
                if (r.result.status != Status::pass && !(r.result.status == Status::not_checked && o.allow_unchecked))
                    code = 1;
                if (!r.result.warning.empty())
                    std::cout << "warning: " << r.subject << " / " << r.result.property << ": " << r.result.warning << "\n";
                if (r.result.notes)
                    std::cout << "note: " << r.subject << " / " << r.result.property << ": " << r.result.notes
                              << " case(s): " << r.result.note << "\n";
                if (r.capped_from && std::find(capped.begin(), capped.end(), r.subject) == capped.end()) {
                    capped.push_back(r.subject);
                    std::cout << "note: " << r.subject << ": decoder-level properties ran " << r.params.cases
                              << " cases each, not " << r.capped_from
                              << ": the kernel already failed at kernel level (--cases N runs them in full)\n";
                }
            }
            std::map<std::string, std::string> seen;
            for (const Row& r : rows)
                if (r.result.status != Status::pass && r.result.status != Status::skipped) print_failure(std::cout, r, seen);
            print_skipped(std::cout, rows);
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
        std::cout.flush();
        // A file that cannot be written is exit 2, unless a check failed: that verdict (1) is
        // what a CI job must see.
        const auto written = [&](const std::string& flag, const std::string& path, const std::string& text) {
            if (path.empty() || write_file(path, text)) return;
            std::cerr << "attncheck fuzz: " << flag << " " << path << ": cannot write: " << std::strerror(errno) << "\n";
            if (code == 0) code = 2;
        };
        if (!o.json.empty()) {
            json_out["results"] = nlohmann::json::array();
            for (const Row& r : rows) json_out["results"].push_back(to_json(r));
            json_out["seconds"] = seconds;
            json_out["passed"] = code == 0;
            written("--json", o.json, json_out.dump(2) + "\n");
        }
        written("--junit", o.junit, junit_xml(rows, seed, seconds));
        return code;
    } catch (const InputError& e) {
        std::cerr << "attncheck fuzz: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace attncheck::properties
