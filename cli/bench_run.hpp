// cli/bench_run.hpp — what `attncheck bench` measures and how: the kernels, the correctness check
// before timing, the interleaved repetitions, the paired comparison, and the reports
// (bench_run.cpp measures and judges, bench_report.cpp prints and writes JSON).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "perf/kernel_shapes.hpp"

namespace attncheck::cli::bench {

// A kernel under the bench: a built-in by name, or a symbol of a loaded library; of ABI version 1
// (fn) or 2 (fn_v2). A version 2 kernel gets the same shapes (one sequence, 8 query heads each
// with its own kv head, [B, H, T, D] dense tensors) in the first dtype its declaration allows of
// f32, bf16, f16; the inputs are the version 1 problem's values rounded to that dtype, so the
// float64 oracle reads exactly what the kernel reads.
struct Kernel {
    std::string label;  // "optimized", or "PATH:SYMBOL"
    attncheck_kernel_fn fn = nullptr;
    attncheck_kernel_v2_fn fn_v2 = nullptr;
    // A version 2 kernel's backward pass, or null (none, or declared backward=no).
    attncheck_kernel_v2_backward_fn backward = nullptr;
    KernelDeclaration declaration{};  // a version 2 kernel's: the shapes must lie within it
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
};
// "optimized" for version 1; "optimized_v2 (ABI version 2, bf16)" for version 2.
std::string describe(const Kernel& k);
// The dtype a version 2 kernel is timed in: the first of f32, bf16, f16 its declaration allows.
std::int32_t bench_dtype(const KernelDeclaration& d);

// The backward pass's useful flops over the forward's on the standard shapes (Dk = Dv = D): five
// products of 2*D flops per visible (query, key) pair (S = Q K^T, dP = dO V^T, dV = P^T dO,
// dK = dS^T Q, dQ = dS K), 10*D against the forward's 4*D.
inline constexpr double kBackwardFlopsPerForward = 2.5;

struct Options {
    Kernel candidate;
    std::optional<Kernel> baseline;
    std::vector<perf::KernelShape> shapes;
    // Time the backward pass (--backward) instead of the forward: each kernel's own forward writes
    // out and lse once per shape, both passes are checked, and the backward's calls are timed.
    // Version 2 kernels with a backward, non-decode shapes only.
    bool backward = false;
    int threads = 1;
    int reps = 7;
    double min_time = 0.2;      // seconds of calls per repetition, at least
    double max_slowdown = 0.10; // a shape slower than baseline by more than this fails
    std::optional<double> min_frac_peak;  // a shape below this fraction of its bound fails
    std::string json;           // "" or the file for the Google-Benchmark-shaped JSON
    // With a baseline and fewer than kMinJudgedReps repetitions the comparison cannot be judged:
    // the verdict says NOT JUDGED and fails the run, unless this is set (--allow-unjudged).
    bool allow_unjudged = false;
};

// A check, or a kernel's refusal, that stops the bench before any timing: exit code 1.
struct Refusal {
    std::string message;
};

// One kernel's repetitions on one shape: seconds per call (the mean over `calls` calls), wall
// clock and process CPU time.
struct Timing {
    long calls = 0;
    std::vector<double> secs, cpu_secs;
};

// The paired comparison of candidate against baseline on one shape.
struct Comparison {
    std::vector<double> ratios;  // candidate time / baseline time, one per repetition pair
    double median_ratio = 0;
    // One-sided sign test of "the candidate is slower by more than max_slowdown": the pairs whose
    // ratio exceeds 1 + max_slowdown, and the chance of at least as many under a median ratio of
    // exactly 1 + max_slowdown.
    int pairs_over = 0;
    double p_value = 1;
    bool slower = false;  // median ratio > 1 + max_slowdown and p < kAlpha
};

inline constexpr double kAlpha = 0.05;
// The fewest interleaved pairs whose one-sided sign test can reach p < kAlpha: with n pairs the
// smallest p is 2^-n (every pair slower), and 2^-4 = 0.0625, 2^-5 = 0.031.
inline constexpr int kMinJudgedReps = 5;
static_assert(1.0 / (1 << kMinJudgedReps) < kAlpha && 1.0 / (1 << (kMinJudgedReps - 1)) >= kAlpha);
// A comparison with a baseline that too few repetitions leave unjudged (verdict NOT JUDGED).
inline bool comparison_unjudged(const Options& o) { return o.baseline && o.reps < kMinJudgedReps; }

struct ShapeResult {
    perf::KernelShape shape;
    double useful_flops = 0;
    double kv_bytes = 0, baseline_kv_bytes = 0;  // in each kernel's dtype (half of float32's for bf16)
    // Decode: the rate at which the bench's threads read a buffer as large as the K/V copies the
    // calls rotate over (each kernel's bytes), again and again, measured between the shape's
    // timed repetitions (perf::ReadWindows): DRAM's where it exceeds the last-level cache and the
    // cache's where it fits. 0 until timed.
    double read_gbs = 0, baseline_read_gbs = 0;
    // The FMA peak of this shape's timed windows (perf::PeakWindows: a short run before the
    // first repetition and after each), what its fractions of peak divide by: on a shared host
    // the threads' capacity moves within seconds, and a peak measured once for the whole run
    // can be of another phase. 0 until timed.
    double fma_peak_gflops = 0;
    // Correctness: the worst test ratio against the bound, of the timed pass (the backward's: dq,
    // dk, dv) and of the forward (the same figures when the forward is timed).
    double worst_ratio = 0, baseline_worst_ratio = 0;
    double forward_worst_ratio = 0, baseline_forward_worst_ratio = 0;
    std::string checked;  // which heads the check compared, e.g. "all 8 heads", "heads 0 and 7"
    Timing candidate, baseline;
    std::optional<Comparison> comparison;
    bool below_min_frac = false;
};

struct Calibration {
    double fma_peak_gflops = 0;  // on Options::threads threads
    double dram_read_gbs = 0;    // all OpenMP threads; 0: not measured (no decode shape uses it)
};

struct Result {
    Calibration calibration;
    std::vector<ShapeResult> shapes;
    bool failed = false;    // some shape slower than the baseline, or below --min-frac-peak
    std::string verdict;    // one line: "no verdict (no baseline)", "PASS ...", "FAIL ..."
};

// Checks every kernel on every shape against the float64 oracle, then times them. Throws Refusal
// for a kernel that disagrees with the oracle or refuses a shape.
Result run(const Options& o);

// Figures of one repetition: useful GFLOP/s, K/V GB/s (of the candidate, or of the baseline).
inline double gflops(const ShapeResult& s, double secs) { return s.useful_flops / secs * 1e-9; }
inline double gbs(const ShapeResult& s, double secs, bool baseline = false) {
    return (baseline ? s.baseline_kv_bytes : s.kv_bytes) / secs * 1e-9;
}
// The FMA peak a shape's fractions divide by: its timed windows' (the run's calibration before).
inline double fma_peak_of(const ShapeResult& s, const Calibration& c) {
    return s.fma_peak_gflops > 0 ? s.fma_peak_gflops : c.fma_peak_gflops;
}
// That GB/s over the rate of reading the same footprint (decode shapes).
inline double frac_read(const ShapeResult& s, double secs, bool baseline = false) {
    return gbs(s, secs, baseline) / (baseline ? s.baseline_read_gbs : s.read_gbs);
}
// The fraction of the shape's bound a candidate's call time reaches: for a decode step (it must
// read K and V) of the rate of reading its K/V copies (read_gbs), otherwise of the FMA peak.
double frac_bound(const ShapeResult& s, const Calibration& c, double secs);

double median(std::vector<double> v);

void print_report(const Options& o, const Result& r);
// Throws InputError when the file cannot be written.
void write_json(const Options& o, const Result& r, const std::string& path);

}  // namespace attncheck::cli::bench
