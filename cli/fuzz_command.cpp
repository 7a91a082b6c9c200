// cli/fuzz_command.cpp — `attncheck fuzz`: its flags, their values checked (a bad value is exit
// 2 with "attncheck fuzz: ..."), the environment's defaults, then properties::run_fuzz.
//
// ATTNCHECK_SEED, ATTNCHECK_CASES and ATTNCHECK_PROPERTY set what the flags leave open, as for
// check_kernel() (properties/check.cpp); a flag overrides its variable. The hidden --worker and
// --worker-out start the worker side of a --kernel-lib run (properties/fuzz_library.cpp).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/declaration.hpp"
#include "cli/commands.hpp"
#include "properties/fuzz.hpp"
#include "properties/fuzz_parallel.hpp"
#include "properties/property_runs.hpp"

namespace attncheck::cli {
namespace {

using properties::FuzzOptions;
using properties::Level;

// The flags as given, before their values are checked.
struct FuzzArgs {
    std::vector<std::string> kernels, properties;
    std::vector<std::string> declare, empty_rows, head_dim, deterministic;
    std::string decoder, level, cases, seed, shrink_time, timeout;
    std::string rounds, duration, shard, checkpoint_every, jobs;
    bool list = false, worker = false;
    FuzzOptions o;  // the flags that need no checking are stored here directly
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

int parse_cases(const std::string& flag, const std::string& text) {
    constexpr long long lo = 1, hi = 100000000;
    try {
        std::size_t used = 0;
        const long long v = std::stoll(text, &used);
        if (used == text.size() && v >= lo && v <= hi) return int(v);
    } catch (const std::exception&) {
    }
    throw UsageError(flag + (flag.back() == '=' ? "" : " ") + text + ": expected an integer in [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
}

// --jobs N: 1 .. kMaxJobs processes.
int parse_jobs(const std::string& text) {
    try {
        std::size_t used = 0;
        const long v = std::stol(text, &used);
        if (used == text.size() && v >= 1 && v <= properties::kMaxJobs) return int(v);
    } catch (const std::exception&) {
    }
    throw UsageError("--jobs " + text + ": expected an integer in [1, " + std::to_string(properties::kMaxJobs) +
                     "] (processes running property runs at once)");
}

// Seconds in (0 or more, per `zero_ok`) .. 86400; `what` ends the error message.
double parse_seconds(const std::string& flag, const std::string& v, bool zero_ok, const std::string& what) {
    try {
        std::size_t used = 0;
        const double s = std::stod(v, &used);
        if (used == v.size() && (zero_ok ? s >= 0 : s > 0) && s <= 86400) return s;
    } catch (const std::exception&) {
    }
    throw UsageError(flag + " " + v + ": " + what);
}

// A duration: "90s", "30m", "8h", "1h30m", "2d" or plain seconds ("45"); more than 0 and at most
// 30 days.
double parse_duration(const std::string& flag, const std::string& v) {
    const std::string what = flag + " " + v + ": expected a duration such as 90s, 30m, 8h or 1h30m (at most 30 days)";
    double total = 0;
    std::size_t i = 0;
    while (i < v.size()) {
        std::size_t used = 0;
        double n = 0;
        try {
            if (!std::isdigit(static_cast<unsigned char>(v[i]))) throw UsageError(what);
            n = std::stod(v.substr(i), &used);
        } catch (const std::exception&) {
            throw UsageError(what);
        }
        // A number without a unit is seconds, and only as the whole value ("1h30" is refused).
        if (i > 0 && i + used == v.size() && v.find_first_not_of("0123456789.") != std::string::npos) throw UsageError(what);
        i += used;
        const char unit = i < v.size() ? v[i++] : 's';
        const double scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400 : 0;
        if (scale == 0) throw UsageError(what);
        total += n * scale;
    }
    if (!(total > 0) || total > 30 * 86400.0) throw UsageError(what);
    return total;
}

// --shard I/N: 0 <= I < N <= 100000.
void parse_shard(const std::string& v, int& index, int& count) {
    const std::size_t slash = v.find('/');
    try {
        std::size_t a = 0, b = 0;
        if (slash != std::string::npos && slash > 0 && slash + 1 < v.size() && v[0] != '-' && v[slash + 1] != '-') {
            const long i = std::stol(v.substr(0, slash), &a), n = std::stol(v.substr(slash + 1), &b);
            if (a == slash && b == v.size() - slash - 1 && n >= 1 && n <= 100000 && i >= 0 && i < n) {
                index = int(i);
                count = int(n);
                return;
            }
        }
    } catch (const std::exception&) {
    }
    throw UsageError("--shard " + v + ": expected I/N with 0 <= I < N (shards count from 0), e.g. 0/4");
}

// The declaration items of --declare, --empty-rows, --head-dim and --deterministic, in the
// order they were given (a later item overrides an earlier one), joined by "; ".
std::string declaration_items(const CLI::App& sub, const FuzzArgs& a) {
    const std::map<std::string, std::pair<const std::vector<std::string>*, std::string>> flags = {
        {"--declare", {&a.declare, ""}},
        {"--empty-rows", {&a.empty_rows, "empty_rows="}},
        {"--head-dim", {&a.head_dim, "head_dim="}},
        {"--deterministic", {&a.deterministic, "deterministic="}}};
    std::map<std::string, std::size_t> used;
    std::string items;
    for (const CLI::Option* opt : sub.parse_order()) {
        const auto it = flags.find(opt->get_name());
        if (it == flags.end()) continue;
        const std::string& v = (*it->second.first)[used[it->first]++];
        const std::string item = it->second.second + v;
        try {
            (void)KernelDeclaration::parse(item);
        } catch (const std::invalid_argument& e) {
            throw UsageError(it->first + " " + v + ": " + e.what());
        }
        items += (items.empty() ? "" : "; ") + item;
    }
    return items;
}

// The flags' values checked and combined with each other.
void check_flags(const CLI::App& sub, FuzzArgs& a) {
    FuzzOptions& o = a.o;
    o.kernels = a.kernels;
    for (const std::string& list : a.properties) {
        add_property_list(list, o.properties);
        if (o.properties.empty()) throw UsageError("--property needs a property name");
    }
    if (!a.level.empty()) {
        if (a.level != "kernel" && a.level != "decoder")
            throw UsageError("--level " + a.level + ": expected kernel or decoder");
        o.level = a.level == "kernel" ? Level::kernel : Level::decoder;
    }
    if (!a.cases.empty()) o.cases = parse_cases("--cases", a.cases);
    if (!a.seed.empty()) o.seed = parse_seed("--seed " + a.seed, a.seed);
    o.jobs = sub.count("--jobs") ? parse_jobs(a.jobs) : properties::default_jobs();
    if (!a.shrink_time.empty())
        o.shrink_time_s = parse_seconds("--shrink-time", a.shrink_time, true, "expected seconds, from 0 (no limit) to 86400");
    if (!a.timeout.empty())
        o.timeout_s = parse_seconds("--timeout", a.timeout, false, "expected seconds, more than 0 and at most 86400");
    o.declare = declaration_items(sub, a);
    if (!o.kernel_lib.empty() && o.symbol.empty()) throw UsageError("--kernel-lib needs --symbol NAME");
    if (o.kernel_lib.empty() && !o.symbol.empty()) throw UsageError("--symbol needs --kernel-lib PATH");
    if (sub.count("--decoder") && a.decoder != "reference")
        throw UsageError("--decoder " + a.decoder + ": only 'reference' (the optimized decoder is --kernel NAME)");
    o.reference_decoder = sub.count("--decoder") > 0;
    if (o.mutants && (!o.kernels.empty() || !o.kernel_lib.empty() || o.reference_decoder))
        throw UsageError("--mutants runs the zoo; it does not combine with --kernel, --kernel-lib or --decoder");
    if (o.mutants && !o.junit.empty()) throw UsageError("--junit does not combine with --mutants (use --json)");
    if (!a.rounds.empty()) o.rounds = parse_cases("--rounds", a.rounds);
    if (!a.duration.empty()) o.duration_s = parse_duration("--duration", a.duration);
    if (!a.shard.empty()) parse_shard(a.shard, o.shard_index, o.shard_count);
    if (!a.checkpoint_every.empty()) {
        o.checkpoint_every_s = parse_duration("--checkpoint-every", a.checkpoint_every);
        if (o.json.empty()) throw UsageError("--checkpoint-every writes the --json report: give --json FILE");
    }
    if (o.mutants && (o.campaign() || !o.corpus.empty()))
        throw UsageError("--mutants runs the zoo once; --rounds, --duration, --shard and --corpus are for kernels and decoders");
    if (o.corpus_prune && o.corpus.empty()) throw UsageError("--corpus-prune needs --corpus DIR");
}

// RapidCheck's RC_PARAMS ("seed=S max_success=N ..."), which a user replaying a test binary's
// failure may have set: its seed and max_success are read as --seed and --cases (after the flags
// and ATTNCHECK_*), each said on stderr; any other setting is said to be ignored.
void apply_rc_params(FuzzOptions& o) {
    const char* env = std::getenv("RC_PARAMS");
    if (!env) return;
    std::istringstream items(env);
    for (std::string item; items >> item;) {
        const std::size_t eq = item.find('=');
        const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
        if (key == "seed") {
            if (o.seed) continue;
            o.seed = parse_seed("RC_PARAMS seed=" + value, value);
            std::cerr << "attncheck fuzz: RC_PARAMS: seed=" << value << " read as --seed " << value << "\n";
        } else if (key == "max_success") {
            if (o.cases) continue;
            o.cases = parse_cases("RC_PARAMS max_success=", value);
            std::cerr << "attncheck fuzz: RC_PARAMS: max_success=" << value << " read as --cases " << value << "\n";
        } else {
            std::cerr << "attncheck fuzz: RC_PARAMS: " << item
                      << " ignored (only seed and max_success are read, as --seed and --cases)\n";
        }
    }
}

// The environment fills in what the flags left open (as CheckOptions::from_environment).
void apply_environment(FuzzOptions& o) {
    if (!o.seed)
        if (const char* v = std::getenv("ATTNCHECK_SEED")) o.seed = parse_seed(std::string("ATTNCHECK_SEED=") + v, v);
    if (!o.cases)
        if (const char* v = std::getenv("ATTNCHECK_CASES")) o.cases = parse_cases("ATTNCHECK_CASES=", v);
    apply_rc_params(o);
    bool from_env = false;
    if (o.properties.empty())
        if (const char* v = std::getenv("ATTNCHECK_PROPERTY")) {
            add_property_list(v, o.properties);
            from_env = !o.properties.empty();
        }
    for (std::string& name : o.properties) {
        name = properties::canonical_property_name(name);
        if (!properties::is_property(name))
            throw UsageError((from_env ? "ATTNCHECK_PROPERTY: " : "--property ") + name +
                             ": no such property (see attncheck fuzz --list)");
    }
}

int run(const CLI::App& sub, FuzzArgs& a) {
    try {
        check_flags(sub, a);
        // --list works whatever the environment holds.
        if (a.list) {
            properties::print_property_list(std::cout);
            return 0;
        }
        apply_environment(a.o);
    } catch (const UsageError& e) {
        std::cerr << "attncheck fuzz: " << e.what() << "\n";
        return 2;
    }
    return a.worker ? properties::run_fuzz_worker(a.o) : properties::run_fuzz(a.o);
}

void add_selection_options(CLI::App* sub, FuzzArgs& a) {
    sub->add_option("--kernel", a.kernels,
                    "Only this kernel (a built-in, a mutant or a zoo base name; repeatable) and the optimized decoder "
                    "with it")
        ->type_name("NAME")->allow_extra_args(false);
    sub->add_option("--decoder", a.decoder, "Only the reference decoder (NAME = reference)")->type_name("NAME");
    sub->add_option("--kernel-lib", a.o.kernel_lib,
                    "A kernel from a shared library (with --symbol), run in a worker process per property; each "
                    "property's verdict is printed as it finishes")
        ->type_name("PATH");
    sub->add_option("--symbol", a.o.symbol, "The kernel's exported (extern \"C\") symbol in --kernel-lib")
        ->type_name("NAME");
    sub->add_option("--timeout", a.timeout,
                    "--kernel-lib: a case that runs longer is a hang (default 20); after a kernel's first crash or "
                    "timeout its remaining properties are skipped")
        ->type_name("SECONDS");
    sub->add_option("--property", a.properties,
                    "Only these properties (repeatable; names: see --list); selecting no property at all is bad usage")
        ->type_name("P[,P...]")->allow_extra_args(false);
    sub->add_option("--level", a.level, "Only kernel-level or only decoder-level properties (L = kernel | decoder)")
        ->type_name("L");
    sub->add_flag("--mutants", a.o.mutants, "Run the mutant zoo: every mutant must be killed (exit 0 only if all are)");
    sub->add_flag("--list", a.list, "List the properties and what each catches");
}

void add_budget_options(CLI::App* sub, FuzzArgs& a) {
    sub->add_option("--cases", a.cases,
                    "Cases per property (default: 300 per kernel property, 40 per decoder property; 10 per decoder "
                    "property of a kernel that failed at kernel level, unless --cases or ATTNCHECK_CASES is given)")
        ->type_name("N");
    sub->add_option("--seed", a.seed, "RapidCheck seed (default: time-based, printed)")->type_name("S");
    sub->add_option("--jobs", a.jobs,
                    "Property runs at once, each worker a process of its own (default: the CPUs this process may run "
                    "on, at most 8; here " + std::to_string(properties::default_jobs()) +
                        "); the report is the same as --jobs 1's, which runs them in this process, in order. "
                        "Campaigns (--rounds, --duration, --shard, --corpus) and --mutants run serially; a "
                        "--kernel-lib kernel's runs stay in one worker, in order")
        ->type_name("N");
    sub->add_option("--shrink-time", a.shrink_time,
                    "Seconds of shrinking per failed property (default 5; 0: no limit); past it the smallest "
                    "counterexample so far is reported, marked as such")
        ->type_name("S");
    sub->add_option("--declare", a.declare,
                    "What the kernel declares (e.g. \"head_dim=64,128; empty_rows=nan\"; see docs/kernel-authors.md), "
                    "over a --kernel-lib's exported <symbol>_declaration; the cases are fitted to it and problems "
                    "outside it must be refused")
        ->type_name("ITEMS")->allow_extra_args(false);
    sub->add_option("--empty-rows", a.empty_rows, "The same as --declare empty_rows=...")
        ->type_name("zero|nan")->allow_extra_args(false);
    sub->add_option("--head-dim", a.head_dim, "The same as --declare head_dim=...")
        ->type_name("LIST")->allow_extra_args(false);
    sub->add_option("--deterministic", a.deterministic, "The same as --declare deterministic=...")
        ->type_name("yes|no")->allow_extra_args(false);
    sub->add_option("--rounds", a.rounds,
                    "Campaign: run the selection R times, round r at a seed derived from --seed (round 0 at --seed "
                    "itself); with --shard, R rounds per shard")
        ->type_name("R");
    sub->add_option("--duration", a.duration,
                    "Campaign: keep running rounds until this much time is spent (90s, 30m, 8h, 1h30m; with --rounds, "
                    "whichever ends first); the property run in flight finishes first. SIGINT/SIGTERM stop a campaign "
                    "the same way, dropping the run in flight")
        ->type_name("D");
    sub->add_option("--shard", a.shard,
                    "Campaign: this process runs shard I of N (I from 0): every Nth property run of the campaign, so "
                    "N shards with one --seed cover one run of N times the rounds; attncheck report merge joins them")
        ->type_name("I/N");
    sub->add_option("--corpus", a.o.corpus,
                    "Failure corpus: every new failure's shrunk case is saved in DIR (a JSON file each), and every "
                    "entry is replayed first on later runs, as its one case (a refused file is named, never run)")
        ->type_name("DIR");
    sub->add_flag("--corpus-prune", a.o.corpus_prune, "Delete the corpus entries that pass now (default: kept, said fixed)");
    sub->add_option("--checkpoint-every", a.checkpoint_every,
                    "Campaign: rewrite the --json report this often while it runs (default 10m)")
        ->type_name("D");
    sub->add_flag("--allow-unchecked", a.o.allow_unchecked,
                  "A property with fewer than 10 supported cases (NOT CHECKED) does not fail the run (it is still "
                  "reported)");
}

void add_output_options(CLI::App* sub, FuzzArgs& a) {
    sub->add_option("--json", a.o.json, "Write the results as JSON (schema: docs/cli.md)")->type_name("FILE");
    sub->add_option("--junit", a.o.junit, "Write the results as JUnit XML (a testsuite per subject; not with --mutants)")
        ->type_name("FILE");
    sub->add_flag("--progress", a.o.progress, "Cases done per property on stderr (always shown when it is a terminal)");
    sub->add_flag("--verbose", a.o.verbose, "Print the input spread (RC_TAG) of every property that passed");
    // The worker side of --kernel-lib (properties/isolation/isolation.hpp): not for people.
    sub->add_flag("--worker", a.worker)->group("");
    sub->add_option("--worker-out", a.o.worker_out)->group("");
    sub->add_option("--reproduce", a.o.reproduce)->group("");
}

}  // namespace

Command add_fuzz_command(CLI::App& app) {
    auto a = std::make_shared<FuzzArgs>();
    CLI::App* sub = app.add_subcommand(
        "fuzz", "Property-test attention kernels (through the C ABI) and decoders against the float64 reference");
    sub->footer(
        "With no options: every built-in kernel, the reference decoder and the optimized decoder with each built-in "
        "kernel, at the default budget; prints a table property x subject.\n\n"
        "Environment: ATTNCHECK_SEED, ATTNCHECK_CASES, ATTNCHECK_PROPERTY (comma list) as --seed, --cases, "
        "--property; a flag overrides its variable. RapidCheck's RC_PARAMS: its seed= and max_success= are read as "
        "--seed and --cases after those (and said on stderr), its other settings ignored. TMPDIR: where --kernel-lib's "
        "worker writes. The files of --json "
        "and --junit are checked before the run starts.\n\n"
        "Exit: 0 every property passed (every mutant killed), 1 something failed or was not checked (fewer than 10 "
        "supported cases; more than 20% unsupported prints a warning), 2 bad usage (or a --json/--junit file that "
        "could not be written, unless something failed: then 1).\n"
        "A failure prints the shrunk case and `attncheck fuzz ... --property P --seed S --cases N` to replay it; for "
        "--kernel-lib also `ATTNCHECK_SEED=S ATTNCHECK_CASES=N ATTNCHECK_PROPERTY=P <test binary>`, which replays it "
        "in a test that calls check_kernel() on the same kernel. A crash names the case (numbered as failures are) "
        "and its shape; the properties skipped after it are listed on one line. A shrunk case shared by several "
        "failures is printed once.");
    // A single-valued flag given twice takes its last value; a repeatable one keeps every value.
    sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    add_selection_options(sub, *a);
    add_budget_options(sub, *a);
    add_output_options(sub, *a);
    for (const char* name : {"--kernel", "--property", "--declare", "--empty-rows", "--head-dim", "--deterministic"})
        sub->get_option(name)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    return {sub, [sub, a] { return run(*sub, *a); }};
}

}  // namespace attncheck::cli
