// properties/fuzz.hpp — `attncheck fuzz` as a library call: the options of a run, and the run
// itself (what runs, in what order, the verdict). The command line that fills FuzzOptions is
// cli/fuzz_command.cpp; the reports are properties/fuzz_report.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::properties {

// The default budget: cases per property. Measured on the 2-core development machine the whole
// default run (2 kernels x 11 properties, 3 decoders x 6-7, with the large-shape tiers) takes
// 10-20 s (see docs/properties.md for the numbers).
inline constexpr int kDefaultKernelCases = 300;
inline constexpr int kDefaultDecoderCases = 40;
// Once a kernel has failed at kernel level its decoder-level properties only add evidence that
// it is broken: they run at most this many cases each (unless --cases or ATTNCHECK_CASES asks).
inline constexpr int kCappedDecoderCases = 10;
// A worker process (one property of a --kernel-lib kernel) is killed when one case takes longer
// than the case timeout (--timeout; a hang is caught within it), or the whole property longer
// than the property timeout (a kernel that makes progress, only too slowly to finish).
inline constexpr double kWorkerCaseTimeoutS = 20;
inline constexpr double kWorkerPropertyTimeoutS = 600;
// Shrinking a failure is bounded in wall-clock time per property: a decoder case of a broken
// kernel can take seconds per shrink step at d=256 h=8 T=80, and RapidCheck would spend minutes
// on it. Past the budget the smallest counterexample found so far is reported.
inline constexpr double kDefaultShrinkBudgetS = 5;

// Which properties run (--level): both levels, or only one.
enum class Level { all, kernel, decoder };
const char* to_string(Level level);

struct FuzzOptions {
    std::vector<std::string> kernels;     // --kernel: registry names (kernels/registry.hpp)
    bool reference_decoder = false;       // --decoder reference
    std::string kernel_lib, symbol;       // --kernel-lib PATH --symbol NAME
    std::vector<std::string> properties;  // empty = all
    Level level = Level::all;
    std::optional<int> cases;             // empty: the default budgets above
    std::optional<std::uint64_t> seed;    // empty: time-based
    double timeout_s = kWorkerCaseTimeoutS;
    double shrink_time_s = kDefaultShrinkBudgetS;
    bool mutants = false, verbose = false, progress = false, allow_unchecked = false;
    // Declaration items (--declare and its shorthands, in command-line order), applied over a
    // built-in's registry declaration or what a --kernel-lib library exports.
    std::string declare;
    std::string json, junit;  // "" = not written
    std::string worker_out;   // the worker's result file (run_fuzz_worker)
    // --jobs: the property runs of a plain run shared out among this many processes
    // (properties/fuzz_parallel.hpp); 1 runs them here, in order. Campaigns and --mutants run
    // serially whatever it says.
    int jobs = 1;

    // Campaigns (properties/campaign.hpp, docs/cli.md "Campaigns"). Any of rounds, duration_s
    // or a shard makes the run a campaign: rounds of the whole selection, each at its own seed.
    std::optional<int> rounds;       // --rounds (with --duration: whichever ends first)
    double duration_s = 0;           // --duration; 0: none
    int shard_index = 0, shard_count = 1;  // --shard I/N
    double checkpoint_every_s = 600;       // --checkpoint-every: --json rewritten this often
    std::string corpus;                    // --corpus DIR: failures saved there, replayed first
    bool corpus_prune = false;             // --corpus-prune: an entry that passes now is deleted
    std::string reproduce;  // the worker's case to run again (RunParams::reproduce), hidden --reproduce
    // Which property runs this process takes, asked before each one (kind "kernel", "decoder",
    // ...; the subject as the rows name it): a campaign's shard and a corpus replay choose
    // through it. Empty: every selected run. A take that returns false skips that run.
    std::function<bool(const std::string& kind, const std::string& subject, const std::string& property)> take;
    bool campaign() const { return rounds || duration_s > 0 || shard_count > 1; }
};

// The run: prints the report on stdout and returns the exit code: 0 every property passed (with
// mutants: every mutant killed), 1 something failed or was not checked, 2 a selection that runs
// nothing, an unknown kernel, a --json/--junit file that cannot be written (messages on stderr,
// as "attncheck fuzz: ...").
int run_fuzz(const FuzzOptions& o);
// The --kernel-lib worker (properties/isolation/isolation.hpp): one kernel from the library, in this
// process, its results as JSON to o.worker_out. 0 all passed, 1 otherwise.
int run_fuzz_worker(const FuzzOptions& o);
// --list: the properties of each level and what each catches.
void print_property_list(std::ostream& os);

}  // namespace attncheck::properties
