// bench/main.cpp — Google Benchmark's main, plus the run's context for the performance gate.
//
// OpenMP waiting: every run of this binary waits the same way (perf/omp_wait.hpp).
#include <cstdio>
#include <cstdlib>
#include <string>

#include <benchmark/benchmark.h>

#include "attncheck/isa.hpp"
#include "bench/slowdown.hpp"
#include "perf/omp_wait.hpp"
#include "optimized/simd_targets.hpp"

int main(int argc, char** argv) {
    attncheck::perf::reexec_with_short_spin(argv, "attncheck_bench");
    if (const std::string& error = attncheck::optimized::isa_choice().error; !error.empty()) {
        std::fprintf(stderr, "attncheck_bench: %s\n", error.c_str());
        return 2;
    }
    const attncheck::bench::Slowdown& slowdown = attncheck::bench::injected_slowdown();
    if (!slowdown.error.empty()) {
        std::fprintf(stderr, "attncheck_bench: %s\n", slowdown.error.c_str());
        return 2;
    }
    benchmark::AddCustomContext("attncheck_inject_slowdown", attncheck::bench::slowdown_label());
    // The code path and the machine: every figure depends on both, and the performance gate
    // compares a committed baseline only with a run whose fingerprint matches (tools/perf_gate.py).
    const attncheck::IsaInfo isa = attncheck::isa_info();
    benchmark::AddCustomContext("attncheck_isa", isa.compiled);
    benchmark::AddCustomContext("attncheck_kernels", isa.kernels);
    benchmark::AddCustomContext("cpu_model", isa.cpu_model);
    benchmark::AddCustomContext("cpu_features", isa.cpu_features);
    benchmark::AddCustomContext("cpu_count", std::to_string(isa.cpu_count));
    // Printed by the console reporter with the context ("attncheck: isa avx2+fma (...)"), and kept
    // off stdout otherwise: --benchmark_format=json on stdout stays JSON.
    benchmark::AddCustomContext("attncheck", attncheck::isa_line(isa));
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    benchmark::AddCustomContext("omp_wait_policy", policy ? policy : "(default)");
    benchmark::AddCustomContext("gomp_spincount", spin ? spin : "(default)");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
