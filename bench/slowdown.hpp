// bench/slowdown.hpp — the performance gate's injected slowdown (issue 5's proof that it works).
//
// With ATTNCHECK_INJECT_SLOWDOWN=1 in the environment, every benchmark that would run the
// optimized attention kernel runs the textbook reference kernel instead (about an order of
// magnitude slower on long sequences): a real, reproducible slowdown of the same binary, which
// the gate must fail. bench/main.cpp records the setting in the JSON context, so a gate run can
// check that the slowdown it meant to inject was in force.
#pragma once

#include <cstdlib>
#include <cstring>

#include "attncheck/kernels.hpp"

namespace attncheck::bench {

inline bool slowdown_injected() {
    const char* v = std::getenv("ATTNCHECK_INJECT_SLOWDOWN");
    return v && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

// The kernel the "optimized" benchmarks time.
inline attncheck_kernel_fn optimized_kernel_under_bench() {
    return slowdown_injected() ? attncheck_reference_kernel : attncheck_optimized_kernel;
}

}  // namespace attncheck::bench
