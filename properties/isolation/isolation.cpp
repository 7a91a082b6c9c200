// properties/isolation/isolation.cpp — the worker process: fork + exec, a JSON-lines channel, output
// capture, timeouts (the protocol is described at the top of isolation.hpp).
#include "properties/isolation/isolation.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

extern char** environ;

namespace attncheck::properties {
namespace {

using Clock = std::chrono::steady_clock;

// The descriptor number the channel gets in the child (3: the first after stdin/out/err).
constexpr int kChildChannelFd = 3;
// Descriptors of ours are moved to at least this number, so that the child's dup2 onto 1, 2
// and 3 never clobbers one it still has to copy.
constexpr int kHighFd = 10;
// How often the parent looks at the child while nothing arrives (cost: one waitpid per tick).
constexpr int kPollTickMs = 20;

void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
}

// pipe2(O_CLOEXEC), both ends moved to >= kHighFd. Returns false on failure.
bool make_pipe(int fds[2]) {
    int raw[2];
    if (pipe2(raw, O_CLOEXEC) != 0) return false;
    for (int e = 0; e < 2; ++e) {
        const int moved = fcntl(raw[e], F_DUPFD_CLOEXEC, kHighFd);
        close(raw[e]);
        if (moved < 0) {
            if (e == 1) close_fd(fds[0]);
            return false;
        }
        fds[e] = moved;
    }
    return true;
}

void write_all(int fd, const char* data, std::size_t n) {
    while (n > 0) {
        const ssize_t w = write(fd, data, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;  // the reader is gone: nothing useful to do in a worker
        }
        data += w;
        n -= std::size_t(w);
    }
}

// Splits a byte stream into lines (a line longer than the cap is cut: a child may print
// anything, and we only need the beginning of a line to recognise it).
class LineSplitter {
public:
    template <class F>
    void feed(const char* data, std::size_t n, F&& on_line) {
        for (std::size_t i = 0; i < n; ++i) {
            if (data[i] == '\n') {
                on_line(partial_);
                partial_.clear();
            } else if (partial_.size() < kMaxLine) {
                partial_.push_back(data[i]);
            }
        }
    }
    template <class F>
    void finish(F&& on_line) {
        if (!partial_.empty()) on_line(partial_);
        partial_.clear();
    }

private:
    static constexpr std::size_t kMaxLine = 1 << 20;
    std::string partial_;
};

// The error line of a sanitizer, or "" when the line is not one.
std::string sanitizer_error(const std::string& line) {
    for (const char* tag : {"ERROR: AddressSanitizer: ", "ERROR: LeakSanitizer: ",
                            "ERROR: ThreadSanitizer: ", "ERROR: MemorySanitizer: "}) {
        const auto at = line.find(tag);
        if (at != std::string::npos) {
            std::string s = line.substr(at + 7);  // drop "ERROR: "
            for (const char* tail : {" on address", " (pc "}) {  // addresses differ per run
                const auto cut = s.find(tail);
                if (cut != std::string::npos) s = s.substr(0, cut);
            }
            return s;
        }
    }
    const auto ub = line.find(": runtime error: ");
    if (ub != std::string::npos) return "UndefinedBehaviorSanitizer: " + line.substr(ub + 17);
    return {};
}


// The child's argv and environment, built before fork: between fork and exec the child may only
// make async-signal-safe calls (the parent has other threads, e.g. OpenMP's pool). Neither
// copied nor moved: argv() and envp() point into the object.
class ChildCommand {
public:
    ChildCommand(const std::string& executable, const std::vector<std::string>& args)
        : fd_var_(std::string(kWorkerFdEnv) + "=" + std::to_string(kChildChannelFd)) {
        argv_store_.push_back(executable);
        argv_store_.insert(argv_store_.end(), args.begin(), args.end());
        for (auto& a : argv_store_) argv_.push_back(a.data());
        argv_.push_back(nullptr);
        // The inherited environment, less any ATTNCHECK_WORKER_FD of our own, plus the child's.
        const std::string fd_prefix = std::string(kWorkerFdEnv) + "=";
        for (char** e = environ; e && *e; ++e)
            if (std::strncmp(*e, fd_prefix.c_str(), fd_prefix.size()) != 0) envp_.push_back(*e);
        envp_.push_back(fd_var_.data());
        envp_.push_back(nullptr);
    }
    ChildCommand(const ChildCommand&) = delete;
    ChildCommand& operator=(const ChildCommand&) = delete;

