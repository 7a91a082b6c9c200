// bench/peer/torch_peer.cpp — the peer: libtorch's CPU implementation of the same decoder
// (docs/spec/MODEL.md, preset `base`, the same weights), measured in the same run as the
// optimized decoder, so that "faster than libtorch" is a ratio of one process on one machine.
//
//   BM_PrefillVsTorch/T:512     teacher-forced logits of T tokens, the two implementations
//                               alternating (torch, ours, torch, ours, ...): tokens/s of each,
//                               ratio = ours / torch's
//   BM_DecodeVsTorch/ctx:1024   one cached decode step at context ctx (both keep a K/V cache
//                               of N positions per layer and attend over ctx + 1 of them):
//                               ms/token of each, ratio = torch's / ours
//   BM_LinearVsBlas/n/k         the prefill's matrix products alone against cblas_sgemm of the
//                               BLAS torch links, on our threads (below)
// Before any timing, both implementations' logits are compared on the same tokens (teacher-forced
// and step by step): a peer that computes another function would make every ratio meaningless,
// so the binary stops with a message when they disagree.
//
// OpenBLAS's kernels: Debian's OpenBLAS (DYNAMIC_ARCH) picks its kernels from the CPU model at
// load time, and falls back to its SSE3 kernels ("Prescott") on a model it does not know (0.3.21
// on an Emerald Rapids Xeon, family 6 model 207: torch's prefill ~2.5x slower than with its
// AVX-512 kernels). A peer handicapped that way makes every ratio a flattering lie, so when
// OpenBLAS reports a core below AVX2 on a CPU with AVX2 and FMA and OPENBLAS_CORETYPE is unset,
// the binary sets it (SkylakeX with AVX-512 F/BW/DQ/VL, else Haswell) and runs itself again.
// The core torch ran on is printed and kept in the JSON context (torch_blas_core).
//
// Settling: after a parallel call OpenBLAS's worker threads spin for 2^28 TSC cycles (about
// 0.1 s) before they sleep, so in an alternation the call after torch's shares the cores with
// them: ours ran 4-13% slower by prefill tokens/s (three alternating runs of each on this VM).
// The binary therefore waits --settle-ms (default 150) after each torch call, outside both
// timings. Ours needs no such pause: its threads spin for GOMP_SPINCOUNT=10000 (microseconds).
// The wait is busy, on our threads: after 150 ms asleep, the cores' first milliseconds of work are
// slow (on a 2-vCPU KVM guest, AMD EPYC Zen 3: a `base` decode step at ctx 1024 took 16.4 ms
// after a 150 ms sleep against 7.4 ms back to back; 7.6 ms after streaming 64 MB instead, so it
// is the idle, not the caches), while torch's call always follows ours at once. A sleep made the
// decode ratio a comparison of a cold step with a warm one (1.8x where it was 3.3x).
//
// Threads: ours runs OMP_NUM_THREADS (default: every core); torch runs with
// --torch-threads intra-op threads (default 1) and OpenBLAS with --blas-threads (default: every
// core): on 2 vCPUs that is libtorch's best setting for both figures (two intra-op threads on
// top of a threaded BLAS oversubscribe the cores). Built only with -DATTNCHECK_BENCH_TORCH=ON
// (Debian: libtorch-dev, and libopenblas0-pthread: with the reference BLAS torch's matrix
// products are several times slower and the comparison says nothing).
//
// Dimension legend: V = vocab, d = d_model, h = heads, dk = d/h, f = d_ff, L = layers,
// N = max_len, T = tokens in a call.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>
#include <torch/torch.h>

#include "attncheck/model.hpp"
#include "perf/calibration.hpp"
#include "optimized/decoder.hpp"
#include "optimized/gemm.hpp"
#include "optimized/simd_targets.hpp"
#include "perf/omp_wait.hpp"

