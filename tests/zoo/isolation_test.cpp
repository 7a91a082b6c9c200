// tests/zoo/isolation_test.cpp — the worker process: crashes, hangs, exits, output, channel.
//
// Each test starts tests/zoo/worker_helper.cpp in a mode that misbehaves like a kernel under
// test, and checks that run_worker says what happened and on which case, and that the parent
// carries on. The timeouts here are behaviour (a hang must be cut), not speed measurements.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <omp.h>
#include <signal.h>

#include <string>
#include <vector>

#include "properties/isolation/isolation.hpp"

using namespace attncheck::properties;

namespace {

WorkerOptions helper_options(double timeout_s = 30) {
    WorkerOptions o;
    o.executable = ZOO_WORKER_HELPER;
    o.timeout_s = timeout_s;
    return o;
}

// Start the OpenMP pool in this (parent) process first: spawning must work with it running.
int warm_openmp() {
    int n = 0;
#pragma omp parallel reduction(+ : n)
    n += 1;
    return n;
}

}  // namespace

TEST_CASE("a worker that exits normally: case marks in order, output, exit code 0") {
    REQUIRE(warm_openmp() >= 1);
    std::vector<CaseMark> cases;
    WorkerOptions o = helper_options();
    o.on_case = [&](const CaseMark& c) { cases.push_back(c); };
    const WorkerOutcome r = run_worker({"ok"}, o);
    INFO(r.describe() << "\n" << r.output_tail);
    CHECK(r.kind == WorkerOutcome::Kind::exited);
    CHECK(r.exit_code == 0);
    CHECK(r.ok());
    CHECK(r.describe() == "exited normally");
    REQUIRE(cases.size() == 3);
    CHECK(cases[2].index == 2);
    CHECK(cases[2].seed == 1002);
    CHECK(cases[2].property == "agreement");
    REQUIRE(r.last_case);
    CHECK(r.last_case->replay == "replay-me 2");
    CHECK(r.output_tail.find("some output on stdout") != std::string::npos);
}

TEST_CASE("a worker's exit code is reported") {
    const WorkerOutcome r = run_worker({"exit3"}, helper_options());
    CHECK(r.kind == WorkerOutcome::Kind::exited);
    CHECK(r.exit_code == 3);
    CHECK_FALSE(r.ok());
    CHECK(r.describe() == "exited with code 3");
}

TEST_CASE("a segfaulting worker: crashed (SIGSEGV) on the last announced case, with its replay") {
    REQUIRE(warm_openmp() >= 1);
    // In a sanitizer build the child is ASan-instrumented: its SEGV handler would write the report
    // where ASAN_OPTIONS's log_path says (ci/sanitize.sh counts every such file as a finding, and
    // the parent would not see it). The crash is what this test wants: the child gets the plain
    // signal. Harmless without ASan.
    const char* saved = std::getenv("ASAN_OPTIONS");
    const std::string saved_value = saved ? saved : "";
    ::setenv("ASAN_OPTIONS", "handle_segv=0", 1);
    const WorkerOutcome r = run_worker({"segv"}, helper_options());
    if (saved) ::setenv("ASAN_OPTIONS", saved_value.c_str(), 1);
    else ::unsetenv("ASAN_OPTIONS");
    INFO(r.describe() << "\n" << r.output_tail);
    REQUIRE(r.kind == WorkerOutcome::Kind::crashed);
    if (r.sanitizer.empty()) {
        CHECK(r.signal == SIGSEGV);
        CHECK(r.describe() ==
              "crashed (SIGSEGV) on case 1 (seed 42) of causality; replay: attncheck fuzz --seed 42");
    } else {  // under -DATTNCHECK_SANITIZE=ON, ASan catches the SEGV and exits with a code
        CHECK(r.sanitizer.find("SEGV") != std::string::npos);  // "AddressSanitizer: SEGV" 
        CHECK(r.describe().find("on case 1 (seed 42) of causality") != std::string::npos);
    }
    REQUIRE(r.last_case);
    CHECK(r.last_case->index == 1);
    CHECK(r.last_case->seed == 42);
}