    char* const* argv() const { return argv_.data(); }
    char* const* envp() const { return envp_.data(); }

private:
    std::vector<std::string> argv_store_;
    std::vector<char*> argv_;
    std::string fd_var_;
    std::vector<char*> envp_;
};

// The pipes to one child: the channel, the child's stdout + stderr, and the exec status (closed
// without data when exec succeeds). Closes whatever is still open.
struct Pipes {
    int chan[2] = {-1, -1}, outp[2] = {-1, -1}, execp[2] = {-1, -1};

    Pipes() = default;
    Pipes(const Pipes&) = delete;
    Pipes& operator=(const Pipes&) = delete;
    ~Pipes() {
        for (int* p : {chan, outp, execp}) {
            close_fd(p[0]);
            close_fd(p[1]);
        }
    }
    bool open() { return make_pipe(chan) && make_pipe(outp) && make_pipe(execp); }
};

// The child between fork and exec: its own process group (so a timeout kills whatever it
// started too), death with the parent, the descriptors wired, exec. Async-signal-safe calls only.
[[noreturn]] void exec_child(const ChildCommand& cmd, const Pipes& pipes, pid_t parent) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    dup2(pipes.outp[1], STDOUT_FILENO);
    dup2(pipes.outp[1], STDERR_FILENO);
    dup2(pipes.chan[1], kChildChannelFd);
    execve(cmd.argv()[0], cmd.argv(), cmd.envp());
    const int err = errno;
    (void)!write(pipes.execp[1], &err, sizeof err);
    _exit(127);
}

// Starts the child. Returns its pid, or -1 with outcome.error set (the kind stays spawn_failed).
pid_t spawn(const ChildCommand& cmd, Pipes& pipes, const std::string& executable, WorkerOutcome& outcome) {
    if (!pipes.open()) {
        outcome.error = std::string("pipe: ") + std::strerror(errno);
        return -1;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        outcome.error = std::string("fork: ") + std::strerror(errno);
        return -1;
    }
    if (pid == 0) exec_child(cmd, pipes, parent);
    setpgid(pid, pid);  // also here, so that a kill(-pid) right away cannot miss the group
    close_fd(pipes.chan[1]);
    close_fd(pipes.outp[1]);
    close_fd(pipes.execp[1]);

    // Did exec work? The CLOEXEC pipe closes with no data on success.
    int err = 0;
    ssize_t r;
    do r = read(pipes.execp[0], &err, sizeof err); while (r < 0 && errno == EINTR);
    close_fd(pipes.execp[0]);
    if (r != ssize_t(sizeof err)) return pid;
    int status = 0;
    waitpid(pid, &status, 0);
    outcome.error = "exec " + executable + ": " + std::strerror(err);
    return -1;
}

// What the parent makes of the child's two streams: case marks from the channel (into
// outcome.last_case, and to options.on_case), and from the output its tail and the first
// sanitizer error line.
class ChildStreams {
public:
    ChildStreams(const WorkerOptions& options, WorkerOutcome& outcome) : options_(options), outcome_(outcome) {}