namespace {

using namespace attncheck;
using torch::indexing::Slice;
using Clock = std::chrono::steady_clock;

int g_torch_threads = 1;
int g_blas_threads = 0;  // 0: every core
int g_our_threads = 0;   // OMP_NUM_THREADS at start-up (libtorch's intra-op pool is libgomp's too)
int g_settle_ms = 150;   // pause after each torch call (see the top of the file)

torch::Tensor to_torch(const Tensor& t) {
    std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
    return torch::from_blob(const_cast<float*>(t.data.data()), shape, torch::kFloat32).clone();
}

// The decoder of MODEL.md in torch operations, as a PyTorch user writes it (nn.Linear,
// F.layer_norm, masked softmax attention). Self-attention only: the peer covers the presets.
class TorchDecoder {
public:
    explicit TorchDecoder(const Model& m) : c_(m.config) {
        if (c_.cross_attention) throw std::runtime_error("the torch peer has no cross-attention");
        auto w = [&](const std::string& name) { return to_torch(m.at(name)); };
        embed_ = w("embed.weight");
        lm_head_ = to_torch(m.lm_head());
        pos_ = c_.positional == Positional::learned ? w("pos.weight") : sinusoid();
        for (int l = 0; l < c_.n_layers; ++l) {
            const std::string p = "layers." + std::to_string(l) + ".";
            Layer L;
            // Q, K and V in one product, as fused QKV projections do.
            L.wqkv = torch::cat({w(p + "self_attn.q.weight"), w(p + "self_attn.k.weight"),
                                 w(p + "self_attn.v.weight")});
            L.bqkv = torch::cat({w(p + "self_attn.q.bias"), w(p + "self_attn.k.bias"),
                                 w(p + "self_attn.v.bias")});
            L.wo = w(p + "self_attn.o.weight");
            L.bo = w(p + "self_attn.o.bias");
            L.n1w = w(p + "norm_self.weight");
            L.n1b = w(p + "norm_self.bias");
            L.w1 = w(p + "ffn.fc1.weight");
            L.b1 = w(p + "ffn.fc1.bias");
            L.w2 = w(p + "ffn.fc2.weight");
            L.b2 = w(p + "ffn.fc2.bias");
            L.n2w = w(p + "norm_ffn.weight");
            L.n2b = w(p + "norm_ffn.bias");
            layers_.push_back(L);
        }
        if (c_.norm == Norm::pre) {
            fnw_ = w("final_norm.weight");
            fnb_ = w("final_norm.bias");
        }
    }

    // Teacher-forced logits [T, V].
    torch::Tensor forward(const std::vector<int>& tokens) const {
        torch::NoGradGuard ng;
        const int64_t T = int64_t(tokens.size());
        torch::Tensor x = embed(tokens, 0);
        const torch::Tensor mask = torch::full({T, T}, -INFINITY).triu(1);
        for (const Layer& L : layers_)
            x = layer(L, x, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
                return attend(q, k, v, mask);
            });
        return logits(x);
    }

    // A K/V cache of N positions per layer, [h, N, dk] each.
    struct Cache {
        std::vector<torch::Tensor> k, v;
        int64_t len = 0;
    };
    Cache new_cache() const {
        Cache cache;
        for (int l = 0; l < c_.n_layers; ++l) {
            cache.k.push_back(torch::zeros({c_.n_heads, c_.max_len, c_.head_dim()}));
            cache.v.push_back(torch::zeros({c_.n_heads, c_.max_len, c_.head_dim()}));
        }
        return cache;
    }

    // Appends tokens to the cache (one call for all of them) and returns their logits [n, V].
    torch::Tensor extend(Cache& cache, const std::vector<int>& tokens) const {
        torch::NoGradGuard ng;
        const int64_t n = int64_t(tokens.size()), at = cache.len;
        torch::Tensor x = embed(tokens, at);
        // Row i (absolute position at + i) sees cached keys 0 .. at + i.
        const torch::Tensor mask = torch::full({n, at + n}, -INFINITY).triu(at + 1);
        for (std::size_t l = 0; l < layers_.size(); ++l)
            x = layer(layers_[l], x, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
                cache.k[l].index_put_({Slice(), Slice(at, at + n)}, k);
                cache.v[l].index_put_({Slice(), Slice(at, at + n)}, v);
                return attend(q, cache.k[l].index({Slice(), Slice(0, at + n)}),
                              cache.v[l].index({Slice(), Slice(0, at + n)}), mask);
            });
        cache.len = at + n;
        return logits(x);
    }

