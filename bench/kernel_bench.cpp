// bench/kernel_bench.cpp — the attention kernel alone: causal prefill at T = 512 and
// 2048 and a decode step at kv_len 4096, 8 heads, head_dim 64, batch 1.
//
// The problems and their work are perf/kernel_shapes.hpp's (shared with `attncheck bench`).
// Counters (all from manual timing of the kernel calls only, wall clock):
//   gflops     useful GFLOP/s: only unmasked work counts, (2*Dk + 2*Dv) flops per visible
//              (query, key) pair — the work a kernel that skips nothing visible must do
//   frac_peak  gflops / fma_peak_gflops(threads)   (calibration.hpp, same process); the prefill
//              benchmarks divide by the peak of their timed windows (perf::PeakWindows)
//   gbs, frac_bw   (decode) K and V bytes the step must read / time, and / dram_read_gbs()
//   frac_read  (decode) gbs / the rate of reading the K/V copies the calls rotate over again and
//              again, measured between the timed calls (perf::ReadWindows; read_gbs, with
//              read_run_min and read_run_max): the bound where they fit in the last-level cache;
//              frac_read_process against that rate measured once before them (perf::read_gbs)
//   speedup    (reference benchmarks) reference time / optimized time on the same problem
// Arg 0 of each benchmark is the thread count (0 = all OpenMP threads).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>

#include "attncheck/kernels.hpp"
#include "perf/calibration.hpp"
#include "perf/kernel_shapes.hpp"
#include "bench/peak_window.hpp"
#include "bench/slowdown.hpp"

