// bench/main.cpp — Google Benchmark's main, plus the run's context for the performance gate.
#include <benchmark/benchmark.h>

#include "bench/slowdown.hpp"

int main(int argc, char** argv) {
    benchmark::AddCustomContext("attncheck_inject_slowdown",
                                attncheck::bench::slowdown_injected() ? "1" : "0");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