private:
    struct Layer {
        torch::Tensor wqkv, bqkv, wo, bo, n1w, n1b, w1, b1, w2, b2, n2w, n2b;
    };

    torch::Tensor sinusoid() const {
        const int64_t N = c_.max_len, d = c_.d_model;
        std::vector<float> t(std::size_t(N * d));
        for (int64_t p = 0; p < N; ++p)
            for (int64_t i = 0; i < d; ++i) {
                const double angle = double(p) / std::pow(10000.0, double(2 * (i / 2)) / double(d));
                t[std::size_t(p * d + i)] = float(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
            }
        return torch::from_blob(t.data(), {N, d}, torch::kFloat32).clone();
    }

    torch::Tensor embed(const std::vector<int>& tokens, int64_t at) const {
        std::vector<int64_t> ids(tokens.begin(), tokens.end());
        const torch::Tensor idx = torch::tensor(ids, torch::kInt64);
        const double s = c_.embed_scale_sqrt_d ? std::sqrt(double(c_.d_model)) : 1.0;
        return embed_.index_select(0, idx) * s + pos_.index({Slice(at, at + int64_t(ids.size()))});
    }

    // q [h, n, dk], k and v [h, m, dk], mask [n, m] -> [h, n, dk].
    torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& mask) const {
        const double scale = 1.0 / std::sqrt(double(c_.head_dim()));
        const torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale + mask;
        return torch::matmul(torch::softmax(scores, -1), v);
    }

    torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const {
        return torch::layer_norm(x, {c_.d_model}, w, b, c_.ln_eps);
    }

    template <class Attention>
    torch::Tensor layer(const Layer& L, torch::Tensor x, Attention&& attention) const {
        const int64_t n = x.size(0), h = c_.n_heads, dk = c_.head_dim(), d = c_.d_model;
        auto self_attention = [&](const torch::Tensor& in) {
            const torch::Tensor qkv = torch::linear(in, L.wqkv, L.bqkv);  // [n, 3d]
            auto heads = [&](int64_t part) {
                return qkv.index({Slice(), Slice(part * d, (part + 1) * d)}).view({n, h, dk}).transpose(0, 1);
            };
            const torch::Tensor o = attention(heads(0), heads(1), heads(2));  // [h, n, dk]
            return torch::linear(o.transpose(0, 1).reshape({n, d}), L.wo, L.bo);
        };
        auto ffn = [&](const torch::Tensor& in) {
            torch::Tensor a = torch::linear(in, L.w1, L.b1);
            a = c_.activation == Activation::relu ? torch::relu(a)
                : torch::gelu(a, c_.activation == Activation::gelu_tanh ? "tanh" : "none");
            return torch::linear(a, L.w2, L.b2);
        };
        if (c_.norm == Norm::post) {
            x = norm(x + self_attention(x), L.n1w, L.n1b);
            return norm(x + ffn(x), L.n2w, L.n2b);
        }
        x = x + self_attention(norm(x, L.n1w, L.n1b));
        return x + ffn(norm(x, L.n2w, L.n2b));
    }

    torch::Tensor logits(torch::Tensor x) const {
        if (c_.norm == Norm::pre) x = norm(x, fnw_, fnb_);
        return torch::linear(x, lm_head_);
    }

    ModelConfig c_;
    torch::Tensor embed_, lm_head_, pos_, fnw_, fnb_;
    std::vector<Layer> layers_;
};

const Model& base_model() {
    static const Model m = init_model(preset_config("base"), 1);
    return m;
}
const optimized::Decoder& ours() {
    static const optimized::Decoder d(base_model());
    return d;
}
const TorchDecoder& theirs() {
    static const TorchDecoder d(base_model());
    return d;
}

std::vector<int> tokens_for(int n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> u(0, base_model().config.vocab_size - 1);
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = u(rng);
    return t;
}

