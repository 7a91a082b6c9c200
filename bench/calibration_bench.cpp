// bench/calibration_bench.cpp — BM_FmaPeak and BM_DramRead: the machine's limits
// (perf/calibration.hpp) as benchmark counters (gflops, gbs), measured in the benchmark's run.
#include <benchmark/benchmark.h>
#include <omp.h>

#include "perf/calibration.hpp"

namespace {

// Arg: threads (1, or 0 for all OpenMP threads). Each iteration is one timed FMA run; the
// counter is the memoized calibration the other benchmarks divide by.
void BM_FmaPeak(benchmark::State& state) {
    const int threads = state.range(0) > 0 ? int(state.range(0)) : omp_get_max_threads();
    for (auto _ : state) benchmark::DoNotOptimize(attncheck::perf::fma_run(threads, 2'000'000));
    state.counters["threads"] = threads;
    state.counters["gflops"] = attncheck::perf::fma_peak_gflops(threads);
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_DramRead(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(attncheck::perf::dram_read_gbs());
    state.counters["threads"] = omp_get_max_threads();
    state.counters["gbs"] = attncheck::perf::dram_read_gbs();
    state.counters["llc_bytes"] = attncheck::perf::last_level_cache_bytes();
}
BENCHMARK(BM_DramRead)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
