// properties/fuzz_parallel.hpp — `attncheck fuzz --jobs N`: the property runs of a plain run
// (not a campaign, not --mutants) shared out among N forked worker processes, with the report
// the same, byte for byte, as the serial run's. Processes, not threads: RapidCheck keeps its
// implicit parameters in static stacks and is not thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "properties/fuzz.hpp"
#include "properties/fuzz_report.hpp"

namespace attncheck::properties {

// The CLI's default --jobs: the CPUs this process may run on (sched_getaffinity), at most
// kMaxDefaultJobs: past that the processes mostly compete for memory bandwidth.
inline constexpr int kMaxDefaultJobs = 8;
inline constexpr int kMaxJobs = 256;
int default_jobs();

// The walk over the selection that the workers share: called in every worker with options whose
// `take` claims runs for that worker; appends the rows of the runs it made to `rows`, and prints
// what a serial run prints (properties/fuzz.cpp: collect_subjects).
using SelectionWalk = std::function<void(const FuzzOptions& o, std::vector<Row>& rows)>;
// For a subject whose property runs must stay in one process, in order (a kernel run isolated,
// whose first crash skips its later properties): the name that groups them; "" for any other.
using SubjectGroup = std::function<std::string(const std::string& subject)>;

// Runs `walk` in o.jobs worker processes, in two phases: the kernel level (and every run of a
// grouped subject), then the decoder level, whose budgets depend on the kernel-level verdicts
// (decoder_cases). Prints the walk's text as the serial run would, appends the rows in the serial
// order, and returns true. A worker that dies without its results (a signal, an exit status
// other than 0) is said on stderr, "attncheck fuzz: worker process K ...; its property runs are
// missing", and it returns false: nothing is printed then, and the run must not pass.
// `planned` is the number of property runs, for the progress line.
bool walk_in_processes(const FuzzOptions& o, int planned, const SelectionWalk& walk, const SubjectGroup& group,
                       std::vector<Row>& rows);

}  // namespace attncheck::properties