// Largest |ours - torch| over the largest |logit|: float32 implementations of one function
// agree to ~1e-5 here; 1e-3 is far outside rounding and far inside any real difference.
void check_same_function() {
    const auto tokens = tokens_for(64, 7);
    const auto a = ours().forward(tokens);  // optimized::Logits
    const torch::Tensor b = theirs().forward(tokens).contiguous();
    const torch::Tensor ta = torch::from_blob(const_cast<float*>(a.data()), b.sizes(), torch::kFloat32);
    const double forward_gap = (ta - b).abs().max().item<double>() / b.abs().max().item<double>();
    auto cache = theirs().new_cache();
    theirs().extend(cache, std::vector<int>(tokens.begin(), tokens.end() - 1));
    const torch::Tensor last = theirs().extend(cache, {tokens.back()});
    const double step_gap = (last[0] - b[63]).abs().max().item<double>() / b.abs().max().item<double>();
    std::printf("torch peer: logits agree with the optimized decoder to %.2g (forward) and %.2g "
                "(cached step) of the largest logit\n", forward_gap, step_gap);
    if (!(forward_gap < 1e-3 && step_gap < 1e-3)) {
        std::fprintf(stderr, "torch peer: it computes another function; no comparison is meaningful\n");
        std::exit(1);
    }
}

// Both run on one libgomp: at::set_num_threads sets the OpenMP thread count, so each side
// sets its own before each call.
void use_our_threads() { omp_set_num_threads(g_our_threads); }
void set_torch_threads() {
    at::set_num_threads(g_torch_threads);
    // OpenBLAS's own pool (the libblas.so.3 alternative); absent with another BLAS.
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
        set(g_blas_threads > 0 ? g_blas_threads : omp_get_num_procs());
}

// Lets OpenBLAS's spinning workers go to sleep before the other side's call.
void settle_after_torch() {
    if (g_settle_ms <= 0) return;
    const auto until = Clock::now() + std::chrono::milliseconds(g_settle_ms);
#pragma omp parallel num_threads(g_our_threads)
    while (Clock::now() < until) {
    }
}

