// properties/isolation.cpp — the worker process: fork + exec, a JSON-lines channel, output
// capture, timeouts (the protocol is described at the top of isolation.hpp).
#include "properties/isolation.hpp"

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

// pipe2(O_CLOEXEC), both ends moved to >= kHighFd. Returns false on failure.
bool make_pipe(int fds[2]) {
    int raw[2];
    if (pipe2(raw, O_CLOEXEC) != 0) return false;
    for (int e = 0; e < 2; ++e) {
        const int moved = fcntl(raw[e], F_DUPFD_CLOEXEC, kHighFd);
        close(raw[e]);
        if (moved < 0) {
            if (e == 1) close(fds[0]);
            return false;
        }
        fds[e] = moved;
    }
    return true;
}

void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
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
            secs << seconds;
            s << "timed out after " << secs.str() << " s" << where();
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

    // Everything the child needs is built before fork: between fork and exec it may only make
    // async-signal-safe calls (the parent has other threads, e.g. OpenMP's pool).
    std::vector<std::string> argv_store;
    argv_store.push_back(options.executable);
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);

    const std::string fd_var = std::string(kWorkerFdEnv) + "=" + std::to_string(kChildChannelFd);
    std::vector<char*> envp;
    const std::string fd_prefix = std::string(kWorkerFdEnv) + "=";
    for (char** e = environ; e && *e; ++e)
        if (std::strncmp(*e, fd_prefix.c_str(), fd_prefix.size()) != 0) envp.push_back(*e);
    envp.push_back(const_cast<char*>(fd_var.c_str()));
    envp.push_back(nullptr);

    int chan[2] = {-1, -1}, outp[2] = {-1, -1}, execp[2] = {-1, -1};
    if (!make_pipe(chan) || !make_pipe(outp) || !make_pipe(execp)) {
        outcome.error = std::string("pipe: ") + std::strerror(errno);
        for (int* p : {chan, outp, execp}) { close_fd(p[0]); close_fd(p[1]); }
        return outcome;
    }

    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        outcome.error = std::string("fork: ") + std::strerror(errno);
        for (int* p : {chan, outp, execp}) { close_fd(p[0]); close_fd(p[1]); }
        return outcome;
    }
    if (pid == 0) {
        // The child: own process group (so a timeout kills whatever it started too), die with
        // the parent, wire the descriptors, exec. Only async-signal-safe calls from here on.
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
        dup2(outp[1], STDOUT_FILENO);
        dup2(outp[1], STDERR_FILENO);
        dup2(chan[1], kChildChannelFd);
        execve(argv[0], argv.data(), envp.data());
        const int err = errno;
        (void)!write(execp[1], &err, sizeof err);
        _exit(127);
    }
    setpgid(pid, pid);  // also here, so that a kill(-pid) right away cannot miss the group
    close_fd(chan[1]);
    close_fd(outp[1]);
    close_fd(execp[1]);

    // Did exec work? The CLOEXEC pipe closes with no data on success.
    {
        int err = 0;
        ssize_t r;
        do r = read(execp[0], &err, sizeof err); while (r < 0 && errno == EINTR);
        close_fd(execp[0]);
        if (r == ssize_t(sizeof err)) {
            int status = 0;
            waitpid(pid, &status, 0);
            close_fd(chan[0]);
            close_fd(outp[0]);
            outcome.kind = WorkerOutcome::Kind::spawn_failed;
            outcome.error = "exec " + options.executable + ": " + std::strerror(err);
            return outcome;
        }
    }

    LineSplitter chan_lines, out_lines;
    const auto on_channel_line = [&](const std::string& line) {
        if (line.empty()) return;
        nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_object() && j.value("event", "") == "case") {
            CaseMark m;
            m.property = j.value("property", "");
            m.index = j.value("case", std::uint64_t(0));
            m.seed = j.value("seed", std::uint64_t(0));
            m.replay = j.value("replay", "");
            m.shape = j.value("shape", "");
            m.shrink_step = j.value("shrink_step", 0);
            outcome.last_case = m;
            if (options.on_case) options.on_case(m);
            return;
        }
        if (options.on_message) options.on_message(j.is_discarded() ? nlohmann::json(line).dump() : line);
    };
    const auto on_output_line = [&](const std::string& line) {
        if (outcome.sanitizer.empty()) outcome.sanitizer = sanitizer_error(line);
    };
    const auto on_output = [&](const char* data, std::size_t n) {
        if (options.forward_output) write_all(STDERR_FILENO, data, n);
        outcome.output_tail.append(data, n);
        if (outcome.output_tail.size() > 2 * options.output_tail_bytes)
            outcome.output_tail.erase(0, outcome.output_tail.size() - options.output_tail_bytes);
        out_lines.feed(data, n, on_output_line);
    };

    // Reads what is available on fd; returns false at EOF (or error).
    char buf[65536];
    const auto pump = [&](int fd, bool is_channel) {
        const ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) return true;
        if (r <= 0) return false;
        if (is_channel) chan_lines.feed(buf, std::size_t(r), on_channel_line);
        else on_output(buf, std::size_t(r));
        return true;
    };

    const auto seconds_since = [](Clock::time_point t) {
        return std::chrono::duration<double>(Clock::now() - t).count();
    };
    auto case_start = Clock::now();
    std::string case_key;
    int status = 0;
    bool reaped = false, timed_out = false;
    while (true) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            reaped = true;
            break;
        }
        const std::string key = outcome.last_case
            ? outcome.last_case->property + "#" + std::to_string(outcome.last_case->index) + "." +
                  std::to_string(outcome.last_case->shrink_step)
            : "";
        if (key != case_key) {  // a new case mark restarts the per-case clock
            case_key = key;
            case_start = Clock::now();
        }
        if (seconds_since(start) >= options.timeout_s ||
            (options.case_timeout_s > 0 && seconds_since(case_start) >= options.case_timeout_s)) {
            timed_out = true;
            break;
        }
        pollfd fds[2];
        nfds_t n = 0;
        if (chan[0] >= 0) fds[n++] = {chan[0], POLLIN, 0};
        if (outp[0] >= 0) fds[n++] = {outp[0], POLLIN, 0};
        const int ready = poll(fds, n, kPollTickMs);
        if (ready <= 0) continue;
        for (nfds_t i = 0; i < n; ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const bool is_channel = fds[i].fd == chan[0];
            if (!pump(fds[i].fd, is_channel)) close_fd(is_channel ? chan[0] : outp[0]);
        }
    }
    if (timed_out) {
        kill(-pid, SIGKILL);  // the whole group: the child and anything it started
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        reaped = true;
    }
    outcome.seconds = seconds_since(start);

    // Drain what is left (written before the exit or the crash). A grandchild that outlives the
    // child may hold the pipes open, so read without blocking and stop at the first empty read.
    for (int* fd : {&chan[0], &outp[0]}) {
        if (*fd < 0) continue;
        fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK);
        while (true) {
            const ssize_t r = read(*fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;  // EOF, or EAGAIN: nothing more was written
            if (fd == &chan[0]) chan_lines.feed(buf, std::size_t(r), on_channel_line);
            else on_output(buf, std::size_t(r));
        }
        close_fd(*fd);
    }
    chan_lines.finish(on_channel_line);
    out_lines.finish(on_output_line);
    if (outcome.output_tail.size() > options.output_tail_bytes)
        outcome.output_tail.erase(0, outcome.output_tail.size() - options.output_tail_bytes);

    if (timed_out) {
        outcome.kind = WorkerOutcome::Kind::timed_out;
    } else if (reaped && WIFSIGNALED(status)) {
        outcome.kind = WorkerOutcome::Kind::crashed;
        outcome.signal = WTERMSIG(status);
    } else if (reaped && WIFEXITED(status)) {
        outcome.exit_code = WEXITSTATUS(status);
        outcome.kind = (outcome.exit_code != 0 && !outcome.sanitizer.empty())
                           ? WorkerOutcome::Kind::crashed
                           : WorkerOutcome::Kind::exited;
    }
    return outcome;
}

WorkerOutcome run_worker(const std::vector<std::string>& args, double timeout_s) {
    WorkerOptions o;
    o.timeout_s = timeout_s;
    return run_worker(args, o);
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
    send(j.dump());
}

void WorkerChannel::send(const std::string& json_line) const {
    if (!active()) return;
    std::string line = json_line;
    line.push_back('\n');
    write_all(fd_, line.data(), line.size());
}

}  // namespace attncheck::properties
