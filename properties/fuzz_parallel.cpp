// properties/fuzz_parallel.cpp — `attncheck fuzz --jobs N` (properties/fuzz_parallel.hpp).
//
// Sharing out: every worker walks the same selection in the same order, and the walk asks
// FuzzOptions::take before each property run. The workers' take numbers the units of the phase
// (a property run, or all the runs of a grouped subject) and claims unit i only if it moves a
// counter in shared memory from i to i+1. Each unit thus goes to exactly one worker, the first
// free one: a static split would wait on the longest runs (the reference decoder's
// `incremental` alone takes ~7 s of the ~70 s default run).
//
// The report: a worker's stdout goes to a file of its own, and at every take (claimed or not) it
// notes the file's length and its number of rows. The text from take i to take i+1 is run i's
// output followed by the lines the walk prints between runs ("not applicable", "no decoder-level
// run"), which every worker prints alike. The parent takes segment i, and the rows of run i,
// from the worker that ran run i (the text from worker 0 of the first phase when no one did, and
// the text before the first take likewise): the serial run's text and rows, in its order.
//
// Phases: a decoder's budget depends on whether its kernel failed at kernel level
// (decoder_cases), so the kernel level runs first; the decoder-level workers are forked after
// the merge and inherit its rows.
#include "properties/fuzz_parallel.hpp"

#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <sstream>
#include <thread>

#include "properties/fuzz_run.hpp"

