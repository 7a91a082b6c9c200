// bench/peak_window.hpp — a benchmark loop's FMA-peak windows (perf::PeakWindows) taken outside
// its timing.
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

}  // namespace attncheck::bench