template <class F>
double seconds_of(F&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

void BM_PrefillVsTorch(benchmark::State& state) {
    const int T = int(state.range(0));
    const auto tokens = tokens_for(T, 42);
    set_torch_threads();
    theirs().forward(tokens);
    use_our_threads();
    ours().forward(tokens);
    double t_ours = 0, t_torch = 0;
    for (auto _ : state) {
        set_torch_threads();
        t_torch += seconds_of([&] { benchmark::DoNotOptimize(theirs().forward(tokens).data_ptr()); });
        settle_after_torch();
        use_our_threads();
        t_ours += seconds_of([&] { benchmark::DoNotOptimize(ours().forward(tokens).data()); });
    }
    const double n = double(state.iterations());
    state.counters["ours_tokens_per_s"] = T * n / t_ours;
    state.counters["torch_tokens_per_s"] = T * n / t_torch;
    state.counters["ratio"] = t_torch / t_ours;
    use_our_threads();
    state.counters["fma_peak_gflops"] = perf::fma_peak_gflops(g_our_threads);
}
BENCHMARK(BM_PrefillVsTorch)->ArgName("T")->Arg(512)->Iterations(4)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_DecodeVsTorch(benchmark::State& state) {
    const int ctx = int(state.range(0));
    const auto tokens = tokens_for(ctx, 44);
    use_our_threads();
    optimized::Session s(ours());
    s.prefill(tokens, 512);
    set_torch_threads();
    auto cache = theirs().new_cache();
    for (std::size_t at = 0; at < tokens.size(); at += 512)
        theirs().extend(cache, std::vector<int>(tokens.begin() + long(at),
                                                tokens.begin() + long(std::min(tokens.size(), at + 512))));
    double t_ours = 0, t_torch = 0;
    int token = 0;
    for (auto _ : state) {
        // Every step is at position ctx: it reads ctx cached positions plus its own.
        set_torch_threads();
        t_torch += seconds_of([&] { benchmark::DoNotOptimize(theirs().extend(cache, {token}).data_ptr()); });
        settle_after_torch();
        cache.len = ctx;
        use_our_threads();
        t_ours += seconds_of([&] { benchmark::DoNotOptimize(s.step(token).data()); });
        s.truncate(ctx);
        token = (token + 1) % base_model().config.vocab_size;
    }
    const double n = double(state.iterations());
    state.counters["ours_ms_per_token"] = t_ours / n * 1e3;
    state.counters["torch_ms_per_token"] = t_torch / n * 1e3;
    state.counters["ratio"] = t_torch / t_ours;
    use_our_threads();
    state.counters["dram_gbs"] = perf::dram_read_gbs();
}
BENCHMARK(BM_DecodeVsTorch)->ArgName("ctx")->Arg(1024)->Iterations(40)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The prefill's matrix products alone, M = 512 rows of `base` (W [n, k]): optimized::linear
// against cblas_sgemm of the BLAS torch links (OpenBLAS's kernels: the core in the context),
// alternating, each on our threads. What a tuned BLAS reaches on this machine is the context of
// the prefill's fraction of the FMA peak: on a 2-vCPU AMD EPYC Zen 3 guest, one thread,
// OpenBLAS 0.3.21 read 0.67-0.71 of the same-run peak (BLIS 0.9.0 0.64-0.76) and ours was
// 1.03-1.11x OpenBLAS. Both compute y = x W^T: checked before the timing (a wrong product would
// make the ratio meaningless).
//   counters: ours_gflops, blas_gflops, ratio = BLAS time / ours, and each one's fraction of the
//   FMA peak of the benchmark's timed windows (ours_frac_peak, blas_frac_peak)
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

void BM_LinearVsBlas(benchmark::State& state) {
    const auto sgemm = reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
    if (!sgemm) {
        state.SkipWithError("the BLAS torch links exports no cblas_sgemm");
        return;
    }
    const int n = int(state.range(0)), k = int(state.range(1)), m = 512;
    std::mt19937_64 rng(47);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(std::size_t(n) * std::size_t(k)), x(std::size_t(m) * std::size_t(k));
    for (float& v : w) v = u(rng);
    for (float& v : x) v = u(rng);
    const optimized::PackedMatrix W = optimized::pack_weights(w.data(), n, k, nullptr);
    std::vector<float> y_ours(std::size_t(m) * std::size_t(n)), y_blas(y_ours.size());
    use_our_threads();
    using SetThreads = void (*)(int);
    const auto blas_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (blas_threads) blas_threads(g_our_threads);
    const auto ours = [&] { optimized::linear(W, x.data(), m, k, y_ours.data(), n); };
    const auto blas = [&] {
        sgemm(kCblasRowMajor, kCblasNoTrans, kCblasTrans, m, n, k, 1.0f, x.data(), k, w.data(), k, 0.0f,
              y_blas.data(), n);
    };
    ours();
    blas();
    double gap = 0, largest = 0;
    for (std::size_t i = 0; i < y_ours.size(); ++i) {
        gap = std::max(gap, double(std::abs(y_ours[i] - y_blas[i])));
        largest = std::max(largest, double(std::abs(y_blas[i])));
    }
    if (!(gap <= 1e-4 * largest)) {
        state.SkipWithError("optimized::linear and cblas_sgemm disagree: no comparison is meaningful");
        return;
    }
    const double flops = 2.0 * m * n * double(k);
    const int calls = std::max(1, int(0.05 * perf::fma_peak_gflops(g_our_threads) * 1e9 / flops));  // ~50 ms
    perf::PeakWindows pw(g_our_threads);
    double t_ours = 0, t_blas = 0;
    for (auto _ : state) {
        const double tb = seconds_of([&] { for (int i = 0; i < calls; ++i) blas(); });
        settle_after_torch();  // OpenBLAS's workers spin after its calls, as after torch's
        const double to = seconds_of([&] { for (int i = 0; i < calls; ++i) ours(); });
        t_blas += tb;
        t_ours += to;
        pw.add(tb + to);
        if (pw.due()) {
            state.PauseTiming();
            pw.measure();
            state.ResumeTiming();
        }
    }
    pw.finish();
    const double total = flops * calls * double(state.iterations());
    state.counters["ours_gflops"] = total / t_ours * 1e-9;
    state.counters["blas_gflops"] = total / t_blas * 1e-9;
    state.counters["ratio"] = t_blas / t_ours;
    state.counters["ours_frac_peak"] = total / t_ours * 1e-9 / pw.peak_gflops();
    state.counters["blas_frac_peak"] = total / t_blas * 1e-9 / pw.peak_gflops();
    state.counters["peak_gflops"] = pw.peak_gflops();
    set_torch_threads();  // the BLAS's own thread count again, for the benchmarks after this one
}
BENCHMARK(BM_LinearVsBlas)
    ->ArgNames({"n", "k"})
    ->Args({1536, 512})
    ->Args({512, 512})
    ->Args({2048, 512})
    ->Args({512, 2048})
    ->Args({8192, 512})
    ->Iterations(5)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

// The OpenBLAS core torch's products run on ("" with another BLAS).
std::string blas_core() {
    using CoreName = char* (*)();
    const auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* core = name ? name() : nullptr;
    return core ? core : "";
}

// The OPENBLAS_CORETYPE this CPU deserves when OpenBLAS chose a core below AVX2 (see the top of
// the file), or null to keep its choice.
const char* better_blas_core(const std::string& core) {
    if (core.empty() || std::getenv("OPENBLAS_CORETYPE")) return nullptr;
    static const char* const at_least_avx2[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
    std::string lower = core;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (const char* known : at_least_avx2)
        if (lower == known) return nullptr;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return nullptr;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    return avx512 ? "SkylakeX" : "Haswell";
}

int main(int argc, char** argv) {
    const std::string core = blas_core();
    if (const char* better = better_blas_core(core)) {
        std::fprintf(stderr, "attncheck_peer_torch: OpenBLAS chose its %s kernels on this CPU; running "
                     "again with OPENBLAS_CORETYPE=%s\n", core.c_str(), better);
        setenv("OPENBLAS_CORETYPE", better, 1);
        execv("/proc/self/exe", argv);
        std::perror("attncheck_peer_torch: re-exec with OPENBLAS_CORETYPE failed; going on");
    }
    perf::reexec_with_short_spin(argv, "attncheck_peer_torch");  // as attncheck_bench waits
    if (const std::string& error = optimized::isa_choice().error; !error.empty()) {
        std::fprintf(stderr, "attncheck_peer_torch: %s\n", error.c_str());
        return 2;
    }
    g_our_threads = omp_get_max_threads();
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--torch-threads=", 0) == 0) g_torch_threads = std::max(1, std::atoi(a.c_str() + 16));
        else if (a.rfind("--blas-threads=", 0) == 0) g_blas_threads = std::max(0, std::atoi(a.c_str() + 15));
        else if (a.rfind("--settle-ms=", 0) == 0) g_settle_ms = std::max(0, std::atoi(a.c_str() + 12));
        else rest.push_back(argv[i]);
    }
    int n = int(rest.size());
    benchmark::Initialize(&n, rest.data());
    if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
    set_torch_threads();
    check_same_function();
    use_our_threads();
    benchmark::AddCustomContext("our_threads", std::to_string(g_our_threads));
    benchmark::AddCustomContext("torch_intra_op_threads", std::to_string(g_torch_threads));
    std::printf("torch peer: OpenBLAS core %s\n", core.empty() ? "(not OpenBLAS)" : core.c_str());
    benchmark::AddCustomContext("settle_ms_after_torch", std::to_string(g_settle_ms));
    benchmark::AddCustomContext("torch_blas_core", core.empty() ? "not OpenBLAS" : core);
    benchmark::AddCustomContext("blas_threads", std::to_string(g_blas_threads > 0 ? g_blas_threads : omp_get_num_procs()));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
