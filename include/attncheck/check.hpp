// attncheck/check.hpp — check an attention kernel with one call, from your own test.
//
//     #include <attncheck/check.hpp>
//     TEST_CASE("my kernel passes attncheck") {
//         const attncheck::CheckReport report = attncheck::check_kernel(my_kernel, "my_kernel");
//         INFO(report.text);   // the table, and for a failure the shrunk case and its replay line
//         REQUIRE(report.passed);
//     }
//
// check_kernel() runs every kernel-level property of `attncheck fuzz` (agreement with a float64
// oracle, exact causality, row sums, probabilities, rows with no key, padding, batch
// independence, determinism, no write outside out, inputs unchanged, refusal of an unknown ABI
// version) and, unless CheckOptions::decoder is false, the decoder-level ones with the kernel
// plugged into attncheck's optimized decoder. Same generators, shrinking and failure messages as
// `attncheck fuzz --kernel-lib`; the difference is that it runs IN PROCESS (we do not own your
// test's main()): a kernel that crashes takes the test binary with it, one that hangs hangs it.
// For a kernel you do not trust yet, build it as a shared library and use
// `attncheck fuzz --kernel-lib PATH --symbol NAME`, which isolates it in a worker process.
//
// Replaying a failure: the report prints
//     replay: ATTNCHECK_SEED=S ATTNCHECK_CASES=N ATTNCHECK_PROPERTY=P <your test binary>
// These environment variables override the options given by CheckOptions::from_environment(),
// which is check_kernel's default argument.
//
// This header needs only the C ABI header and the standard library (no xtensor, no RapidCheck).
// Link attncheck::properties (find_package(attncheck REQUIRED COMPONENTS properties)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"

namespace attncheck {

struct CheckOptions {
    // RapidCheck seed; 0: the suite's fixed default seed (so a test is reproducible), printed
    // in the report.
    std::uint64_t seed = 0;
    // Random cases per kernel-level property, and per decoder-level property (each decoder case
    // builds and runs whole models, so it costs far more than a kernel case).
    int cases = 100;
    int decoder_cases = 20;
    // Also the decoder-level properties with the kernel plugged into the optimized decoder.
    bool decoder = true;
    // Property names to run (see `attncheck fuzz --list`); empty: all.
    std::vector<std::string> only;
    // What the kernel declares (attncheck/declaration.hpp), e.g. "head_dim=64,128; empty_rows=nan";
    // empty: the ABI's defaults (every problem, empty rows 0, deterministic).
    std::string declaration;
    // A property with too few supported cases (fewer than 10, the kernel refused the rest) is
    // "not checked" and fails the report, unless this is set.
    bool allow_unchecked = false;
    // Wall-clock seconds shrinking a failure may take per property (0: no limit). Past it the
    // smallest failing case found so far is reported (RunParams::shrink_budget_s).
    double shrink_time_s = 5;
    // The replay line of a failure, with {seed}, {cases} and {property} replaced; empty: the
    // environment variables below and "<this test binary>". A caller that is not a test binary
    // (the Python module) says how its own runs are replayed.
    std::string replay;

    // `defaults` overridden by ATTNCHECK_SEED, ATTNCHECK_CASES (both kernel and decoder cases)
    // and ATTNCHECK_PROPERTY (a comma-separated list of property names). A malformed value
    // throws std::invalid_argument naming the variable.
    static CheckOptions from_environment(CheckOptions defaults);
    static CheckOptions from_environment();  // the defaults above, overridden
};

// One property's outcome in a report, for a caller that acts on it rather than prints it.
struct CheckedProperty {
    std::string property;
    // "pass", "fail", "not checked", "error", "skipped" or "not applicable".
    std::string status;
    int cases = 0;        // cases run (passed or refused); for a failure, those before it
    int unsupported = 0;  // of those, cases the kernel refused
    int budget = 0;       // cases asked for
    int failed_at = 0;    // the first failing case (1-based), 0 when none failed
    std::string counterexample;  // the shrunk case, one "label: value" line each
    std::string message;         // why it failed: the worst element with both values and the bound
    std::string warning;         // a passing run that checked less than asked
    std::string replay;          // the replay line of a failure, "" otherwise
    double seconds = 0;
    bool shrink_stopped = false;  // the shrink time ran out: the counterexample is not minimal
};

struct CheckReport {
    // Every property passed. A case the kernel refuses (returns nonzero) is not a failure, but a
    // property checked on fewer than 10 supported cases is "not checked" and fails the report
    // (unless CheckOptions::allow_unchecked); more than 20% refused cases print a warning.
    bool passed = false;
    // The table property x status, then for each failure: the property, the shrunk case, the
    // worst element with both values and the bound, and the replay line.
    std::string text;
    std::vector<std::string> failed;  // names of the properties that failed
    std::uint64_t seed = 0;           // the seed that was used
    std::vector<CheckedProperty> properties;  // every property that ran, in the table's order
};

// Runs the properties on `fn` (called `name` in the report). Throws std::invalid_argument for an
// unknown property name in options.only, a non-positive case count, a malformed declaration,
// and for a null fn.
CheckReport check_kernel(attncheck_kernel_fn fn, const std::string& name,
                         const CheckOptions& options = CheckOptions::from_environment());
// A version 2 kernel (attncheck/kernel_abi_v2.h): the version 2 kernel-level properties (its
// declaration in options.declaration, with the version 2 items), and with options.decoder the
// decoder-level ones, the optimized decoder calling it through version 2 with a paged cache,
// unless the declaration rules out the decoder's calls (no float32, positions=bottom_right: the
// report then says so).
CheckReport check_kernel(attncheck_kernel_v2_fn fn, const std::string& name,
                         const CheckOptions& options = CheckOptions::from_environment());
// A version 2 kernel with its backward pass (kernel_abi_v2.h, attncheck_grads_v2): the same, and
// the gradient properties (unless the declaration says backward=no).
CheckReport check_kernel(attncheck_kernel_v2_fn fn, attncheck_kernel_v2_backward_fn backward, const std::string& name,
                         const CheckOptions& options = CheckOptions::from_environment());

}  // namespace attncheck