namespace attncheck::properties {
namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the shared counters must work across processes");

// The memory the workers and the parent share (mmap MAP_SHARED | MAP_ANONYMOUS, inherited through fork).
struct Shared {
    std::atomic<int> next_unit;  // the next unit of this phase to hand out
    std::atomic<int> runs_done;  // property runs finished, all phases: the parent's progress line
    char running[kMaxJobs][160];  // what each worker of the phase runs now: named if it dies
};

class SharedMemory {
public:
    SharedMemory() {
        void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
        shared_ = new (p) Shared{};
    }
    ~SharedMemory() { munmap(shared_, sizeof(Shared)); }
    SharedMemory(const SharedMemory&) = delete;
    SharedMemory& operator=(const SharedMemory&) = delete;
    Shared* operator->() const { return shared_; }
    Shared* get() const { return shared_; }

private:
    Shared* shared_ = nullptr;
};

// A file of the parent's in $TMPDIR (else /tmp), removed when the run ends; fd stays open.
class TempFile {
public:
    explicit TempFile(const char* what) {
        const char* dir = std::getenv("TMPDIR");
        const std::string base = dir && *dir ? dir : "/tmp";
        std::string tmpl = base + "/attncheck-jobs-" + what + "-XXXXXX";
        fd_ = ::mkstemp(tmpl.data());
        if (fd_ < 0) throw std::runtime_error("cannot create a file in " + base + " (TMPDIR): " + std::strerror(errno));
        path_ = tmpl;
    }
    ~TempFile() {
        ::close(fd_);
        std::remove(path_.c_str());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    int fd() const { return fd_; }
    const std::string& path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

int cpus_allowed() {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

// The OpenMP threads of a worker: the CPUs over the workers, at least 1. N workers of C threads
// each on C CPUs oversubscribe them, and libgomp's threads spin at every barrier while another
// process holds the core: on the 2-vCPU Zen 5 VM the default run took 99.9 s with --jobs 2 at 2
// threads a worker against 50.1 s with --jobs 1 (seed 5, AVX2 path). The determinism properties
// still compare two thread counts: on a worker of one thread, the second call runs on 2
// (properties/thread_counts.hpp). OMP_NUM_THREADS, when set, is left as it is.
void limit_openmp_threads(int jobs) {
    if (std::getenv("OMP_NUM_THREADS")) return;
    const int threads = std::max(1, cpus_allowed() / jobs);
    if (threads < omp_get_max_threads()) omp_set_num_threads(threads);
}

// A row as the worker sends it: its --json object, and what that object leaves out or writes
// only for some statuses (the parent's row must be the worker's, for every report).
nlohmann::json wire(const Row& r) {
    nlohmann::json j = to_json(r);
    const PropertyResult& p = r.result;
    nlohmann::json values = nlohmann::json::array();
    for (const auto& [label, value] : p.counterexample_values) values.push_back({label, value});
    j["wire"] = {{"failed_at", p.failed_at},
                 {"message", p.message},
                 {"counterexample", p.counterexample},
                 {"values", values},
                 {"shrink_seconds", p.shrink_seconds},
                 {"shrink_stopped", p.shrink_stopped},
                 {"shrink_budget_s", r.params.shrink_budget_s},
                 {"params_reproduce", r.params.reproduce}};
    return j;
}

Row unwire(const nlohmann::json& j) {
    Row r = row_from_json(j);
    const nlohmann::json& w = j.at("wire");
    PropertyResult& p = r.result;
    p.failed_at = w.at("failed_at").get<int>();
    p.message = w.at("message").get<std::string>();
    p.counterexample = w.at("counterexample").get<std::string>();
    p.counterexample_values.clear();
    for (const auto& v : w.at("values")) p.counterexample_values.emplace_back(v.at(0).get<std::string>(), v.at(1).get<std::string>());
    p.shrink_seconds = w.at("shrink_seconds").get<double>();
    p.shrink_stopped = w.at("shrink_stopped").get<bool>();
    r.params.shrink_budget_s = w.at("shrink_budget_s").get<double>();
    r.params.reproduce = w.at("params_reproduce").get<std::string>();
    return r;
}

// Where a worker's walk stood at each take: its stdout's length and its number of rows.
struct Mark {
    long offset = 0;
    std::size_t rows = 0;
};

// What a worker sends back: a mark per take and one at the end, the takes it claimed, and the
// rows it made (from base_rows on: the rows it inherited).
struct WorkerResult {
    std::vector<Mark> takes;
    Mark end;
    std::vector<int> claimed;
    std::size_t base_rows = 0;
    std::vector<Row> rows;
    std::string text;  // its stdout

    std::string segment(std::size_t take) const {
        const long from = takes[take].offset, to = take + 1 < takes.size() ? takes[take + 1].offset : end.offset;
        return text.substr(std::size_t(from), std::size_t(to - from));
    }
    std::vector<Row> rows_of(std::size_t take) const {
        const std::size_t from = takes[take].rows, to = take + 1 < takes.size() ? takes[take + 1].rows : end.rows;
        return {rows.begin() + long(from - base_rows), rows.begin() + long(to - base_rows)};
    }
};

nlohmann::json to_json(const Mark& m) { return {m.offset, m.rows}; }
Mark mark_from_json(const nlohmann::json& j) { return {j.at(0).get<long>(), j.at(1).get<std::size_t>()}; }

Mark mark_now(const std::vector<Row>& rows) {
    std::cout.flush();
    std::fflush(stdout);
    return {long(::lseek(STDOUT_FILENO, 0, SEEK_CUR)), rows.size()};
}

struct Phase {
    int number;  // 0: the kernel level and the grouped subjects; 1: the decoder level
    bool holds(const std::string& kind, bool grouped) const { return (grouped || kind != "decoder") == (number == 0); }
};

// The worker process: the walk, claiming its runs, then its result to result_path. Never returns.
[[noreturn]] void worker(const FuzzOptions& o, Phase phase, int index, pid_t parent, Shared* shared, int out_fd,
                         const std::string& result_path, const SelectionWalk& walk, const SubjectGroup& group,
                         const std::vector<Row>& base_rows) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the parent killed: no orphans left running
    if (::getppid() != parent) ::_exit(3);
    ::dup2(out_fd, STDOUT_FILENO);
    ProgressLine::turn_off_in_this_process();
    limit_openmp_threads(o.jobs);

    std::vector<Row> rows = base_rows;
    WorkerResult me;
    me.base_rows = rows.size();
    std::vector<std::pair<std::string, bool>> groups;  // a grouped subject's claim, decided at its first run
    int units = 0;           // units of this phase seen so far
    bool in_a_run = false;   // the last take was claimed: the next mark ends that run
    FuzzOptions mine = o;
    mine.progress = false;
    mine.take = [&](const std::string& kind, const std::string& subject, const std::string& property) {
        me.takes.push_back(mark_now(rows));
        if (in_a_run) shared->runs_done.fetch_add(1);
        in_a_run = false;
        if (o.take && !o.take(kind, subject, property)) return false;
        const std::string name = group ? group(subject) : "";
        if (!phase.holds(kind, !name.empty())) return false;
        const auto known = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == name; });
        bool claim = false;
        if (!name.empty() && known != groups.end()) {
            claim = known->second;
        } else {
            int expected = units++;
            claim = shared->next_unit.compare_exchange_strong(expected, expected + 1);
            if (!name.empty()) groups.emplace_back(name, claim);
        }
        if (claim) {
            me.claimed.push_back(int(me.takes.size()) - 1);
            std::snprintf(shared->running[index], sizeof shared->running[index], "%s", progress_label(row_kind_from_string(kind, RowKind::kernel), subject, property).c_str());
            in_a_run = true;
        }
        return claim;
    };
    int code = 0;
    try {
        walk(mine, rows);
    } catch (const std::exception& e) {
        std::cerr << "attncheck fuzz: worker process " << index << ": " << e.what() << "\n";
        code = 3;
    }
    me.end = mark_now(rows);
    if (in_a_run) shared->runs_done.fetch_add(1);
    nlohmann::json j;
    j["takes"] = nlohmann::json::array();
    for (const Mark& m : me.takes) j["takes"].push_back(to_json(m));
    j["end"] = to_json(me.end);
    j["claimed"] = me.claimed;
    j["base_rows"] = me.base_rows;
    j["rows"] = nlohmann::json::array();
    for (std::size_t i = me.base_rows; i < rows.size(); ++i) j["rows"].push_back(wire(rows[i]));
    if (code == 0 && !write_file(result_path, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))) {
        std::cerr << "attncheck fuzz: worker process " << index << ": cannot write " << result_path << ": "
                  << std::strerror(errno) << "\n";
        code = 3;
    }
    std::cout.flush();
    std::fflush(nullptr);
    ::_exit(code);  // not exit(): the parent's atexit handlers and static objects are the parent's
}

