// perf/calibration.cpp — the machine's FMA peak and DRAM read bandwidth (calibration.hpp).
// The FMA chains and the stream are compiled once per target of optimized/simd_targets.hpp and
// dispatched like the kernels, so that the peak is the one of the path the kernels run
// (ATTNCHECK_ISA included): 16-float vectors on AVX-512, 8 on AVX2, 1 on the scalar path.
#include "perf/calibration.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <unistd.h>

#include <omp.h>

#include "optimized/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "perf/calibration.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace attncheck::perf::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Accumulator chains per thread. Zen 4 and recent Intel cores retire up to two FMA vectors per
// cycle with a latency of 4 cycles: 8 chains keep the units busy; 12 leaves margin (and fits the
// 16 registers of AVX2).
constexpr int kChains = 12;

// Flops of one round of fma_chains: kChains FMAs on this target's full vector, 2 per lane.
int flops_per_round() { return kChains * 2 * int(hn::Lanes(hn::ScalableTag<float>())); }

// Runs `iters` rounds of kChains independent FMAs on this thread; returns a value that depends
// on all of them so that nothing is optimized away.
float fma_chains(long iters) {
    const hn::ScalableTag<float> d;
    using V = hn::Vec<decltype(d)>;
    V acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = hn::Set(d, float(c) * 0.001f);
    const V a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
    for (long i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int c = 0; c < kChains; ++c) acc[c] = hn::MulAdd(acc[c], a, b);
    V s = acc[0];
    for (int c = 1; c < kChains; ++c) s = hn::Add(s, acc[c]);
    return hn::GetLane(hn::SumOfLanes(d, s));
}

// Sum of a buffer, four independent vector accumulators (a read-only stream).
float stream_sum(const float* x, std::size_t n) {
    const hn::ScalableTag<float> d;
    const std::size_t L = hn::Lanes(d);
    auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 4 * L <= n; i += 4 * L) {
        a0 = hn::Add(a0, hn::LoadU(d, x + i));
        a1 = hn::Add(a1, hn::LoadU(d, x + i + L));
        a2 = hn::Add(a2, hn::LoadU(d, x + i + 2 * L));
        a3 = hn::Add(a3, hn::LoadU(d, x + i + 3 * L));
    }
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
    for (; i < n; ++i) s += x[i];
    return s;
}

}  // namespace attncheck::perf::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attncheck::perf {
namespace {

HWY_EXPORT(flops_per_round);
HWY_EXPORT(fma_chains);
HWY_EXPORT(stream_sum);

// Where measured sums go, so that the compiler cannot drop the work that produced them.
volatile float g_sink = 0;

float fma_chains(long iters) { return HWY_DYNAMIC_DISPATCH(fma_chains)(iters); }
float stream_sum(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(stream_sum)(x, n); }

using Clock = std::chrono::steady_clock;

}  // namespace

double fma_run(int threads, long iters) {
    optimized::isa_choice();  // the kernels' path, ATTNCHECK_ISA included
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += fma_chains(iters);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    g_sink = g_sink + sink;  // keeps the work observable
    return double(threads) * double(iters) * HWY_DYNAMIC_DISPATCH(flops_per_round)() / secs * 1e-9;
}

namespace {

// The static split of a buffer of n floats among `threads` readers: thread t's [lo, hi).
void part(std::size_t n, int threads, long t, std::size_t& lo, std::size_t& hi) {
    lo = n / std::size_t(threads) * std::size_t(t);
    hi = t + 1 == threads ? n : lo + n / std::size_t(threads);
}

// First touch by the threads that will read it (page placement), in the same static split.
void first_touch(float* buf, std::size_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long t = 0; t < threads; ++t) {
        std::size_t lo, hi;
        part(n, threads, t, lo, hi);
        std::fill(buf + lo, buf + hi, 1.0f);
    }
}