    // One read(2) from the channel (is_channel) or the output pipe, handed on; read's result.
    ssize_t read_from(int fd, bool is_channel) {
        const ssize_t r = read(fd, buf_, sizeof buf_);
        if (r <= 0) return r;
        if (is_channel) chan_lines_.feed(buf_, std::size_t(r), [this](const std::string& l) { on_channel_line(l); });
        else on_output(buf_, std::size_t(r));
        return r;
    }
    // The last, unterminated lines; the tail cut to its size.
    void finish() {
        chan_lines_.finish([this](const std::string& l) { on_channel_line(l); });
        out_lines_.finish([this](const std::string& l) { on_output_line(l); });
        if (outcome_.output_tail.size() > options_.output_tail_bytes) trim_tail();
    }

private:
    void trim_tail() { outcome_.output_tail.erase(0, outcome_.output_tail.size() - options_.output_tail_bytes); }
    void on_output(const char* data, std::size_t n) {
        outcome_.output_tail.append(data, n);
        if (outcome_.output_tail.size() > 2 * options_.output_tail_bytes) trim_tail();
        out_lines_.feed(data, n, [this](const std::string& l) { on_output_line(l); });
    }
    void on_output_line(const std::string& line) {
        if (outcome_.sanitizer.empty()) outcome_.sanitizer = sanitizer_error(line);
    }
    void on_channel_line(const std::string& line) {
        if (line.empty()) return;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object() || j.value("event", "") != "case") return;
        CaseMark m;
        m.property = j.value("property", "");
        m.index = j.value("case", std::uint64_t(0));
        m.seed = j.value("seed", std::uint64_t(0));
        m.replay = j.value("replay", "");
        m.shape = j.value("shape", "");
        m.shrink_step = j.value("shrink_step", 0);
        outcome_.last_case = m;
        if (options_.on_case) options_.on_case(m);
    }

    const WorkerOptions& options_;
    WorkerOutcome& outcome_;
    LineSplitter chan_lines_, out_lines_;
    char buf_[65536];
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Reads both pipes until the child exits or a timeout cuts it; then the child's process group
// is killed. Returns the child's wait status; timed_out says whether a timeout ended it.
int supervise(pid_t pid, Pipes& pipes, ChildStreams& streams, const WorkerOptions& options,
              WorkerOutcome& outcome, Clock::time_point start, bool& timed_out) {
    auto case_start = Clock::now();
    std::string case_key;
    int status = 0;
    timed_out = false;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        const std::string key = outcome.last_case
            ? outcome.last_case->property + "#" + std::to_string(outcome.last_case->index) + "." +
                  std::to_string(outcome.last_case->shrink_step)
            : "";
        if (key != case_key) {  // a new case mark restarts the per-case clock
            case_key = key;
            case_start = Clock::now();
        }
        const bool case_over = options.case_timeout_s > 0 && seconds_since(case_start) >= options.case_timeout_s;
        if (seconds_since(start) >= options.timeout_s || case_over) {
            timed_out = true;
            outcome.case_limit = case_over;
            outcome.limit_s = case_over ? options.case_timeout_s : options.timeout_s;
            kill(-pid, SIGKILL);  // the whole group: the child and anything it started
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        pollfd fds[2];
        nfds_t n = 0;
        if (pipes.chan[0] >= 0) fds[n++] = {pipes.chan[0], POLLIN, 0};
        if (pipes.outp[0] >= 0) fds[n++] = {pipes.outp[0], POLLIN, 0};
        if (poll(fds, n, kPollTickMs) <= 0) continue;
        for (nfds_t i = 0; i < n; ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const bool is_channel = fds[i].fd == pipes.chan[0];
            const ssize_t r = streams.read_from(fds[i].fd, is_channel);
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (r <= 0) close_fd(is_channel ? pipes.chan[0] : pipes.outp[0]);  // EOF or error
        }
    }
    return status;
}

// Reads what the child wrote before its exit or crash, and closes the pipes. A grandchild that
// outlives the child may hold them open, so read without blocking and stop at the first empty read.
void drain(Pipes& pipes, ChildStreams& streams) {
    for (int* fd : {&pipes.chan[0], &pipes.outp[0]}) {
        if (*fd < 0) continue;
        fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK);
        while (true) {
            const ssize_t r = streams.read_from(*fd, fd == &pipes.chan[0]);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;  // EOF, or EAGAIN: nothing more was written
        }
        close_fd(*fd);
    }
    streams.finish();
}

// The outcome's kind (and signal or exit code) from the child's wait status.
void classify(int status, bool timed_out, WorkerOutcome& outcome) {
    if (timed_out) {
        outcome.kind = WorkerOutcome::Kind::timed_out;
    } else if (WIFSIGNALED(status)) {
        outcome.kind = WorkerOutcome::Kind::crashed;
        outcome.signal = WTERMSIG(status);
    } else if (WIFEXITED(status)) {
        outcome.exit_code = WEXITSTATUS(status);
        outcome.kind = (outcome.exit_code != 0 && !outcome.sanitizer.empty()) ? WorkerOutcome::Kind::crashed
                                                                             : WorkerOutcome::Kind::exited;
    }
}

}  // namespace

