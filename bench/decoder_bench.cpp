// bench/decoder_bench.cpp — the optimized decoder against the machine's limits.
//
//   BM_Prefill/T/threads    teacher-forced forward of preset `base`: tokens_per_s, gflops (useful
//                           FLOPs: the products plus the unmasked half of causal attention),
//                           frac_peak = gflops / the peak of its timed windows on `threads`
//                           threads (perf::PeakWindows: peak_gflops, peak_run_min/max); threads:0 (every
//                           OpenMP thread, T = 512) only where there are more than 2
//   BM_PrefillScaling       T = 512 on 1 and on 2 threads in one benchmark: speedup_1_to_2
//   BM_DecodeStep/ctx       one Session::step at context ctx (the cache holds ctx positions):
//                           bytes it must read (every weight once + the K/V cache), gbs,
//                           frac_bw = gbs / dram_read_gbs(), and frac_read against the rate of
//                           reading that many bytes again and again, measured between the timed
//                           steps (perf::ReadWindows): the bound where the step's bytes fit in
//                           the last-level cache and it outruns DRAM (calibration.hpp);
//                           frac_read_process against that rate measured once before them
//   BM_Linear/n/k/threads   one linear() of the `base` prefill (M = 512 rows, W [n, k]): gflops,
//                           frac_peak: what the GEMM alone reaches, against BM_Prefill's whole;
//                           threads:0 (every thread) where there are more than 2
//   BM_VsReference          preset small, T = 64: reference::Decoder<float>::forward against the
//                           optimized forward on the same tokens: speedup
//
// Rates are computed from our own wall clock around the timed loop (the decoder runs OpenMP
// threads, so CPU time would overcount), and every benchmark runs a fixed small number of
// iterations so the binary fits in a CI perf gate. Counters are plain values in the JSON output.
//
// Dimension legend: V = vocab, d = d_model, f = d_ff, L = layers, T = tokens, ctx = context.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>

#include "attncheck/model.hpp"
#include "perf/calibration.hpp"
#include "bench/peak_window.hpp"
#include "bench/slowdown.hpp"
#include "optimized/decoder.hpp"
#include "optimized/gemm.hpp"
#include "reference/decoder.hpp"

