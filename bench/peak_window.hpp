// bench/peak_window.hpp — a benchmark loop's windows of the FMA peak (perf::PeakWindows) or of
// the read rate (perf::ReadWindows): measured outside its timing, and its fractions reported
// against them.
#pragma once

#include <string>

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

// The counters of a rate `value` against a bound measured in the timed windows (`windows`, with
// the lowest and highest of its runs) and once for the process (`process`): WHAT_UNIT,
// WHAT_run_min, WHAT_run_max, frac_WHAT and frac_WHAT_process.
inline void report_rate(benchmark::State& state, const std::string& what, const std::string& unit, double value,
                        double windows, double run_min, double run_max, double process) {
    state.counters[what + "_" + unit] = windows;
    state.counters[what + "_run_min"] = run_min;
    state.counters[what + "_run_max"] = run_max;
    state.counters["frac_" + what] = value / windows;
    state.counters["frac_" + what + "_process"] = value / process;
}

// frac_peak against the peak of the timed windows (perf::PeakWindows), with that peak and the
// lowest and highest of its runs: far apart, the machine's capacity moved during the benchmark.
// frac_peak_process divides by the process's calibration instead (the best of five 40 ms runs
// before any work), for comparison: below frac_peak where the machine ran slower during the
// benchmark than at its start (another tenant, a lower all-core clock under sustained load).
inline void report_peak(benchmark::State& state, const perf::PeakWindows& pw, double gflops, int threads) {
    report_rate(state, "peak", "gflops", gflops, pw.peak_gflops(), pw.min_run_gflops(), pw.max_run_gflops(),
                perf::fma_peak_gflops(threads));
}

// frac_read against the read rate of the timed windows (perf::ReadWindows) of a benchmark that
// reads its bytes at `gbs`, with that rate and the lowest and highest of its runs;
// frac_read_process divides by the process's read_gbs(bytes) (best of several passes before
// the benchmark) instead, for comparison.
inline void report_read(benchmark::State& state, const perf::ReadWindows& rw, double gbs, double bytes) {
    report_rate(state, "read", "gbs", gbs, rw.read_gbs(), rw.min_run_gbs(), rw.max_run_gbs(), perf::read_gbs(bytes));
}

}  // namespace attncheck::bench