WorkerResult read_result(const std::string& result_path, const std::string& out_path) {
    WorkerResult r;
    std::ifstream in(result_path);
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& m : j.at("takes")) r.takes.push_back(mark_from_json(m));
    r.end = mark_from_json(j.at("end"));
    r.claimed = j.at("claimed").get<std::vector<int>>();
    r.base_rows = j.at("base_rows").get<std::size_t>();
    for (const auto& row : j.at("rows")) r.rows.push_back(unwire(row));
    std::ifstream text(out_path, std::ios::binary);
    std::ostringstream s;
    s << text.rdbuf();
    r.text = s.str();
    return r;
}

std::string how_it_ended(int status) {
    if (WIFSIGNALED(status))
        return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    return "ended with wait status " + std::to_string(status);
}

// One phase: o.jobs workers forked, waited for (with the progress line), their results read.
// false when a worker failed (said on stderr).
bool run_phase(const FuzzOptions& o, Phase phase, int planned, Shared* shared, const SelectionWalk& walk,
               const SubjectGroup& group, const std::vector<Row>& base_rows, std::vector<WorkerResult>& results) {
    shared->next_unit.store(0);
    struct Worker {
        std::unique_ptr<TempFile> out, result;
        pid_t pid = -1;
        int status = 0;
    };
    std::vector<Worker> workers;
    std::cout.flush();
    std::fflush(nullptr);  // nothing buffered for a worker to inherit and print again
    const pid_t parent = ::getpid();
    for (int k = 0; k < o.jobs; ++k) {
        Worker w{std::make_unique<TempFile>("out"), std::make_unique<TempFile>("result")};
        shared->running[k][0] = '\0';
        const pid_t pid = ::fork();
        if (pid == 0) worker(o, phase, k, parent, shared, w.out->fd(), w.result->path(), walk, group, base_rows);
        if (pid < 0) {
            // The workers claim runs as they go: fewer of them still run everything.
            std::cerr << "attncheck fuzz: --jobs: fork: " << std::strerror(errno) << "; going on with " << k
                      << " worker processes\n";
            if (k == 0) return false;
            break;
        }
        w.pid = pid;
        workers.push_back(std::move(w));
    }
    ProgressLine line(o.progress);
    const std::string processes = " done (" + std::to_string(workers.size()) + " processes)";
    const auto show = [&](bool force) {
        line.show("property runs: " + std::to_string(std::min(shared->runs_done.load(), planned)) + " of " +
                      std::to_string(planned) + processes,
                  force);
    };
    for (std::size_t live = workers.size(); live > 0;) {
        for (Worker& w : workers) {
            if (w.pid < 0) continue;
            const pid_t r = ::waitpid(w.pid, &w.status, WNOHANG);
            if (r == w.pid || (r < 0 && errno != EINTR)) {
                if (r < 0) w.status = -1;
                w.pid = -1;
                --live;
            }
        }
        show(false);
        if (live > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    show(true);
    line.clear();
    bool ok = true;
    results.clear();
    for (std::size_t k = 0; k < workers.size(); ++k) {
        const Worker& w = workers[k];
        std::string why;
        if (w.status != 0) {
            why = how_it_ended(w.status);
        } else {
            try {
                results.push_back(read_result(w.result->path(), w.out->path()));
            } catch (const std::exception& e) {
                why = "left an unreadable result (" + std::string(e.what()) + ")";
            }
        }
        if (why.empty()) continue;
        const char* running = shared->running[k];
        std::cerr << "attncheck fuzz: worker process " << k << " " << why
                  << (*running ? std::string(" while running ") + running : std::string()) << "; its property runs are missing\n";
        ok = false;
    }
    return ok;
}

}  // namespace

int default_jobs() { return std::min(cpus_allowed(), kMaxDefaultJobs); }

bool walk_in_processes(const FuzzOptions& o, int planned, const SelectionWalk& walk, const SubjectGroup& group,
                       std::vector<Row>& rows) {
    SharedMemory shared;
    // Per take of the walk: its text and rows, once a worker has run it.
    std::vector<std::string> text;
    std::vector<std::vector<Row>> rows_of;
    std::vector<char> ran;
    WorkerResult first;  // worker 0 of the first phase: the text between runs no one made
    for (const Phase phase : {Phase{0}, Phase{1}}) {
        std::vector<Row> base = rows;
        for (std::size_t t = 0; t < ran.size(); ++t)
            if (ran[t]) base.insert(base.end(), rows_of[t].begin(), rows_of[t].end());
        std::vector<WorkerResult> results;
        if (!run_phase(o, phase, planned, shared.get(), walk, group, base, results)) return false;
        if (phase.number == 0) {
            first = results.front();
            text.resize(first.takes.size());
            rows_of.resize(first.takes.size());
            ran.resize(first.takes.size());
        }
        for (const WorkerResult& r : results) {
            if (r.takes.size() != ran.size()) {
                std::cerr << "attncheck fuzz: --jobs: the worker processes walked different selections ("
                          << r.takes.size() << " and " << ran.size() << " property runs); no report\n";
                return false;
            }
            for (const int t : r.claimed) {
                text[std::size_t(t)] = r.segment(std::size_t(t));
                rows_of[std::size_t(t)] = r.rows_of(std::size_t(t));
                ran[std::size_t(t)] = 1;
            }
        }
    }
    std::cout << first.text.substr(0, std::size_t(first.takes.empty() ? first.end.offset : first.takes[0].offset));
    for (std::size_t t = 0; t < ran.size(); ++t) {
        std::cout << (ran[t] ? text[t] : first.segment(t));
        rows.insert(rows.end(), rows_of[t].begin(), rows_of[t].end());
    }
    std::cout.flush();
    return true;
}

}  // namespace attncheck::properties
