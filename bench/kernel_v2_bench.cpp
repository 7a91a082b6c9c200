// bench/kernel_v2_bench.cpp — the version 2 kernel (attncheck_optimized_kernel_v2) on the shapes
// of today's decoders, each against the version 1 kernel on the equivalent float32 MHA problem
// (perf/kernel_shapes.hpp's, 8 heads, head_dim 64) timed in the same benchmark, call for call:
//   prefill   bf16 [B,T,H,D] GQA (Hq 8, Hk 2, D 64) causal prefill, T = 512 and 2048
//   window    the same prefill at T = 2048 under a sliding window of 256 keys
//   decode    bf16 GQA paged decode step at ctx 4096: 16-key blocks under a permuted block
//             table, K/V rotated over kDecodeCopies caches as the v1 decode benchmark rotates
//             its copies
// Counters: gflops (v2) and v1_gflops, useful GFLOP/s, (2*Dk + 2*Dv) flops per visible
// (query, key) pair and query head, the same count for both; vs_v1 = gflops / v1_gflops;
// frac_peak = gflops / fma_peak_gflops(threads) (perf/calibration.hpp, same process), the
// performance issue's measure of the v1 kernel (bench/kernel_bench.cpp).
// Arg 0 is the thread count (0 = all OpenMP threads).
//
// The backward pass (attncheck_optimized_kernel_v2_backward), BM_AttentionV2BackwardF32: f32 MHA
// causal prefill (8 heads, D 64, [B,T,H,D]) at T = 2048, each iteration one backward call and
// one forward call on the same problem, alternating (8 (sequence, kv head) tasks: on 1 or 2 threads
// the backward runs its fused split, optimized/attention_backward.cpp). Its useful flops are 5 products of 2*D flops
// per visible (query, key) pair and head (S = Q K^T, dP = dO V^T, dV = P^T dO, dK = dS^T Q,
// dQ = dS K: 10*D, 2.5x the forward's 4*D); gflops and frac_peak (against the FMA peak of the
// timed windows, bench/peak_window.hpp, as BM_AttentionPrefill) for the backward, fwd_gflops and
// fwd_frac_peak for the forward beside it, bwd_over_fwd the ratio of their times.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, T = rows, D = head_dim = value_dim.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "bench/peak_window.hpp"
#include "bench/slowdown.hpp"
#include "perf/calibration.hpp"
#include "perf/kernel_shapes.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using attncheck::perf::kDecodeCopies;

constexpr int kHq = attncheck::perf::kShapeHeads, kHk = 2, kD = attncheck::perf::kShapeHeadDim;
constexpr int kBlockSize = 16;

// A bf16 GQA problem: q and out [1, T, Hq, D], K/V dense [1, Tk, Hk, D] or paged
// [num_blocks, 16, Hk, D] with `copies` block tables over disjoint blocks.
struct ProblemV2 {
    attncheck_problem_v2 p{};
    std::vector<std::uint16_t> q, k, v, out;
    std::vector<std::int32_t> q_pos, kv_lens, tables;  // tables: [copies][blocks per sequence]
    int copies = 1, blocks_per_seq = 0;
    double useful_flops = 0;
    void use_copy(int c) { p.block_table = tables.data() + std::size_t(c) * std::size_t(blocks_per_seq); }
};

ProblemV2 make_problem(int Tq, int Tk, bool paged, int copies, int window = -1) {
    ProblemV2 pr;
    attncheck_problem_v2& p = pr.p;
    p.abi_version = ATTNCHECK_ABI_VERSION_2;
    p.struct_size = sizeof(attncheck_problem_v2);
    p.dtype = ATTNCHECK_DTYPE_BF16;
    p.batch = 1, p.q_heads = kHq, p.kv_heads = kHk, p.head_dim = kD, p.value_dim = kD;
    p.q_len = Tq, p.kv_len = Tk;
    pr.q_pos = {Tk - Tq};
    p.q_pos = pr.q_pos.data();
    p.causal = 1, p.window_left = window, p.window_right = -1;
    p.scale = 0.125f;
    const std::int64_t bthd_q[4] = {std::int64_t(Tq) * kHq * kD, kD, kHq * kD, 1};
    std::copy(bthd_q, bthd_q + 4, p.q.stride);
    std::copy(bthd_q, bthd_q + 4, p.out.stride);
    std::int64_t kv_rows = Tk, kv_outer = 1;
    if (paged) {
        pr.copies = copies;
        pr.blocks_per_seq = (Tk + kBlockSize - 1) / kBlockSize;
        p.num_blocks = copies * pr.blocks_per_seq;
        p.block_size = kBlockSize;
        p.block_table_stride = pr.blocks_per_seq;
        pr.tables.resize(std::size_t(p.num_blocks));
        std::iota(pr.tables.begin(), pr.tables.end(), 0);
        std::shuffle(pr.tables.begin(), pr.tables.end(), std::mt19937(11));
        pr.kv_lens = {Tk};
        p.kv_lens = pr.kv_lens.data();
        kv_rows = kBlockSize;
        kv_outer = p.num_blocks;
        pr.use_copy(0);
    }
    const std::int64_t bthd_kv[4] = {kv_rows * kHk * kD, kD, kHk * kD, 1};
    std::copy(bthd_kv, bthd_kv + 4, p.k.stride);
    std::copy(bthd_kv, bthd_kv + 4, p.v.stride);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    pr.q.resize(std::size_t(Tq) * kHq * kD);
    pr.k.resize(std::size_t(kv_outer * kv_rows) * kHk * kD);
    pr.v.resize(pr.k.size());
    pr.out.resize(pr.q.size());
    for (auto* x : {&pr.q, &pr.k, &pr.v})
        for (auto& e : *x) e = attncheck::float_to_bf16(u(rng));
    p.q.data = pr.q.data(), p.k.data = pr.k.data(), p.v.data = pr.v.data(), p.out.data = pr.out.data();
    double pairs = 0;
    for (int i = 0; i < Tq; ++i) {
        const int a = Tk - Tq + i;  // the row's position: it sees keys max(0, a - window) .. a
        pairs += std::min(a + 1, Tk) - (window >= 0 ? std::max(0, a - window) : 0);
    }
    pr.useful_flops = double(kHq) * pairs * (4.0 * kD);
    return pr;
}

