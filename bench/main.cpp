// bench/main.cpp — Google Benchmark's main, plus the run's context for the performance gate.
//
// OpenMP's default wait policy lets an idle worker spin. On this machine's two vCPUs (SMT
// siblings sharing one core's FMA units) a spinning thread steals the throughput of the one
// that works, and two-thread timings come out up to 10x slow, single-thread runs after them too.
// libgomp reads OMP_WAIT_POLICY once at load time, so when it is unset we re-execute ourselves
// with OMP_WAIT_POLICY=passive: every measurement of this binary is taken the same way.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <benchmark/benchmark.h>

#include "bench/slowdown.hpp"

int main(int argc, char** argv) {
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
        std::perror("attncheck_bench: re-exec with OMP_WAIT_POLICY=passive failed; going on");
    }
    benchmark::AddCustomContext("attncheck_inject_slowdown",
                                attncheck::bench::slowdown_injected() ? "1" : "0");
    benchmark::AddCustomContext("omp_wait_policy", std::getenv("OMP_WAIT_POLICY"));
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