std::string signal_name(int sig) {
    switch (sig) {
        case SIGSEGV: return "SIGSEGV";
        case SIGBUS: return "SIGBUS";
        case SIGFPE: return "SIGFPE";
        case SIGILL: return "SIGILL";
        case SIGABRT: return "SIGABRT";
        case SIGKILL: return "SIGKILL";
        case SIGTERM: return "SIGTERM";
        case SIGINT: return "SIGINT";
        case SIGPIPE: return "SIGPIPE";
        case SIGTRAP: return "SIGTRAP";
        case SIGSYS: return "SIGSYS";
        case SIGXCPU: return "SIGXCPU";
        default: return "signal " + std::to_string(sig);
    }
}

std::string CaseMark::describe() const {
    std::ostringstream s;
    s << "case " << index << " (seed " << seed << ")";
    if (!property.empty()) s << " of " << property;
    if (shrink_step > 0) s << ", shrink step " << shrink_step;
    if (!shape.empty()) s << " [" << shape << "]";
    if (!replay.empty()) s << "; replay: " << replay;
    return s.str();
}

std::string WorkerOutcome::describe() const {
    std::ostringstream s;
    const auto where = [&] {
        return last_case ? " on " + last_case->describe() : std::string(" before its first case");
    };
    switch (kind) {
        case Kind::exited:
            if (exit_code == 0) s << "exited normally";
            else s << "exited with code " << exit_code;
            break;
        case Kind::crashed:
            if (!sanitizer.empty()) s << "crashed (" << sanitizer << ")" << where();
            else s << "crashed (" << signal_name(signal) << ")" << where();
            break;
        case Kind::timed_out: {
            std::ostringstream secs;
            secs.precision(3);
            secs << limit_s;
            s << "timed out: " << (case_limit ? "a case ran past the limit of " + secs.str() + " s per case"
                                               : "the run went past its limit of " + secs.str() + " s")
;
            if (!last_case) {
                s << where();
                break;
            }
            // The worker announces the generated case; the property then calls the kernel on it
            // and on variants of it (other layouts, a sequence alone, keys replaced, ...).
            CaseMark generated = *last_case;
            generated.replay.clear();
            s << " on " << generated.describe()
              << " (the generated case; the property may have been calling the kernel on a variant of it)";
            if (!last_case->replay.empty()) s << "; replay: " << last_case->replay;
            break;
        }
        case Kind::spawn_failed:
            s << "could not start the worker: " << error;
            break;
    }
    return s.str();
}

WorkerOutcome run_worker(const std::vector<std::string>& args, const WorkerOptions& options) {
    WorkerOutcome outcome;
    const auto start = Clock::now();
    const ChildCommand command(options.executable, args);
    Pipes pipes;
    const pid_t pid = spawn(command, pipes, options.executable, outcome);
    if (pid < 0) return outcome;
    ChildStreams streams(options, outcome);
    bool timed_out = false;
    const int status = supervise(pid, pipes, streams, options, outcome, start, timed_out);
    outcome.seconds = seconds_since(start);
    drain(pipes, streams);
    classify(status, timed_out, outcome);
    return outcome;
}

WorkerChannel WorkerChannel::from_environment() {
    const char* v = std::getenv(kWorkerFdEnv);
    if (!v || !*v) return WorkerChannel(-1);
    char* end = nullptr;
    const long fd = std::strtol(v, &end, 10);
    if (*end != '\0' || fd < 0 || fd > 1 << 20 || fcntl(int(fd), F_GETFD) < 0) return WorkerChannel(-1);
    // The channel must not leak into processes the worker itself starts.
    fcntl(int(fd), F_SETFD, FD_CLOEXEC);
    return WorkerChannel(int(fd));
}

void WorkerChannel::announce_case(const std::string& property, std::uint64_t index,
                                  std::uint64_t seed, const std::string& replay, const std::string& shape,
                                  int shrink_step) const {
    if (!active()) return;
    nlohmann::json j = {{"event", "case"}, {"property", property}, {"case", index}, {"seed", seed}};
    if (!replay.empty()) j["replay"] = replay;
    if (!shape.empty()) j["shape"] = shape;
    if (shrink_step > 0) j["shrink_step"] = shrink_step;
    std::string line = j.dump();
    line.push_back('\n');
    write_all(fd_, line.data(), line.size());
}

}  // namespace attncheck::properties