// Sets the OpenMP thread count for one benchmark and restores it afterwards.
struct Threads {
    int saved = omp_get_max_threads();
    int n;
    explicit Threads(std::int64_t arg) : n(arg > 0 ? int(arg) : saved) { omp_set_num_threads(n); }
    ~Threads() { omp_set_num_threads(saved); }
};

template <class F>
double seconds(F&& call) {
    const auto t0 = Clock::now();
    if (call() != ATTNCHECK_OK) throw std::runtime_error("a kernel refused the benchmark problem");
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Each iteration times one v2 call and one v1 call on the equivalent problem, alternating, so
// that both see the same machine state.
void run(benchmark::State& state, ProblemV2& v2, attncheck::perf::KernelProblem& v1) {
    const Threads th(state.range(0));
    attncheck::perf::fma_peak_gflops(th.n);  // calibrate outside the timed calls
    double s2 = 0, s1 = 0;
    int c = 0;
    for (auto _ : state) {
        const int copy = c++ % v1.copies;
        if (v2.copies > 1) v2.use_copy(copy % v2.copies);
        s2 += seconds([&] { return attncheck_optimized_kernel_v2(&v2.p); });
        s1 += seconds([&] {
            return attncheck_optimized_kernel(&v1.p, v1.q.data(), v1.k_copy(copy), v1.v_copy(copy), v1.out.data());
        });
    }
    const double n = double(state.iterations());
    state.counters["threads"] = th.n;
    state.counters["us_per_call"] = s2 / n * 1e6;
    state.counters["gflops"] = v2.useful_flops / (s2 / n) * 1e-9;
    state.counters["v1_gflops"] = v1.useful_flops / (s1 / n) * 1e-9;
    state.counters["vs_v1"] = (v2.useful_flops / s2) / (v1.useful_flops / s1);
    state.counters["frac_peak"] = v2.useful_flops / (s2 / n) * 1e-9 / attncheck::perf::fma_peak_gflops(th.n);
}

void BM_AttentionV2PrefillGqaBf16(benchmark::State& state) {
    const int T = int(state.range(1));
    ProblemV2 v2 = make_problem(T, T, false, 1);
    attncheck::perf::KernelProblem v1 = attncheck::perf::make_kernel_problem(T, T, 0, 1);
    run(state, v2, v1);
}
BENCHMARK(BM_AttentionV2PrefillGqaBf16)
    ->ArgsProduct({{1, 0}, {512, 2048}})
    ->ArgNames({"threads", "T"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// A sliding window of 256 keys over a T = 2048 prefill: the tiles outside every row's window are
// never read, so the useful rate (visible pairs only) stays near the full causal prefill's,
// which v1 is timed on (vs_v1 then compares useful rates, not times).
void BM_AttentionV2PrefillWindowGqaBf16(benchmark::State& state) {
    const int T = int(state.range(1));
    ProblemV2 v2 = make_problem(T, T, false, 1, 256);
    attncheck::perf::KernelProblem v1 = attncheck::perf::make_kernel_problem(T, T, 0, 1);
    run(state, v2, v1);
}
BENCHMARK(BM_AttentionV2PrefillWindowGqaBf16)
    ->ArgsProduct({{1, 0}, {2048}})
    ->ArgNames({"threads", "T"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_AttentionV2PagedDecodeGqaBf16(benchmark::State& state) {
    const int Tk = int(state.range(1));
    static ProblemV2 v2 = make_problem(1, Tk, true, kDecodeCopies);
    static attncheck::perf::KernelProblem v1 = attncheck::perf::make_kernel_problem(1, Tk, Tk - 1, kDecodeCopies);
    run(state, v2, v1);
}
BENCHMARK(BM_AttentionV2PagedDecodeGqaBf16)
    ->ArgsProduct({{1, 0}, {4096}})
    ->ArgNames({"threads", "Tk"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// An f32 MHA causal prefill of T rows ([1, T, H, D]) with everything its backward pass reads:
// out and lse from the forward, dout uniform in [-1, 1).
struct BackwardProblem {
    attncheck_problem_v2 p{};
    attncheck_grads_v2 g{};
    std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
    std::vector<std::int32_t> q_pos{0};
    double useful_flops = 0;
};

BackwardProblem& backward_problem(int T) {
    static std::map<int, BackwardProblem> made;
    if (const auto it = made.find(T); it != made.end()) return it->second;
    BackwardProblem& pr = made[T];
    attncheck_problem_v2& p = pr.p;
    p.abi_version = ATTNCHECK_ABI_VERSION_2;
    p.struct_size = sizeof(attncheck_problem_v2);
    p.dtype = ATTNCHECK_DTYPE_F32;
    p.batch = 1, p.q_heads = kHq, p.kv_heads = kHq, p.head_dim = kD, p.value_dim = kD;
    p.q_len = T, p.kv_len = T;
    p.q_pos = pr.q_pos.data();
    p.causal = 1, p.window_left = -1, p.window_right = -1;
    p.scale = 0.125f;
    const std::int64_t bthd[4] = {std::int64_t(T) * kHq * kD, kD, kHq * kD, 1};
    for (attncheck_tensor_v2* t : {&p.q, &p.k, &p.v, &p.out, &pr.g.dout, &pr.g.dq, &pr.g.dk, &pr.g.dv})
        std::copy(bthd, bthd + 4, t->stride);
    const std::size_t n = std::size_t(T) * kHq * kD;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto* x : {&pr.q, &pr.k, &pr.v, &pr.dout}) {
        x->resize(n);
        for (float& e : *x) e = u(rng);
    }
    for (auto* x : {&pr.out, &pr.dq, &pr.dk, &pr.dv}) x->assign(n, 0.0f);
    pr.lse.assign(std::size_t(T) * kHq, 0.0f);
    p.lse = pr.lse.data();
    p.lse_stride[0] = std::int64_t(T) * kHq, p.lse_stride[1] = T, p.lse_stride[2] = 1;
    p.q.data = pr.q.data(), p.k.data = pr.k.data(), p.v.data = pr.v.data(), p.out.data = pr.out.data();
    pr.g.struct_size = sizeof(attncheck_grads_v2);
    pr.g.dout.data = pr.dout.data(), pr.g.dq.data = pr.dq.data(), pr.g.dk.data = pr.dk.data(), pr.g.dv.data = pr.dv.data();
    if (attncheck_optimized_kernel_v2(&p) != ATTNCHECK_OK) throw std::runtime_error("the forward refused its problem");
    const double pairs = double(T) * double(T + 1) / 2;  // causal: row i sees keys 0 .. i
    pr.useful_flops = double(kHq) * pairs * (10.0 * kD);  // 5 products of 2*D flops per pair
    return pr;
}

void BM_AttentionV2BackwardF32(benchmark::State& state) {
    const Threads th(state.range(0));
    BackwardProblem& pr = backward_problem(int(state.range(1)));
    attncheck::perf::PeakWindows pw(th.n);  // its runs are outside the timed calls
    double sb = 0, sf = 0;
    for (auto _ : state) {
        // Through bench::timed (slowdown.hpp): the gated figure feels the gate proof's injected slowdown.
        const double s = attncheck::bench::timed([&] {
            if (attncheck_optimized_kernel_v2_backward(&pr.p, &pr.g) != ATTNCHECK_OK)
                throw std::runtime_error("the backward refused the benchmark problem");
            benchmark::ClobberMemory();
        });
        sb += s;
        sf += seconds([&] { return attncheck_optimized_kernel_v2(&pr.p); });
        attncheck::bench::add_to_window(state, pw, s);
    }
    pw.finish();
    const double n = double(state.iterations());
    // The forward's useful flops: 4*D per visible pair (2*Dk + 2*Dv), 2/5 of the backward's.
    const double fwd_flops = pr.useful_flops * 0.4;
    const double gflops = pr.useful_flops / (sb / n) * 1e-9;
    state.counters["threads"] = th.n;
    state.counters["us_per_call"] = sb / n * 1e6;
    state.counters["gflops"] = gflops;
    attncheck::bench::report_peak(state, pw, gflops, th.n);
    state.counters["fwd_gflops"] = fwd_flops / (sf / n) * 1e-9;
    state.counters["fwd_frac_peak"] = fwd_flops / (sf / n) * 1e-9 / pw.peak_gflops();
    state.counters["bwd_over_fwd"] = sb / sf;
}
BENCHMARK(BM_AttentionV2BackwardF32)
    ->ArgsProduct({{1, 0}, {512, 2048}})
    ->ArgNames({"threads", "T"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
