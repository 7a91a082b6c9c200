// perf/calibration.hpp — the machine's limits, measured by the process that divides by them.
//
// Every "fraction of peak" and "fraction of bandwidth" counter of the benchmarks divides by
// these, measured in the same process on the same machine, so a ratio never mixes a number
// from a data sheet with a number from this run.
#pragma once

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

// DRAM read bandwidth in GB/s (1e9 bytes/s): all OpenMP threads stream-read a 512 MiB buffer
// (far larger than the last-level cache), best of several passes. Memoized like the above.
double dram_read_gbs();

}  // namespace attncheck::perf
