// perf/calibration.hpp — the machine's limits, measured by the process that divides by them.
//
// Every "fraction of peak" and "fraction of bandwidth" counter of the benchmarks divides by
// these, measured in the same process on the same machine, so a ratio never mixes a number
// from a data sheet with a number from this run.
#pragma once

#include <cstddef>
#include <memory>

namespace attncheck::perf {

// fp32 FMA peak in GFLOP/s (2 flops per FMA lane) on `threads` OpenMP threads: independent
// chains of FMAs as wide as the path the kernels run (512-bit on the avx512 path, 256-bit on
// avx2, scalar on scalar: optimized/simd_targets.hpp), enough of them to hide the FMA latency,
// best of several runs. Measured on the first call for a given thread count, then
// memoized for the process.
double fma_peak_gflops(int threads);

// GFLOP/s of one timed run of `threads` threads each doing `iters` rounds of the chains above
// (what fma_peak_gflops takes the best of).
double fma_run(int threads, long iters);

// The bookkeeping of a rate measured between the windows a benchmark times (PeakWindows,
// ReadWindows): a short probe run (outside the timing) after every `window` seconds of timed
// work and one before the first; each window weighted by its timed seconds at the mean of the
// runs on either side of it.
//
//   perf::PeakWindows pw(threads);
//   for (auto _ : state) {
//       const double s = timed_work();
//       pw.add(s);
//       if (pw.due()) { state.PauseTiming(); pw.measure(); state.ResumeTiming(); }
//   }   // (bench/peak_window.hpp: add_to_window does the two lines above)
//   pw.finish();  // the last window
//   frac_peak = gflops / pw.peak_gflops();
class RateWindows {
public:
    virtual ~RateWindows() = default;
    RateWindows(const RateWindows&) = delete;
    RateWindows& operator=(const RateWindows&) = delete;
    void add(double timed_seconds) { pending_ += timed_seconds; }
    bool due() const { return pending_ >= window_; }
    void measure();  // closes the pending window with a probe run now
    void finish() {
        if (pending_ > 0) measure();
    }
    double timed_seconds() const { return seconds_; }  // of the closed windows

protected:
    explicit RateWindows(double window_seconds) : window_(window_seconds) {}
    void start();                          // the run before the first window (derived constructors)
    double mean_or(double fallback) const;  // seconds-weighted mean; `fallback` with no window
    double min_run() const { return min_; }
    double max_run() const { return max_; }

private:
    virtual double probe() = 0;  // one run's rate
    double window_;
    double last_ = 0, pending_ = 0, capacity_ = 0, seconds_ = 0, min_ = 0, max_ = 0;
};

// The FMA peak of the windows a benchmark times. On a shared host the threads' capacity moves
// over seconds: on a 2-vCPU KVM guest (AMD EPYC Zen 3) the two threads' FMA rate read about 185
// GFLOP/s for seconds, then about 95 (one core's) for the next second or two, and back. A
// fraction of a peak memoized minutes earlier then reads 0.5x or 2x the truth (a prefill read
// 1.03 "of peak"). Its probe is a short FMA run (about 4 ms) on `threads` threads.
class PeakWindows : public RateWindows {
public:
    explicit PeakWindows(int threads, double window_seconds = 0.05);
    // The windows' peak (GFLOP/s); the memoized peak when no window was timed.
    double peak_gflops() const { return mean_or(fma_peak_gflops(threads_)); }
    double min_run_gflops() const { return min_run(); }  // the lowest and highest of the runs
    double max_run_gflops() const { return max_run(); }

private:
    double probe() override;
    int threads_;
    double iters_per_run_ = 0;
};

// The read rate of the windows a benchmark times, for one bound by reading `bytes` call after
// call (a decode step: every weight and the K/V cache). Its probe is one pass of the calling
// thread's OpenMP team over a buffer of `bytes` of its own, as read_gbs(bytes) (below) measures
// once per process: this machine's bandwidth moves more than its FMA rate (a 2-vCPU Zen 3 VM
// read 19 to 57 GB/s), and a decode step's fraction of a rate measured minutes earlier moved
// between 0.67 and 1.01 from run to run. Where the last-level cache could hold the benchmark's
// bytes, the probe and the benchmark share it and evict each other (the next call may find
// some of its bytes gone, a probe some of its buffer): there the figure is less exact, and
// frac_read_process (read_gbs, measured before) is the one to compare it with.
class ReadWindows : public RateWindows {
public:
    explicit ReadWindows(double bytes, double window_seconds = 0.1);
    // The windows' read rate (GB/s); read_gbs(bytes) when no window was timed.
    double read_gbs() const;
    double min_run_gbs() const { return min_run(); }
    double max_run_gbs() const { return max_run(); }

private:
    double probe() override;
    double bytes_;
    std::unique_ptr<float[]> buf_;
    std::size_t n_ = 0;
    int threads_ = 1;
};

// DRAM read bandwidth in GB/s (1e9 bytes/s): all OpenMP threads stream-read a buffer of
// 512 MiB or four times the last-level cache, whichever is larger (an Emerald Rapids Xeon has a
// 300 MiB L3, through which a 512 MiB stream would partly be served), at most a quarter of
// the memory; best of several passes. Memoized like the above.
double dram_read_gbs();
// The size of the buffer dram_read_gbs() reads, in bytes (what the rule above gives here).
double dram_buffer_bytes();

// Stream-read bandwidth in GB/s over a buffer of `bytes`, read pass after pass by the calling
// thread's OpenMP team (omp_get_max_threads()), best of several passes after a warm one: the
// rate at which this machine reads that many bytes again and again, from wherever they stay
// between passes. That is the bound of a
// benchmark that reads `bytes` per call, call after call: DRAM's when the bytes are far larger
// than the last-level cache, the cache's when they fit (a decode step of `base` reads 118 MB,
// which a 300 MiB L3 holds: there the step runs faster than DRAM, and a fraction of the DRAM
// bandwidth exceeds 1 and says nothing). Memoized per size (rounded to 1 MiB) and team size.
double read_gbs(double bytes);

// The last-level cache in bytes, as the C library reports it (0 when it does not).
double last_level_cache_bytes();

}  // namespace attncheck::perf
