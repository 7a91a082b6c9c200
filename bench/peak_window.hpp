// bench/peak_window.hpp — a benchmark loop's windows of the FMA peak (perf::PeakWindows) or of
// the read rate (perf::ReadWindows): measured outside its timing, and its fractions reported
// against them.
#pragma once

#include <benchmark/benchmark.h>

#include "perf/calibration.hpp"

namespace attncheck::bench {

// Adds one timed region's seconds to the windows and, when a window is due, measures the rate
// with the benchmark's timer paused (its rate, which the gate judges, does not include it).
inline void add_to_window(benchmark::State& state, perf::RateWindows& pw, double seconds) {
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

// frac_read against the read rate of the timed windows (perf::ReadWindows) of a benchmark that
// reads its bytes at `gbs`, with that rate and the lowest and highest of its runs;
// frac_read_process divides by the process's read_gbs(bytes) (best of several passes before
// the benchmark) instead, for comparison.
inline void report_read(benchmark::State& state, const perf::ReadWindows& rw, double gbs, double bytes) {
    state.counters["read_gbs"] = rw.read_gbs();
    state.counters["read_run_min"] = rw.min_run_gbs();
    state.counters["read_run_max"] = rw.max_run_gbs();
    state.counters["frac_read"] = gbs / rw.read_gbs();
    state.counters["frac_read_process"] = gbs / perf::read_gbs(bytes);
}

}  // namespace attncheck::bench