namespace {

using namespace attncheck;
using attncheck::bench::optimized_entry_under_bench;
using Clock = std::chrono::steady_clock;

struct ThreadCount {
    int saved = omp_get_max_threads();
    explicit ThreadCount(int n) { omp_set_num_threads(n); }
    ~ThreadCount() { omp_set_num_threads(saved); }
};

// Preset `base` (d=512, h=8, f=2048, L=6, V=8192, N=2048), made once per process.
const Model& base_model() {
    static const Model m = init_model(preset_config("base"), 1);
    return m;
}
const optimized::Decoder& base_decoder() {
    static const optimized::Decoder d(base_model(), attention_kernel_of(optimized_entry_under_bench()));
    return d;
}

std::vector<int> tokens_for(const ModelConfig& c, int n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> u(0, c.vocab_size - 1);
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = u(rng);
    return t;
}

// Useful FLOPs of a teacher-forced forward over T tokens: the linear layers (2 per
// multiply-add), the logits, and causal attention's visible half: per layer and head,
// T(T+1)/2 scores of dk multiply-adds and as many probability-times-value rows.
double prefill_flops(const ModelConfig& c, double T) {
    const double d = c.d_model, f = c.d_ff, L = c.n_layers, V = c.vocab_size;
    const double per_token = 2.0 * L * (4.0 * d * d + 2.0 * d * f) + 2.0 * V * d;
    const double attention = L * 2.0 /*QK and PV*/ * 2.0 /*flops per MAC*/ * d * T * (T + 1.0) / 2.0;
    return T * per_token + attention;
}

// Bytes a decode step must read at context ctx: every weight once (the tied embedding is the
// LM head) plus K and V of ctx + 1 positions in every layer.
double step_bytes(const ModelConfig& c, double ctx) {
    const double d = c.d_model, f = c.d_ff, L = c.n_layers, V = c.vocab_size;
    const double layer = 4.0 * d * d + 4.0 * d + 2.0 * d * f + f + d + 6.0 * d /*norms*/;
    const double weights = L * layer + V * d;
    const double kv = L * 2.0 * (ctx + 1.0) * d;
    return 4.0 * (weights + kv);
}

void BM_Prefill(benchmark::State& state) {
    const int T = int(state.range(0));
    const int threads = state.range(1) > 0 ? int(state.range(1)) : omp_get_max_threads();
    const optimized::Decoder& dec = base_decoder();
    const auto tokens = tokens_for(dec.config(), T, 42);
    ThreadCount tc(threads);
    dec.forward(tokens);  // warm: caches, thread pool, scratch
    perf::PeakWindows pw(threads);
    double seconds = 0;
    for (auto _ : state) {
        const double s = bench::timed([&] { benchmark::DoNotOptimize(dec.forward(tokens).data()); });
        seconds += s;
        bench::add_to_window(state, pw, s);
    }
    pw.finish();
    const double iters = double(state.iterations());
    const double gflops = prefill_flops(dec.config(), T) * iters / seconds * 1e-9;
    state.counters["tokens_per_s"] = T * iters / seconds;
    state.counters["gflops"] = gflops;
    bench::report_peak(state, pw, gflops, threads);
    state.counters["threads"] = threads;
}
BENCHMARK(BM_Prefill)
    ->ArgNames({"T", "threads"})
    ->Args({128, 2})->Args({512, 1})->Args({512, 2})->Args({2048, 2})
    ->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
// On a machine of more than 2 threads, how the prefill scales to all of them (on 2 it would
// repeat threads:2).
const bool prefill_all_threads = [] {
    if (omp_get_max_threads() > 2)
        benchmark::RegisterBenchmark("BM_Prefill", BM_Prefill)
            ->ArgNames({"T", "threads"})->Args({512, 0})->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
    return true;
}();

void BM_PrefillScaling(benchmark::State& state) {
    const int T = 512;
    const optimized::Decoder& dec = base_decoder();
    const auto tokens = tokens_for(dec.config(), T, 43);
    auto time_on = [&](int threads) {
        ThreadCount tc(threads);
        dec.forward(tokens);
        double best = 1e30;
        for (int r = 0; r < 3; ++r)
            best = std::min(best, bench::timed([&] { benchmark::DoNotOptimize(dec.forward(tokens).data()); }));
        return best;
    };
    double one = 0, two = 0;
    for (auto _ : state) {
        one = time_on(1);
        two = time_on(2);
    }
    state.counters["ms_1_thread"] = one * 1e3;
    state.counters["ms_2_threads"] = two * 1e3;
    state.counters["speedup_1_to_2"] = one / two;
}
BENCHMARK(BM_PrefillScaling)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DecodeStep(benchmark::State& state) {
    const int ctx = int(state.range(0));
    const optimized::Decoder& dec = base_decoder();
    const ModelConfig& c = dec.config();
    const auto tokens = tokens_for(c, ctx, 44);
    const double bw = perf::dram_read_gbs();
    const double bytes = step_bytes(c, ctx);
    perf::read_gbs(bytes);  // frac_read_process's rate, measured before the timing
    optimized::Session s(dec);
    s.prefill(tokens, 512);
    perf::ReadWindows rw(bytes);  // its passes are outside the timed steps
    s.step(1);  // warm, after rw's first pass
    s.truncate(ctx);
    double seconds = 0;
    int token = 0;
    for (auto _ : state) {
        // Every step is at position ctx: the step reads ctx cached positions plus its own.
        const double t = bench::timed([&] { benchmark::DoNotOptimize(s.step(token).data()); });
        seconds += t;
        bench::add_to_window(state, rw, t);
        s.truncate(ctx);
        token = (token + 1) % c.vocab_size;
    }
    rw.finish();
    const double iters = double(state.iterations());
    const double gbs = bytes * iters / seconds * 1e-9;
    state.counters["ms_per_token"] = seconds / iters * 1e3;
    state.counters["bytes"] = bytes;
    state.counters["gbs"] = gbs;
    state.counters["dram_gbs"] = bw;
    state.counters["frac_bw"] = gbs / bw;
    bench::report_read(state, rw, gbs, bytes);
}
BENCHMARK(BM_DecodeStep)->ArgName("ctx")->Arg(128)->Arg(1024)->Arg(2047)
    ->Iterations(40)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Linear(benchmark::State& state) {
    const int n = int(state.range(0)), k = int(state.range(1));
    const int threads = state.range(2) > 0 ? int(state.range(2)) : omp_get_max_threads();
    const int m = 512;
    std::mt19937_64 rng(46);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(std::size_t(n) * std::size_t(k));
    std::vector<float> bias(static_cast<std::size_t>(n));
    std::vector<float> x(std::size_t(m) * std::size_t(k));
    for (float& v : w) v = u(rng);
    for (float& v : bias) v = u(rng);
    for (float& v : x) v = u(rng);
    const optimized::PackedMatrix W = optimized::pack_weights(w.data(), n, k, bias.data());
    std::vector<float> y(std::size_t(m) * std::size_t(n));
    ThreadCount tc(threads);
    optimized::linear(W, x.data(), m, k, y.data(), n);  // warm
    perf::PeakWindows pw(threads);
    double seconds = 0;
    for (auto _ : state) {
        const double s = bench::timed([&] {
            optimized::linear(W, x.data(), m, k, y.data(), n);
            benchmark::DoNotOptimize(y.data());
        });
        seconds += s;
        bench::add_to_window(state, pw, s);
    }
    pw.finish();
    const double gflops = 2.0 * m * n * double(k) * double(state.iterations()) / seconds * 1e-9;
    state.counters["gflops"] = gflops;
    bench::report_peak(state, pw, gflops, threads);
}
// The prefill's products [n, k]: q/k/v together, the output projection, the two feed-forward
// layers, the logits (tied embedding); each on `threads` threads (0: every thread).
template <int Threads>
void prefill_products(benchmark::internal::Benchmark* b) {
    for (const auto& [n, k] : {std::pair{1536, 512}, {512, 512}, {2048, 512}, {512, 2048}, {8192, 512}})
        b->Args({n, k, Threads});
}
BENCHMARK(BM_Linear)
    ->ArgNames({"n", "k", "threads"})
    ->Args({1536, 512, 1})->Apply(prefill_products<2>)
    ->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();
// On a machine of more than 2 threads, the same products on all of them (threads:0): beside
// BM_Prefill/T:512/threads:0, they tell whether the products or the rest hold a many-core prefill
// back.
const bool linear_all_threads = [] {
    if (omp_get_max_threads() > 2)
        benchmark::RegisterBenchmark("BM_Linear", BM_Linear)
            ->ArgNames({"n", "k", "threads"})->Apply(prefill_products<0>)
            ->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();
    return true;
}();

void BM_VsReference(benchmark::State& state) {
    const ModelConfig c = preset_config("small");
    const Model model = init_model(c, 2);
    const auto tokens = tokens_for(c, 64, 45);
    const reference::Decoder<float> ref(model);
    const optimized::Decoder opt(model, attention_kernel_of(optimized_entry_under_bench()));
    double ref_best = 1e30;
    for (int r = 0; r < 2; ++r) {
        const auto t0 = Clock::now();
        auto logits = ref.forward(tokens);
        benchmark::DoNotOptimize(logits.data());
        ref_best = std::min(ref_best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    opt.forward(tokens);
    double seconds = 0;
    for (auto _ : state)
        seconds += bench::timed([&] { benchmark::DoNotOptimize(opt.forward(tokens).data()); });
    const double opt_s = seconds / double(state.iterations());
    state.counters["reference_ms"] = ref_best * 1e3;
    state.counters["optimized_ms"] = opt_s * 1e3;
    state.counters["speedup"] = ref_best / opt_s;
}
BENCHMARK(BM_VsReference)->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
