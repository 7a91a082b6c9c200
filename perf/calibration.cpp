// perf/calibration.cpp — the machine's FMA peak and DRAM read bandwidth (calibration.hpp).
// g++ 12's AVX-512 headers initialise "undefined" vectors from themselves (_mm512_undefined_ps),
// which -Wuninitialized reports at every intrinsic that uses one (max, roundscale, scalef,
// reductions). The pragma must precede the first include of <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "perf/calibration.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include <omp.h>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace attncheck::perf {
namespace {

using Clock = std::chrono::steady_clock;

// Where measured sums go, so that the compiler cannot drop the work that produced them.
volatile float g_sink = 0;

// Accumulator chains per thread. Zen 4 and recent Intel cores retire up to two FMA vectors per
// cycle with a latency of 4 cycles: 8 chains keep the units busy; 12 leaves margin.
constexpr int kChains = 12;

#if defined(__AVX512F__)
constexpr int kFlopsPerFma = 2 * 16;
#elif defined(__FMA__)
constexpr int kFlopsPerFma = 2 * 8;
#else
constexpr int kFlopsPerFma = 2;
#endif

// Runs `iters` rounds of kChains independent FMAs on this thread; returns a value that depends
// on all of them so that nothing is optimized away.
float fma_chains(long iters) {
#if defined(__AVX512F__)
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c) * 0.001f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
#elif defined(__FMA__)
    __m256 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(float(c) * 0.001f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    float out[8], s = 0;
    for (int c = 0; c < kChains; ++c) {
        _mm256_storeu_ps(out, acc[c]);
        for (float x : out) s += x;
    }
    return s;
#else
    float acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = float(c) * 0.001f;
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = __builtin_fmaf(acc[c], 0.999999f, 1e-7f);
    float s = 0;
    for (float x : acc) s += x;
    return s;
#endif
}

}  // namespace

double fma_run(int threads, long iters) {
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += fma_chains(iters);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    g_sink = g_sink + sink;  // keeps the work observable
    return double(threads) * double(iters) * kChains * kFlopsPerFma / secs * 1e-9;
}

namespace {

// Sum of a buffer, several independent vector accumulators (a read-only stream).
float stream_sum(const float* x, std::size_t n) {
#if defined(__AVX512F__)
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
    float acc[16] = {};
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] += x[i + std::size_t(l)];
    float s = 0;
    for (float a : acc) s += a;
#endif
    for (; i < n; ++i) s += x[i];
    return s;
}

double measure_dram_read_gbs() {
    constexpr std::size_t kBytes = std::size_t(512) << 20;  // >> any L3 we run on
    constexpr std::size_t n = kBytes / sizeof(float);
    std::unique_ptr<float[]> buf(new float[n]);
    const int threads = omp_get_max_threads();
    // First touch by the threads that will read (page placement), in the same static split.
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long t = 0; t < threads; ++t) {
        const std::size_t lo = n / std::size_t(threads) * std::size_t(t);
        const std::size_t hi = t + 1 == threads ? n : lo + n / std::size_t(threads);
        std::fill(buf.get() + lo, buf.get() + hi, 1.0f);
    }
    double best = 0;
    for (int pass = 0; pass < 4; ++pass) {
        float sink = 0;
        const auto t0 = Clock::now();
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : sink)
        for (long t = 0; t < threads; ++t) {
            const std::size_t lo = n / std::size_t(threads) * std::size_t(t);
            const std::size_t hi = t + 1 == threads ? n : lo + n / std::size_t(threads);
            sink += stream_sum(buf.get() + lo, hi - lo);
        }
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        g_sink = g_sink + sink;  // keeps the work observable
        best = std::max(best, double(kBytes) / secs * 1e-9);
    }
    return best;
}

std::mutex g_mutex;

}  // namespace

double fma_peak_gflops(int threads) {
    threads = std::max(threads, 1);
    std::lock_guard<std::mutex> lock(g_mutex);
    static std::map<int, double> memo;
    if (auto it = memo.find(threads); it != memo.end()) return it->second;
    fma_run(threads, 1'000'000);  // warm up: clocks up, threads spawned
    double best = 0;
    for (int run = 0; run < 5; ++run) best = std::max(best, fma_run(threads, 20'000'000));
    memo[threads] = best;
    return best;
}

double dram_read_gbs() {
    std::lock_guard<std::mutex> lock(g_mutex);
    static double memo = 0;
    if (memo == 0) memo = measure_dram_read_gbs();
    return memo;
}

}  // namespace attncheck::perf
