// properties/runner.hpp — runs one property with RapidCheck at a given seed and case budget and
// turns RapidCheck's TestResult into something a person (and --json) can act on.
//
// The case function draws its inputs from generators (`*gen`), may tag them (RC_TAG), and
// returns a Verdict. "unsupported" is not a failure (the kernel said it does not handle
// the problem), but a property with fewer than kMinSupportedCases supported cases is reported
// "not checked" (never "pass"), and one with more than 20% unsupported carries a warning.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "properties/verdict.hpp"

namespace attncheck::properties {

// not_checked: too few cases were supported (the kernel refused the rest) for the property to
// say anything: fewer than kMinSupportedCases (or than the budget, when it is smaller).
// skipped: not run because the kernel crashed or timed out in an earlier property (isolation).
// not_applicable: every case had nothing for the property to check (Verdict::vacuous).
enum class Status { pass, fail, not_checked, error, skipped, not_applicable };

// A property checked on fewer supported cases than this is "not checked", never "pass".
inline constexpr int kMinSupportedCases = 10;
// A passing property whose kernel refused more than this fraction of its cases carries a warning.
inline constexpr double kWarnUnsupportedFraction = 0.2;
const char* to_string(Status s);
// Whether a property's status fails the run: anything but pass and not applicable, except
// "not checked" when the caller allows it (--allow-unchecked, CheckOptions::allow_unchecked).
bool fails_run(Status s, bool allow_unchecked);

struct RunParams {
    RunParams() = default;
    RunParams(std::uint64_t seed_, int cases_ = 100, double shrink_budget_s_ = 0)
        : seed(seed_), cases(cases_), shrink_budget_s(shrink_budget_s_) {}
    std::uint64_t seed = 0;
    int cases = 100;  // RapidCheck's maxSuccess: the case sequence depends on it, replay needs it
    // Wall-clock seconds allowed for shrinking a failure; 0: no limit. RapidCheck has no time
    // budget of its own: once this is spent, run_property answers every further shrink candidate
    // "pass" without running it, so RapidCheck stops at the smallest failing case found so far.
    // The failing case (failed_at) and its replay do not depend on the budget; how far the
    // counterexample shrank does (it depends on the machine's speed).
    double shrink_budget_s = 0;
    // A failure to run again, as PropertyResult::reproduce wrote it: RapidCheck then runs that one
    // shrunk case only (its generators' random state, size and shrink path), not the sequence.
    // A text that does not decode is an error result, never a run of something else.
    std::string reproduce;
};

// Where a call of the case function stands in the run, for announcing it (a crash report names
// the case) and for progress. number counts from 1 on the same base as PropertyResult::failed_at:
// the case a failure report calls "case 17" is the one announced as number 17.
struct CaseInfo {
    int number = 1;        // the generated case this call belongs to (1-based)
    int shrink_step = 0;   // 0: the generated case itself; k > 0: the k-th shrink candidate of it
};

struct PropertyResult {
    std::string property;
    Status status = Status::pass;
    int cases = 0;        // cases run that passed (or were unsupported)
    int unsupported = 0;  // of those, cases the kernel refused
    int vacuous = 0;      // of those, cases with nothing to check (Verdict::vacuous)
    std::string vacuous_reason;  // the first such case's reason
    int notes = 0;        // passing cases with a remark (Verdict::note)
    std::string note;     // the first remark
    std::string warning;  // a passing run that checked less than asked (many unsupported cases)
    int failed_at = 0;    // 1-based index of the first failing case (before shrinking)
    std::string message;  // the shrunk case's failure, or why the run errored
    std::string counterexample;          // the shrunk case, as printed by the generators
    // The shrunk case as RapidCheck's (label, value) pairs, in the order the generators drew them.
    std::vector<std::pair<std::string, std::string>> counterexample_values;
    std::map<std::string, int> spread;   // RC_TAG/RC_CLASSIFY distribution of a passing run
    double seconds = 0;
    double shrink_seconds = 0;    // time spent shrinking the failure
    bool shrink_stopped = false;  // the shrink budget ran out: the counterexample is not minimal
    // The shrunk case as RapidCheck's Reproduce (hex of its serialization): RunParams::reproduce
    // runs it again as the first and only case (a failure corpus, properties/campaign.hpp).
    std::string reproduce;
};

// progress(cases_done) is called after every case (never while shrinking).
using Progress = std::function<void(int cases_done)>;

PropertyResult run_property(const std::string& property, const std::function<Verdict()>& one_case,
                            const RunParams& params, const Progress& progress = {});
// The same, with the case function told which case (or shrink step) it is running.
PropertyResult run_property(const std::string& property, const std::function<Verdict(const CaseInfo&)>& one_case,
                            const RunParams& params, const Progress& progress = {});

// Why a RunParams::reproduce text does not decode ("" when it does).
std::string reproduce_problem(const std::string& reproduce);

// Shown in failure reports: "attncheck fuzz --kernel NAME --property P --seed S --cases N".
std::string replay_command(const std::string& subject_flag, const std::string& property, const RunParams& p);

}  // namespace attncheck::properties
