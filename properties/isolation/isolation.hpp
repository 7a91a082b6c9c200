// properties/isolation/isolation.hpp — run untrusted work (a kernel under test) in a child process with a
// timeout, and say what happened to it in words a kernel author can act on.
//
// A kernel under test may segfault, loop forever, write out of bounds or leak. None of that may
// take the suite down, so the driver runs each kernel's checks in a worker process and reports
// "crashed (SIGSEGV) on case 17 (seed 123) of causality" or "timed out: a case ran past the limit of
// 30 s per case on case ...".
//
// ---- The protocol -------------------------------------------------------------------------
// Spawning. run_worker(args, options) starts `options.executable` (default /proc/self/exe, the
// running program) with argv = {executable, args...}, e.g.
//     /proc/self/exe fuzz --worker --kernel-lib PATH --symbol NAME --seed S --cases N ...
// It is a fork immediately followed by execv: a fresh process image, because the suite uses
// OpenMP and libgomp's thread pool is unusable in a bare forked child. The child runs in its own
// process group (setpgid) and gets SIGKILL if the parent dies (PR_SET_PDEATHSIG), so neither a
// timeout nor Ctrl-C on the suite leaves a spinning kernel behind. Call run_worker from the
// thread that lives for the whole check (the main thread): PR_SET_PDEATHSIG fires when the
// spawning *thread* exits.
//
// The channel. The child inherits one pipe as a file descriptor whose number is in the
// environment variable ATTNCHECK_WORKER_FD. On it the child announces each case, through
// WorkerChannel::announce_case (below), as one JSON object on one line:
//   {"event":"case","property":"causality","case":17,"seed":123,"replay":"attncheck fuzz ...",
//    "shape":"B=1 H=2 Tq=3 ...","shrink_step":4}
// ("replay", "shape" and "shrink_step" are optional; shrink_step > 0 marks the k-th shrink
// candidate of case 17 rather than case 17 itself). The line is written with a raw write(2)
// BEFORE running that case: "starting case N seed S". The parent remembers the last one, so
// when the child dies the parent knows which case killed it and how to replay it. Lines written
// before a crash survive it (they are in the pipe, not in a user-space buffer). Any other line
// on the channel is ignored; results travel in a file (`attncheck fuzz --worker --worker-out
// FILE`), which the parent reads after a normal exit.
//
// Output. The child's stdout and stderr go to one pipe; the parent keeps the last
// options.output_tail_bytes of it (a sanitizer report, an assert message, RapidCheck's output)
// for the report. An AddressSanitizer / UndefinedBehaviorSanitizer error line is recognised and
// reported as a crash even though the sanitizer exits with a code rather than a signal.
//
// Timeouts. options.timeout_s bounds the whole child; options.case_timeout_s (0: none) bounds
// the time since the last case mark, which catches a hang early in a long run. On either, the
// parent SIGKILLs the child's process group and reports kind timed_out.
//
// Not isolated: check_kernel() called from an outside project's own test binary runs in process
// (we do not own that binary's main()).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::properties {

// The environment variable that carries the channel's file descriptor to the child.
inline constexpr const char* kWorkerFdEnv = "ATTNCHECK_WORKER_FD";

// "starting case N seed S" as the child announced it.
struct CaseMark {
    std::string property;      // which property (may be empty)
    std::uint64_t index = 0;   // case number within the property, from 0
    std::uint64_t seed = 0;    // the seed that replays it
    std::string replay;        // the command line that replays it ("" when not given)
    std::string shape;         // the case's inputs in words ("" when not given)
    int shrink_step = 0;       // > 0: a shrink candidate of case `index`, not the case itself
    // "case 17 (seed 123) of causality, shrink step 4 [B=1 H=2 ...]; replay: ..."
    std::string describe() const;
};

struct WorkerOutcome {
    enum class Kind {
        exited,        // normal exit (exit_code says how the checks went)
        crashed,       // killed by a signal, or a sanitizer aborted it (see sanitizer)
        timed_out,     // killed by us after the timeout
        spawn_failed,  // could not start (fork/exec error in `error`)
    };
    Kind kind = Kind::spawn_failed;
    int exit_code = -1;          // for exited (and for a sanitizer abort)
    int signal = 0;              // for crashed by a signal
    std::string sanitizer;       // for crashed by a sanitizer: its error line
    std::string error;           // for spawn_failed
    double seconds = 0;          // wall time of the child
    double limit_s = 0;          // for timed_out: the limit that was reached (per case, or the whole run)
    bool case_limit = false;     // for timed_out: the per-case limit (true) or the whole run's (false)
    std::optional<CaseMark> last_case;  // the last case the child announced
    std::string output_tail;     // the last output_tail_bytes of the child's stdout + stderr

    bool ok() const { return kind == Kind::exited && exit_code == 0; }
    // One line for a report:
    //   "crashed (SIGSEGV) on case 17 (seed 123) of causality; replay: attncheck fuzz ..."
    //   "timed out: a case ran past the limit of 20 s per case, on case 3 (seed 9) of agreement
    //    [shape] (the generated case; the property may have been calling the kernel on a variant
    //    of it); replay: ..."
    //   "crashed (AddressSanitizer: heap-buffer-overflow ...) on case ..."
    //   "exited with code 1" / "exited normally"
    std::string describe() const;
};

struct WorkerOptions {
    std::string executable = "/proc/self/exe";
    double timeout_s = 60;            // whole child
    double case_timeout_s = 0;        // since the last case mark; 0: no per-case limit
    std::size_t output_tail_bytes = 16384;
    // Each case mark as it arrives (optional; e.g. to drive a progress line).
    std::function<void(const CaseMark&)> on_case;
};

// Runs options.executable with argv {executable, args...} as described above and waits for it
// (or kills it). Never throws for anything the child does; spawn problems are kind spawn_failed.
WorkerOutcome run_worker(const std::vector<std::string>& args, const WorkerOptions& options = {});

// The child's side of the channel. from_environment() opens the descriptor named by
// ATTNCHECK_WORKER_FD; when the variable is absent (a worker started by hand, for debugging)
// the channel is inactive and its calls do nothing, so the same code runs in both cases.
class WorkerChannel {
public:
    static WorkerChannel from_environment();
    bool active() const { return fd_ >= 0; }
    // "starting case N seed S": call before running the case.
    void announce_case(const std::string& property, std::uint64_t index, std::uint64_t seed,
                       const std::string& replay = "", const std::string& shape = "", int shrink_step = 0) const;

private:
    explicit WorkerChannel(int fd) : fd_(fd) {}
    int fd_ = -1;
};

// "SIGSEGV" for 11, etc.; "signal N" for an unnamed one.
std::string signal_name(int sig);

}  // namespace attncheck::properties
