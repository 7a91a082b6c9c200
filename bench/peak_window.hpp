// bench/peak_window.hpp — a benchmark loop's FMA-peak windows (perf::PeakWindows): measured
// outside its timing, and its fractions of the peak reported against them.
#pragma once

#include <benchmark/benchmark.h>

#include "perf/calibration.hpp"

namespace attncheck::bench {

// Adds one timed region's seconds to the windows and, when a window is due, measures the peak
// with the benchmark's timer paused (its rate, which the gate judges, does not include it).
inline void add_to_window(benchmark::State& state, perf::PeakWindows& pw, double seconds) {
    pw.add(seconds);
    if (pw.due()) {
        state.PauseTiming();
        pw.measure();
        state.ResumeTiming();
    }
}

// frac_peak against the peak of the timed windows (perf::PeakWindows), with that peak and the
// lowest and highest of its runs: far apart, the machine's capacity moved during the benchmark.
// frac_peak_process divides by the process's calibration instead (the best of five 40 ms runs
// before any work), for comparison: below frac_peak where the machine ran slower during the
// benchmark than at its start (another tenant, a lower all-core clock under sustained load).
inline void report_peak(benchmark::State& state, const perf::PeakWindows& pw, double gflops, int threads) {
    state.counters["peak_gflops"] = pw.peak_gflops();
    state.counters["peak_run_min"] = pw.min_run_gflops();
    state.counters["peak_run_max"] = pw.max_run_gflops();
    state.counters["frac_peak"] = gflops / pw.peak_gflops();
    state.counters["frac_peak_process"] = gflops / perf::fma_peak_gflops(threads);
}

}  // namespace attncheck::bench
