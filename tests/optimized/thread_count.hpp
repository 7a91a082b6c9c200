// tests/optimized/thread_count.hpp — ThreadCount: sets the OpenMP thread count for a scope, for
// the tests that compare results across thread counts.
#pragma once

#include <omp.h>

namespace attncheck::testing {

// Restores the OpenMP thread count at scope exit.
struct ThreadCount {
    int saved = omp_get_max_threads();
    explicit ThreadCount(int n) { omp_set_num_threads(n); }
    ~ThreadCount() { omp_set_num_threads(saved); }
    ThreadCount(const ThreadCount&) = delete;
    ThreadCount& operator=(const ThreadCount&) = delete;
};

}  // namespace attncheck::testing
