// properties/fuzz_run.hpp — the pieces `attncheck fuzz` runs with (properties/fuzz.cpp, and the
// --kernel-lib workers of properties/fuzz_library.cpp): the budgets, the progress line, and the
// properties of one subject run into report rows.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/declaration.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/fuzz.hpp"
#include "properties/fuzz_report.hpp"
#include "properties/isolation/isolation.hpp"
#include "properties/isolation/kernel_lib.hpp"
#include "properties/kernel_properties.hpp"

namespace attncheck::properties {

// The progress line: "[kernel optimized] causality 120/300" on stderr, rewritten in place on a
// terminal (at most every 100 ms); with --progress and no terminal, a plain line at most every
// second (a CI log keeps every line).
class ProgressLine {
public:
    explicit ProgressLine(bool forced = false);
    // Turns off every progress line of this process, from now on (a --jobs worker process: its
    // parent shows one line for all of them).
    static void turn_off_in_this_process();
    Progress track(const std::string& label, int total);
    // Any other state of the run ("... shrinking case 17, step 4").
    void show(const std::string& text, bool force = false);
    void clear();

private:
    bool tty_, on_;
    std::chrono::steady_clock::time_point last_{};
};

// RapidCheck prints "Using configuration: seed=..." when it first loads its global
// configuration; the run's seed is the one that matters (printed by the run), so this loads it
// quietly. Called first by run_fuzz and run_fuzz_worker.
void quiet_rapidcheck_configuration();
// The run's seed: --seed (or ATTNCHECK_SEED), else time-based.
std::uint64_t run_seed(const FuzzOptions& o);

// "[kernel optimized] causality": what the progress line and a worker's verdict line start with.
std::string progress_label(RowKind kind, const std::string& subject, const std::string& property);

// Whether the options select the property (no --property selects every one).
bool selected(const FuzzOptions& o, const std::string& property);
int kernel_cases(const FuzzOptions& o);
int decoder_cases(const FuzzOptions& o);
// The decoder-level budget for a kernel; `kernel_failed`: it already failed at kernel level.
// Sets `capped_from` when the budget was lowered for that reason.
int decoder_cases(const FuzzOptions& o, bool kernel_failed, int& capped_from);
RunParams run_params(const FuzzOptions& o, std::uint64_t seed, int cases);
// Whether this process runs the property run (FuzzOptions::take; true when it is empty).
bool takes(const FuzzOptions& o, RowKind kind, const std::string& subject, const std::string& property);
// The declaration flags of the run, for its replay lines: " --declare '...'" or "".
std::string declare_flag(const FuzzOptions& o);
// What a --kernel-lib kernel declares: its exported <symbol>_declaration, then the flags' items.
KernelDeclaration declaration_of(const LoadedKernel& lk, const FuzzOptions& o);

// Every kernel-level property of a kernel of that version with this declaration, by name, with
// why it is not applicable to it ("" when it is: not_applicable()).
std::vector<std::pair<std::string, std::string>> kernel_properties_by_applicability(bool v2,
                                                                                   const KernelDeclaration& declaration);
// The names of the kernel-level properties of a kernel of that version with this declaration
// (those not_applicable to it left out).
std::vector<std::string> kernel_property_names(bool v2, const KernelDeclaration& declaration);
// The selected kernel-level properties of kernel k (version 1's or version 2's, by k.fn_v2),
// appended to rows as `kind` rows.
void run_kernel_subject(const FuzzOptions& o, std::uint64_t seed, const KernelUnderTest& k, RowKind kind,
                        std::vector<Row>& rows, ProgressLine& line, const WorkerChannel* channel = nullptr);
// The selected decoder-level properties of decoder d; `flag` selects it in the replay lines.
void run_decoder_subject(const FuzzOptions& o, const RunParams& params, int capped_from, const DecoderUnderTest& d,
                         const std::string& flag, std::vector<Row>& rows, ProgressLine& line,
                         const WorkerChannel* channel = nullptr);
// Whether `kernel` failed (or was not checked on) some kernel-level property in rows.
bool kernel_failed(const std::vector<Row>& rows, const std::string& kernel);
// A kernel of the run, as planned_runs() counts it: its version, its declaration, and whether the
// optimized decoder runs around it (its declaration allows, decoder_unavailable).
struct PlannedKernel {
    bool v2 = false;
    KernelDeclaration declaration;
    bool decoder = false;
    std::string no_decoder;  // why there is no decoder-level run ("" when decoder)
};
// How many property runs the options select, those not applicable to a kernel's declaration
// left out: 0 is bad usage (a run that checks nothing must not say "all passed").
int planned_runs(const FuzzOptions& o, const std::vector<PlannedKernel>& kernels, bool reference_decoder);

// A kernel run in a worker process per property (properties/fuzz_library.cpp): a crash or hang
// costs that property only.
struct IsolatedSubject {
    std::string name;                      // the kernel's name in the rows
    std::vector<std::string> worker_args;  // how the worker finds it: --kernel-lib P --symbol S, or --kernel NAME
    std::string flag;                      // the same for the replay lines
    bool v2 = false;                       // the version 2 properties
    KernelDeclaration declaration;
    bool decoder_level = false;            // also the decoder-level properties (in the optimized decoder)
    RowKind kind = RowKind::kernel;
    bool library = true;                   // the rows say "library" (replay through check_kernel() too)
    bool verdict_lines = true;             // print each property's verdict as it finishes
};
void run_isolated(const FuzzOptions& o, std::uint64_t seed, const IsolatedSubject& subject, std::vector<Row>& rows);

// The selected kernels (in process, or isolated when a registry entry reads out of bounds), the
// reference decoder when asked, the optimized decoder around each kernel, then --kernel-lib's
// kernel: every selected property run of them appended to rows (properties/fuzz.cpp).
void collect_subjects(const FuzzOptions& o, std::uint64_t seed, const std::vector<KernelUnderTest>& kernels,
                      bool reference_decoder, std::vector<Row>& rows);
// The tables of `table` (one row per property and subject), its notes, the failures of `rows`
// (each with its replay line) and the skipped runs; the exit code of the verdict (0 or 1).
int report_rows(const FuzzOptions& o, const std::vector<Row>& table, const std::vector<Row>& rows);
// The closing line, then --json (json_out with the rows' results) and --junit (of junit_rows
// when given: a campaign's one testcase per property and subject). A file that cannot be written
// is exit 2, unless a check failed: that verdict (1) is what CI must see.
int finish(const FuzzOptions& o, std::uint64_t seed, double seconds, const std::vector<Row>& rows,
           nlohmann::json& json_out, int code, const std::vector<Row>* junit_rows = nullptr);

// --kernel-lib in a worker per property: run_isolated with the library's kernel. Prints each
// property's verdict as it finishes, with progress on stderr.
void run_library_isolated(const FuzzOptions& o, std::uint64_t seed, std::vector<Row>& rows);

}  // namespace attncheck::properties