namespace {

using Clock = std::chrono::steady_clock;

using Problem = attncheck::perf::KernelProblem;
using attncheck::perf::kDecodeCopies;

// The problem of a shape, made once per process: Google Benchmark calls a benchmark function
// several times (to size its iteration count, then once per repetition), and filling the decode
// problem's 67 MB of K and V from the random stream took most of a gate process's seconds.
Problem& problem(int Tq, int Tk, int q_offset, int copies) {
    static std::map<std::tuple<int, int, int, int>, Problem> made;
    const auto key = std::make_tuple(Tq, Tk, q_offset, copies);
    auto it = made.find(key);
    if (it == made.end()) it = made.emplace(key, attncheck::perf::make_kernel_problem(Tq, Tk, q_offset, copies)).first;
    return it->second;
}

// One call on copy `c` of K and V; `under_test` calls are stretched by an injected slowdown
// (bench/slowdown.hpp), the reference's are not.
double run_once(attncheck_kernel_fn fn, Problem& pr, int c, bool under_test) {
    int rc = ATTNCHECK_OK;
    const auto call = [&] { rc = fn(&pr.p, pr.q.data(), pr.k_copy(c), pr.v_copy(c), pr.out.data()); };
    double secs = 0;
    if (under_test) {
        secs = attncheck::bench::timed(call);
    } else {
        const auto t0 = Clock::now();
        call();
        secs = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (rc != ATTNCHECK_OK) throw std::runtime_error("kernel refused the benchmark problem");
    benchmark::ClobberMemory();
    return secs;
}

// Sets the OpenMP thread count for one benchmark and restores it afterwards.
struct Threads {
    int saved = omp_get_max_threads();
    int n;
    explicit Threads(std::int64_t arg) : n(arg > 0 ? int(arg) : saved) { omp_set_num_threads(n); }
    ~Threads() { omp_set_num_threads(saved); }
};

// Seconds per call of the optimized kernel, remembered per (Tq, Tk, threads) so that the
// reference benchmarks can report a speed-up measured in the same process.
std::map<std::tuple<int, int, int>, double> g_optimized_secs;

// frac_peak against the peak of the benchmark's timed windows where it has them (pw), else
// against the process's calibration; frac_read likewise against the read windows (rw).
void report(benchmark::State& state, const Problem& pr, double secs_total, int threads, bool decode,
            const attncheck::perf::PeakWindows* pw = nullptr, const attncheck::perf::ReadWindows* rw = nullptr) {
    const double per_call = secs_total / double(state.iterations());
    const double gflops = pr.useful_flops / per_call * 1e-9;
    state.counters["threads"] = threads;
    state.counters["us_per_call"] = per_call * 1e6;
    state.counters["gflops"] = gflops;
    if (pw)
        attncheck::bench::report_peak(state, *pw, gflops, threads);
    else
        state.counters["frac_peak"] = gflops / attncheck::perf::fma_peak_gflops(threads);
    if (decode) {
        const double gbs = pr.kv_bytes / per_call * 1e-9;
        state.counters["gbs"] = gbs;
        state.counters["frac_bw"] = gbs / attncheck::perf::dram_read_gbs();
        const double bytes = pr.kv_bytes * pr.copies;
        if (rw)
            attncheck::bench::report_read(state, *rw, gbs, bytes);
        else
            state.counters["frac_read"] = gbs / attncheck::perf::read_gbs(bytes);
    }
}

void BM_AttentionPrefill(benchmark::State& state) {
    const Threads th(state.range(0));
    const int T = int(state.range(1));
    Problem& pr = problem(T, T, 0, 1);
    attncheck::perf::PeakWindows pw(th.n);  // its runs are outside the timed calls
    double secs = 0;
    for (auto _ : state) {
        const double s = run_once(attncheck::bench::optimized_kernel_under_bench(), pr, 0, true);
        secs += s;
        attncheck::bench::add_to_window(state, pw, s);
    }
    pw.finish();
    g_optimized_secs[{T, T, th.n}] = secs / double(state.iterations());
    report(state, pr, secs, th.n, false, &pw);
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgsProduct({{1, 0}, {512, 2048}})
    ->ArgNames({"threads", "T"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_AttentionDecode(benchmark::State& state) {
    const Threads th(state.range(0));
    const int Tk = int(state.range(1));
    Problem& pr = problem(1, Tk, Tk - 1, kDecodeCopies);
    attncheck::perf::fma_peak_gflops(th.n);
    attncheck::perf::dram_read_gbs();
    attncheck::perf::read_gbs(pr.kv_bytes * pr.copies);
    attncheck::perf::ReadWindows rw(pr.kv_bytes * pr.copies);  // its passes are outside the timed calls
    double secs = 0;
    int c = 0;
    for (auto _ : state) {
        const double s = run_once(attncheck::bench::optimized_kernel_under_bench(), pr, c++ % kDecodeCopies, true);
        secs += s;
        attncheck::bench::add_to_window(state, rw, s);
    }
    rw.finish();
    g_optimized_secs[{1, Tk, th.n}] = secs / double(state.iterations());
    report(state, pr, secs, th.n, true, nullptr, &rw);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{1, 0}, {4096}})
    ->ArgNames({"threads", "Tk"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The reference kernel on the same problems (all threads; it is single-threaded itself).
void BM_AttentionReference(benchmark::State& state) {
    const Threads th(0);
    const int Tq = int(state.range(0)), Tk = int(state.range(1));
    const bool decode = Tq == 1;
    Problem& pr = problem(Tq, Tk, Tk - Tq, decode ? kDecodeCopies : 1);
    double secs = 0;
    int c = 0;
    for (auto _ : state) secs += run_once(attncheck_reference_kernel, pr, c++ % pr.copies, false);
    report(state, pr, secs, th.n, decode);
    const auto it = g_optimized_secs.find({Tq, Tk, th.n});
    if (it != g_optimized_secs.end())
        state.counters["speedup"] = secs / double(state.iterations()) / it->second;
}
BENCHMARK(BM_AttentionReference)
    ->Args({512, 512})
    ->Args({2048, 2048})
    ->Args({1, 4096})
    ->ArgNames({"Tq", "Tk"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