// One timed pass of `threads` threads over the buffer, each reading its own part: GB/s.
double read_pass(const float* buf, std::size_t n, int threads) {
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : sink)
    for (long t = 0; t < threads; ++t) {
        std::size_t lo, hi;
        part(n, threads, t, lo, hi);
        sink += stream_sum(buf + lo, hi - lo);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    g_sink = g_sink + sink;  // keeps the work observable
    return double(n * sizeof(float)) / secs * 1e-9;
}

// Best rate, over `passes` timed passes after a warm one (caches, TLB), at which all OpenMP
// threads stream-read a buffer of `bytes`.
double measure_read_gbs(std::size_t bytes, int passes) {
    const std::size_t n = std::max<std::size_t>(bytes / sizeof(float), 1);
    std::unique_ptr<float[]> buf(new float[n]);
    const int threads = omp_get_max_threads();
    first_touch(buf.get(), n, threads);
    double best = 0;
    for (int pass = 0; pass <= passes; ++pass) {
        const double gbs = read_pass(buf.get(), n, threads);
        if (pass > 0) best = std::max(best, gbs);
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

void RateWindows::start() { last_ = min_ = max_ = probe(); }

void RateWindows::measure() {
    const double now = probe();
    capacity_ += pending_ * 0.5 * (last_ + now);
    seconds_ += pending_;
    pending_ = 0;
    last_ = now;
    min_ = std::min(min_, now);
    max_ = std::max(max_, now);
}

double RateWindows::mean_or(double fallback) const { return seconds_ > 0 ? capacity_ / seconds_ : fallback; }

PeakWindows::PeakWindows(int threads, double window_seconds)
    : RateWindows(window_seconds), threads_(std::max(threads, 1)) {
    // Rounds for a run of about 4 ms at the memoized peak.
    const double per_round = double(threads_) * HWY_DYNAMIC_DISPATCH(flops_per_round)();
    iters_per_run_ = std::max(1000.0, 0.004 * fma_peak_gflops(threads_) * 1e9 / per_round);
    start();
}

double PeakWindows::probe() { return fma_run(threads_, long(iters_per_run_)); }

ReadWindows::ReadWindows(double bytes, double window_seconds)
    : RateWindows(window_seconds),
      bytes_(bytes),
      n_(std::max<std::size_t>(std::size_t(std::max(bytes, 0.0)) / sizeof(float), 1)),
      threads_(omp_get_max_threads()) {
    buf_.reset(new float[n_]);
    first_touch(buf_.get(), n_, threads_);
    read_pass(buf_.get(), n_, threads_);  // warm (TLB, clocks), untimed
    start();
}

double ReadWindows::probe() { return read_pass(buf_.get(), n_, threads_); }

double ReadWindows::read_gbs() const { return mean_or(perf::read_gbs(bytes_)); }

double last_level_cache_bytes() {
    long llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return llc > 0 ? double(llc) : 0.0;
}

double dram_buffer_bytes() {
    double bytes = std::max(double(std::size_t(512) << 20), 4.0 * last_level_cache_bytes());
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) bytes = std::min(bytes, double(pages) * double(page) / 4.0);
    return bytes;
}

double dram_read_gbs() {
    std::lock_guard<std::mutex> lock(g_mutex);
    static double memo = 0;
    if (memo == 0) memo = measure_read_gbs(std::size_t(dram_buffer_bytes()), 4);
    return memo;
}

double read_gbs(double bytes) {
    std::lock_guard<std::mutex> lock(g_mutex);
    static std::map<std::pair<long, int>, double> memo;
    const long mib = std::max(1L, std::lround(bytes / double(1 << 20)));
    // One thread cannot draw what two do: a benchmark on one thread divides by one thread's rate.
    const std::pair<long, int> key{mib, omp_get_max_threads()};
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    // Enough passes for ~2 GB read in all: a small buffer's pass takes microseconds.
    const int passes = int(std::clamp(2e9 / (double(mib) * double(1 << 20)), 4.0, 200.0));
    return memo[key] = measure_read_gbs(std::size_t(mib) << 20, passes);
}

}  // namespace attncheck::perf
#endif  // HWY_ONCE
