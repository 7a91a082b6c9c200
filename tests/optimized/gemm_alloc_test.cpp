// tests/optimized/gemm_alloc_test.cpp — linear() when its scratch cannot be allocated.
//
// The GEMM's scratch is per thread and grown on first use, inside its OpenMP region. An exception
// must not leave an OpenMP region (the process would terminate), so a failed allocation on any
// thread of the team has to come back as std::bad_alloc on the calling thread, and the next call,
// with memory again, has to compute the right product.
//
// This file replaces the aligned forms of operator new and delete (the scratch is cache-line
// aligned: optimized/aligned.hpp) with ones that can be told to fail on a worker thread of an
// OpenMP team. It is a binary of its own: the workers' scratch must not exist yet, so no other
// test may run a product before it in the same process.
//
// Dimension legend: M/N/K = the matrix product's rows, outputs, reduction.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include <omp.h>

#include <catch2/catch.hpp>

#include "optimized/gemm.hpp"
#include "tests/optimized/thread_count.hpp"

namespace {

enum class Fail { none, worker, any };
std::atomic<Fail> g_fail{Fail::none};
std::atomic<int> g_failed{0};  // allocations refused so far

void* aligned_allocate(std::size_t n, std::align_val_t al) {
    const Fail f = g_fail.load(std::memory_order_relaxed);
    if (f == Fail::any || (f == Fail::worker && omp_get_thread_num() != 0)) {
        g_failed.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    void* p = nullptr;
    const std::size_t align = std::max(sizeof(void*), static_cast<std::size_t>(al));
    if (posix_memalign(&p, align, n ? n : 1) != 0) return nullptr;
    return p;
}

}  // namespace

void* operator new(std::size_t n, std::align_val_t al) {
    if (void* p = aligned_allocate(n, al)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) { return ::operator new(n, al); }
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    return aligned_allocate(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    return aligned_allocate(n, al);
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using namespace attncheck;
using testing::ThreadCount;

// Arms a failure mode for a scope.
struct FailScope {
    explicit FailScope(Fail f) { g_fail.store(f); }
    ~FailScope() { g_fail.store(Fail::none); }
    FailScope(const FailScope&) = delete;
    FailScope& operator=(const FailScope&) = delete;
};

}  // namespace

// One test case: its first product must be the process's first, so that a worker's scratch
// does not exist yet.
TEST_CASE("linear() reports a failed scratch allocation on any thread as std::bad_alloc", "[optimized][gemm][alloc]") {
    std::mt19937_64 rng(20261128);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    struct Product {
        int m, n, k;
        std::vector<float> w, b, x, want;
    };
    const auto make = [&](int m, int n, int k) {
        Product p{m, n, k, std::vector<float>(std::size_t(n) * k), std::vector<float>(static_cast<std::size_t>(n)),
                  std::vector<float>(std::size_t(m) * k), std::vector<float>(std::size_t(m) * n)};
        for (auto* v : {&p.w, &p.b, &p.x})
            for (float& e : *v) e = u(rng);
        optimized::linear_naive(p.w.data(), p.b.data(), n, k, p.x.data(), m, k, p.want.data(), n);
        return p;
    };
    const ThreadCount tc(2);

    // A worker thread's scratch (its tiles' partial sums and, where K has several blocks, its
    // own packed x), allocated inside the product's parallel region: 288 rows (2 row blocks,
    // so both threads take a tile), K = 1100 (several K blocks on every path).
    {
        const Product p = make(288, 100, 1100);
        const auto W = optimized::pack_weights(p.w.data(), p.n, p.k, p.b.data());
        std::vector<float> got(p.want.size(), 0.0f);
        {
            const FailScope fail(Fail::worker);
            CHECK_THROWS_AS(optimized::linear(W, p.x.data(), p.m, p.k, got.data(), p.n), std::bad_alloc);
        }
        CHECK(g_failed.load() > 0);  // the worker did try, and was refused
        optimized::linear(W, p.x.data(), p.m, p.k, got.data(), p.n);
        CHECK(got == p.want);
    }
    // The calling thread's own scratch (the shared packed x before the region, its partial sums
    // inside it): a thread that has never run a product has none, whatever ran before.
    {
        const Product p = make(300, 300, 200);
        const auto W = optimized::pack_weights(p.w.data(), p.n, p.k, p.b.data());
        std::vector<float> got(p.want.size(), 0.0f);
        const int refused = g_failed.load();
        bool threw = false, threw_after = false;  // Catch2's assertions stay on the main thread
        std::thread caller([&] {
            omp_set_num_threads(2);
            {
                const FailScope fail(Fail::any);
                try {
                    optimized::linear(W, p.x.data(), p.m, p.k, got.data(), p.n);
                } catch (const std::bad_alloc&) {
                    threw = true;
                }
            }
            try {
                optimized::linear(W, p.x.data(), p.m, p.k, got.data(), p.n);
            } catch (const std::bad_alloc&) {
                threw_after = true;
            }
        });
        caller.join();
        CHECK(threw);
        CHECK(g_failed.load() > refused);
        CHECK_FALSE(threw_after);
        CHECK(got == p.want);
    }
}