TEST_CASE("an aborting worker: crashed (SIGABRT)") {
    const WorkerOutcome r = run_worker({"abort"}, helper_options());
    REQUIRE(r.kind == WorkerOutcome::Kind::crashed);
    CHECK(r.signal == SIGABRT);
    CHECK(r.describe() == "crashed (SIGABRT) on case 0 (seed 5) of agreement");
}

TEST_CASE("a hanging worker is killed at the timeout and the parent carries on") {
    REQUIRE(warm_openmp() >= 1);
    const WorkerOutcome r = run_worker({"hang"}, helper_options(1.0));
    INFO(r.describe());
    REQUIRE(r.kind == WorkerOutcome::Kind::timed_out);
    CHECK(r.seconds >= 1.0);
    // The limit, not the elapsed time (which includes the kill), and the case as generated.
    CHECK(r.limit_s == 1.0);
    CHECK(r.describe().rfind("timed out: ", 0) == 0);
    CHECK(r.describe().find("limit of 1 s") != std::string::npos);
    CHECK(r.describe().find(" on case 0 (seed 9) of row_sums") != std::string::npos);
    CHECK(r.describe().find("the generated case") != std::string::npos);
    // The parent is unharmed: the next worker runs normally.
    CHECK(run_worker({"ok"}, helper_options()).ok());
}

TEST_CASE("the per-case timeout cuts a hang within one case, and names that case") {
    WorkerOptions o = helper_options(120);
    o.case_timeout_s = 0.5;
    const WorkerOutcome r = run_worker({"hang_case"}, o);
    INFO(r.describe());
    REQUIRE(r.kind == WorkerOutcome::Kind::timed_out);
    CHECK(r.seconds < 60);  // well before the whole-run limit
    REQUIRE(r.last_case);
    CHECK(r.last_case->index == 1);
}

TEST_CASE("a grandchild holding the pipes open does not hang the parent") {
    const WorkerOutcome r = run_worker({"grandchild"}, helper_options(30));
    INFO(r.describe());
    CHECK(r.kind == WorkerOutcome::Kind::exited);
    CHECK(r.exit_code == 0);
    CHECK(r.seconds < 30);
}

TEST_CASE("a noisy worker: output is drained (no pipe deadlock) and only its tail kept") {
    WorkerOptions o = helper_options();
    o.output_tail_bytes = 4096;
    const WorkerOutcome r = run_worker({"noisy"}, o);
    CHECK(r.ok());
    CHECK(r.output_tail.size() <= 4096);
    CHECK(r.output_tail.find("the last line") != std::string::npos);
}

TEST_CASE("a sanitizer report counts as a crash, named by the sanitizer's error") {
    const WorkerOutcome r = run_worker({"sanitizer"}, helper_options());
    REQUIRE(r.kind == WorkerOutcome::Kind::crashed);
    CHECK(r.exit_code == 1);
    CHECK(r.sanitizer == "AddressSanitizer: heap-buffer-overflow");
    CHECK(r.describe() ==
          "crashed (AddressSanitizer: heap-buffer-overflow) on case 4 (seed 77) of no_write_outside_out");
}

TEST_CASE("a missing executable is spawn_failed, not a crash of the parent") {
    WorkerOptions o = helper_options();
    o.executable = "/nonexistent/attncheck-worker";
    const WorkerOutcome r = run_worker({"ok"}, o);
    CHECK(r.kind == WorkerOutcome::Kind::spawn_failed);
    CHECK(r.describe().find("No such file") != std::string::npos);
}

TEST_CASE("the channel is active in a worker and inactive outside one") {
    const WorkerOutcome r = run_worker({"env"}, helper_options());
    INFO(r.describe());
    CHECK(r.ok());  // the helper exits 4 when its channel is inactive
    REQUIRE(r.last_case);
    CHECK(r.last_case->property == "env");
    // This test process was not started as a worker (ctest does not set the variable).
    CHECK_FALSE(WorkerChannel::from_environment().active());
}
