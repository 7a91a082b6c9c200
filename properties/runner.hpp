// properties/runner.hpp — runs one property with RapidCheck at a given seed and case budget and
// turns RapidCheck's TestResult into something a person (and --json) can act on.
//
// The case function draws its inputs from generators (`*gen`), may tag them (RC_TAG), and
// returns a Verdict. "unsupported" counts as a passing case (the kernel said it does not handle
// the problem); a property whose every case is unsupported fails (a kernel that supports
// nothing is not checked by anything).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "properties/verdict.hpp"

namespace attncheck::properties {

// skipped: not run because the kernel crashed or timed out in an earlier property (isolation).
enum class Status { pass, fail, unsupported, error, skipped };
const char* to_string(Status s);

struct RunParams {
    std::uint64_t seed = 0;
    int cases = 100;  // RapidCheck's maxSuccess: the case sequence depends on it, replay needs it
};

struct PropertyResult {
    std::string property;
    Status status = Status::pass;
    int cases = 0;        // cases run that passed (or were unsupported)
    int unsupported = 0;  // of those, cases the kernel refused
    int notes = 0;        // passing cases with a remark (Verdict::note)
    std::string note;     // the first remark
    int failed_at = 0;    // 1-based index of the first failing case (before shrinking)
    std::string message;  // the shrunk case's failure, or why the run errored
    std::string counterexample;          // the shrunk case, as printed by the generators
    std::map<std::string, int> spread;   // RC_TAG/RC_CLASSIFY distribution of a passing run
    double seconds = 0;
};

// progress(cases_done) is called after every case (never while shrinking).
using Progress = std::function<void(int cases_done)>;

PropertyResult run_property(const std::string& property, const std::function<Verdict()>& one_case,
                            const RunParams& params, const Progress& progress = {});

// Shown in failure reports: "attncheck fuzz --kernel NAME --property P --seed S --cases N".
std::string replay_command(const std::string& subject_flag, const std::string& property, const RunParams& p);

}  // namespace attncheck::properties
