// properties/thread_counts.hpp — the second thread count of the determinism properties.
#pragma once

#include <omp.h>

#include <string>

namespace attncheck::properties {

// The thread count that determinism and grad_determinism call the kernel again on, to show a
// result that depends on the number of threads: 1 when the process runs OpenMP on more (the
// usual case), else 2. An `attncheck fuzz --jobs N` worker on a machine of N cores runs one
// thread (properties/fuzz_parallel.cpp), and a second call on one thread would compare nothing.
inline int other_thread_count() { return omp_get_max_threads() > 1 ? 1 : 2; }

// "on 1 thread instead of 2", for the failure message.
inline std::string on_threads(int other, int threads) {
    return "on " + std::to_string(other) + (other == 1 ? " thread" : " threads") + " instead of " + std::to_string(threads);
}

}  // namespace attncheck::properties
