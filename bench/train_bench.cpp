// bench/train_bench.cpp — the float32 training step (optimized/train_step.hpp) against the
// machine's FMA peak.
//
//   BM_TrainStep/threads    one optimized::train_loss with gradients of a small model (d=256,
//                           h=4, f=1024, L=2, V=512, pre-norm, gelu, untied) over B=8 sequences
//                           of T=128 tokens, causal, with the built-in kernel's forward and
//                           backward: steps_per_s, tokens_per_s, gflops (train_flops: the
//                           products of the forward and the backward, attention's visible
//                           pairs only), frac_peak = gflops / the peak of its timed windows on
//                           `threads` threads (bench/peak_window.hpp)
//
// Not in the perf gate's list (ci/perf_gate.sh): a figure of its own, read beside BM_Prefill's.
// Rates from our own wall clock around each step, as in decoder_bench.cpp.
//
// Measured on the 2-vCPU AMD EPYC (family 26, Zen 5, AVX-512) VM, in runs whose peak windows
// agreed within 3% (a quiet machine): frac_peak 0.42-0.43 on 1 thread (86 GFLOP/s of 202),
// 0.34 on 2 (141 of 408). Of a 1-thread step, the GEMM's tiles are ~40%, GELU's erf (forward,
// and erf + exp in the backward, scalar libm calls) ~19%, the transposes and LayerNorms ~9%:
// a vectorised erf is the next gain.
//
// Dimension legend: V = vocab, d = d_model, f = d_ff, L = layers, T = tokens, B = sequences.
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>

#include "attncheck/model.hpp"
#include "bench/peak_window.hpp"
#include "bench/slowdown.hpp"
#include "optimized/train_step.hpp"
#include "perf/calibration.hpp"

namespace {

using namespace attncheck;

struct ThreadCount {
    int saved = omp_get_max_threads();
    explicit ThreadCount(int n) { omp_set_num_threads(n); }
    ~ThreadCount() { omp_set_num_threads(saved); }
};

ModelConfig train_config() {
    return {.vocab_size = 512, .d_model = 256, .n_heads = 4, .d_ff = 1024, .n_layers = 2, .max_len = 128,
            .norm = Norm::pre, .positional = Positional::learned, .activation = Activation::gelu, .tie_embeddings = false};
}

// B sequences of T random tokens, every position weighted (language modelling).
std::vector<reference::Sequence> train_batch(const ModelConfig& c, int B, int T, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> u(0, c.vocab_size - 1);
    std::vector<reference::Sequence> batch(static_cast<std::size_t>(B));
    for (auto& s : batch) {
        for (int t = 0; t < T; ++t) s.tokens.push_back(u(rng));
        s.weights.assign(std::size_t(T - 1), 1.0);
    }
    return batch;
}

void BM_TrainStep(benchmark::State& state) {
    const int threads = int(state.range(0));
    const ModelConfig c = train_config();
    static const Model model = init_model(c, 1);
    const auto batch = train_batch(c, 8, 128, 7);
    ThreadCount tc(threads);
    optimized::Grads grad;
    optimized::train_loss(model, batch, {}, {}, &grad);  // warm: thread pool, GEMM scratch, page faults
    perf::PeakWindows pw(threads);
    double seconds = 0;
    for (auto _ : state) {
        const double s = bench::timed([&] { benchmark::DoNotOptimize(optimized::train_loss(model, batch, {}, {}, &grad)); });
        seconds += s;
        bench::add_to_window(state, pw, s);
    }
    pw.finish();
    const double iters = double(state.iterations());
    const double gflops = optimized::train_flops(c, batch) * iters / seconds * 1e-9;
    state.counters["steps_per_s"] = iters / seconds;
    state.counters["tokens_per_s"] = 8.0 * 128.0 * iters / seconds;
    state.counters["gflops"] = gflops;
    bench::report_peak(state, pw, gflops, threads);
    state.counters["threads"] = threads;
}
BENCHMARK(BM_TrainStep)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(5)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
