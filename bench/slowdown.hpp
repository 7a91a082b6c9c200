// bench/slowdown.hpp — the performance gate's injected slowdowns, and the one timing helper
// every benchmark uses for the code under test.
//
// ATTNCHECK_INJECT_SLOWDOWN in the environment:
//   unset, "" or "0"    nothing is injected
//   "1" or "reference"  every benchmark that would run the optimized attention kernel runs the
//                       reference kernel (the float64 oracle rounded) instead, one to two
//                       orders of magnitude slower: a gross, real slowdown of the same binary
//   a number 0 < s < 1  every timed call of the code under test takes (1 + s) times as long: its
//                       own duration, then s of it more in a busy wait on the same thread. Rates
//                       fall by s / (1 + s). A slowdown of any size, with the real benchmark's
//                       own noise around it: how tests/gate/ measures what the gate can detect.
// bench/main.cpp refuses any other value and records the setting in the JSON context, so a gate
// run can check that the slowdown it meant to inject was in force.
#pragma once

#include <chrono>
#include <string>

#include "attncheck/kernels.hpp"
#include "kernels/registry.hpp"

namespace attncheck::bench {

struct Slowdown {
    bool reference_kernel = false;  // "1" / "reference"
    double stretch = 0;             // s of "0 < s < 1"
    std::string error;              // non-empty: the variable holds something else
};

// Parsed once from ATTNCHECK_INJECT_SLOWDOWN.
const Slowdown& injected_slowdown();

// "0", "reference" or the stretch (e.g. "0.1"), for the JSON context.
std::string slowdown_label();

// The registry entry of the kernel the "optimized" benchmarks time: the decoder benchmarks plug
// it in with what the entry declares (attention_kernel_of).
inline const KernelEntry& optimized_entry_under_bench() {
    return *find_kernel(injected_slowdown().reference_kernel ? "reference" : "optimized", KernelRole::builtin);
}
// Its function, for the kernel benchmarks.
inline attncheck_kernel_fn optimized_kernel_under_bench() { return optimized_entry_under_bench().fn; }

// Seconds `work()` took on the wall clock, stretched by the injected slowdown when there is one.
// Every benchmark times the code under test through this (never the reference it compares with).
template <class Work>
double timed(Work&& work) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    work();
    auto t1 = Clock::now();
    if (const double s = injected_slowdown().stretch; s > 0) {
        const auto until = t1 + std::chrono::duration_cast<Clock::duration>((t1 - t0) * s);
        while (Clock::now() < until) {
        }
        t1 = Clock::now();
    }
    return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace attncheck::bench
