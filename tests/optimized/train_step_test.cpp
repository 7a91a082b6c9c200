// tests/optimized/train_step_test.cpp — the float32 training step (optimized/train_step.hpp)
// against the float64 oracle reference::decoder_loss: the loss and every parameter's gradient for
// every wiring, with the optimized and the reference version 2 kernels, causal and unmasked,
// sequences of different lengths in one batch (one kernel call each) and of one length (one call
// for the batch), weights with zeros; each planted bug caught; determinism; refusals.
//
// The metric, per tensor: max_i |g32_i - g64_i| / max_i |g64_i| (scale-aware: a tensor whose
// gradient is small overall is not judged by the largest tensor's scale; floored at kScaleFloor
// of the largest, for the gradients that are 0 exactly). The bound, kGradBound,
// is set from the worst value measured over every case here (see its comment).
#include <algorithm>
#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "kernels/registry.hpp"
#include "optimized/decoder.hpp"
#include "optimized/gemm.hpp"
#include "optimized/train_step.hpp"
#include "properties/decoder_gradients.hpp"
#include "reference/attention_v2.hpp"
#include "reference/decoder_grad.hpp"
#include "tests/reference/feature_wirings.hpp"
#include "thread_count.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::reference;
using optimized::Grads;
using optimized::StepOptions;
using optimized::TrainKernel;
using optimized::train_loss;
using properties::compare_with_oracle;
using properties::GradComparison;
using testing::feature_wirings;
using testing::Wiring;

// The worst measured over every case of the agreement test: 2.0e-6 (gradients: a key bias, whose
// true gradient is 0, see kScaleFloor), 8.1e-8 (the loss, relative). float32 rounding (eps 6e-8)
// through a few hundred terms per product; the bounds leave 25x and 12x of margin, while every
// planted bug moves some tensor by more than 100x the bound.
constexpr double kGradBound = 5e-5;
constexpr double kLossBound = 1e-6;
// A tensor's scale is at least this fraction of the whole gradient's largest element. A key
// bias's gradient is 0 exactly (softmax ignores a shift of a row's scores, and q . bk shifts
// them all): its float32 value is the cancellation noise of a column sum of dK, whose terms are
// of the size of k.weight's gradient, and dividing that noise by ~1e-18 would measure nothing.
constexpr double kScaleFloor = 1e-2;

ModelConfig tiny(Norm norm, Activation act, bool tied, Positional pos, bool scale) {
    return {.vocab_size = 11, .d_model = 16, .n_heads = 2, .d_ff = 24, .n_layers = 2, .max_len = 12, .norm = norm,
            .positional = pos, .activation = act, .embed_scale_sqrt_d = scale, .tie_embeddings = tied};
}

// Zeros where a backward may divide or skip: a LayerNorm weight of 0 (its xhat cannot be
// recovered from its output), a row of Wq (a head's scores all 0: uniform attention), an fc1
// row and bias (a hidden unit whose pre-activation is exactly 0, relu's kink, in both
// precisions), an embedding row.
Model with_zeros(Model m) {
    const auto zero = [&](const std::string& name, std::size_t from, std::size_t n) {
        auto& v = m.tensors.at(name).data;
        std::fill_n(v.begin() + std::ptrdiff_t(from), n, 0.0f);
    };
    const std::size_t d = std::size_t(m.config.d_model);
    zero("layers.0.norm_self.weight", 3, 2);
    zero("layers.1.norm_ffn.weight", 0, 1);
    zero("layers.0.self_attn.q.weight", 0, d);
    zero("layers.1.ffn.fc1.weight", 2 * d, d);
    zero("layers.1.ffn.fc1.bias", 2, 1);
    zero("embed.weight", 5 * d, d);
    return m;
}

// lengths {5, 9, 3} (different: one kernel call per sequence) or {7, 7, 7} (one call for all),
// some weights 0, the others from 0.5 to 3.5.
std::vector<Sequence> batch_of(std::uint64_t seed, const ModelConfig& c, bool same_length) {
    std::mt19937_64 rng(seed);
    std::vector<Sequence> batch;
    for (const std::size_t T : same_length ? std::vector<std::size_t>{7, 7, 7} : std::vector<std::size_t>{5, 9, 3}) {
        Sequence q;
        for (std::size_t t = 0; t < T; ++t) q.tokens.push_back(int(rng() % std::uint64_t(c.vocab_size)));
        for (std::size_t t = 0; t + 1 < T; ++t) q.weights.push_back(t % 3 == 1 ? 0.0 : 0.5 + double(rng() % 4));
        batch.push_back(q);
    }
    return batch;
}

// The step's loss and gradients against the oracle's by the metric of the decoder gradient
// properties (per tensor: the largest error over the tensor's scale), at this test's bound and floor.
GradComparison compare(double l32, const Grads& g32, double l64, const Params& g64) {
    return compare_with_oracle(l32, g32, l64, g64, kGradBound, kScaleFloor);
}

std::string where(const GradComparison& a) { return a.describe("float32 step", "float64 oracle"); }

struct Subject {
    const char* name;
    TrainKernel kernel;
};
const std::vector<Subject>& subjects() {
    static const std::vector<Subject> s = {
        {"optimized_v2", {attncheck_optimized_kernel_v2, attncheck_optimized_kernel_v2_backward}},
        {"reference_v2", {attncheck_reference_kernel_v2, attncheck_reference_kernel_v2_backward}}};
    return s;
}

// The agreement of the step with the oracle over the batches of a test, and the worst seen (for
// the bounds' comment above: shown with -s).
struct AgreementRun {
    double worst_grad = 0, worst_loss = 0;
    std::string worst_where;
    int cases = 0;

    // One batch: the oracle's step, then each subject's, within the bounds.
    void check(const Model& m, const std::vector<Sequence>& batch, TrainMask mask, const std::string& what) {
        Params g64;
        const double l64 = decoder_loss(m.config, Params::from_model(m), batch, {.mask = mask}, &g64);
        for (const Subject& s : subjects()) {
            Grads g32;
            const double l32 = train_loss(m, batch, s.kernel, {.mask = mask}, &g32);
            const GradComparison a = compare(l32, g32, l64, g64);
            const double lerr = std::abs(l32 - l64) / std::max(1.0, std::abs(l64));
            INFO(what << " mask " << to_string(mask) << " kernel " << s.name << ": " << where(a) << "; loss " << l32
                      << " vs " << l64);
            CHECK(a.ok);
            CHECK(lerr < kLossBound);
            if (a.worst_ratio > worst_grad) worst_grad = a.worst_ratio, worst_where = what + ": " + where(a);
            worst_loss = std::max(worst_loss, lerr);
            ++cases;
        }
    }
    void report() const {
        WARN("worst gradient error " << worst_grad << " (" << worst_where << "), worst loss error " << worst_loss);
    }
};

TEST_CASE("train_loss agrees with the float64 oracle for every wiring, kernel, mask and batch", "[optimized][train_step]") {
    // Steps of ~20 rows run on one thread (kSerialBelowFlops); the determinism test below
    // compares 1 and 2 threads on larger ones.
    AgreementRun run;
    int configs = 0;
    for (const Norm norm : {Norm::post, Norm::pre})
        for (const Activation act : {Activation::relu, Activation::gelu, Activation::gelu_tanh})
            for (const bool tied : {true, false})
                for (const Positional pos : {Positional::sinusoidal, Positional::learned})
                    for (const bool scale : {true, false}) {
                        const ModelConfig c = tiny(norm, act, tied, pos, scale);
                        const Model m = with_zeros(init_model(c, 200 + std::uint64_t(configs)));
                        const std::string what = std::string(to_string(norm)) + " " + to_string(act) +
                                                 (tied ? " tied " : " untied ") + to_string(pos) +
                                                 (scale ? " sqrt_d" : " 1");
                        for (const TrainMask mask : {TrainMask::causal, TrainMask::none})
                            for (const bool same : {false, true})
                                run.check(m, batch_of(std::uint64_t(configs) * 4 + (same ? 1 : 0), c, same), mask,
                                          what + (same ? " same lengths" : " lengths 5,9,3"));
                        ++configs;
                    }
    CHECK(configs == 48);
    CHECK(run.cases == 48 * 2 * 2 * 2);
    run.report();
}

// A batch for a feature wiring: lengths {5, 7, 6} (one kernel call each) or {6, 6, 6} (one call for
// the batch: a window, GQA and rope on the batched views), some weights 0; with cross-attention a
// memory of 4 rows per sequence whose valid_len cycles through the wiring's list (0 included:
// padding only, a row that sees no key), padding rows holding 40 (memory_of).
std::vector<Sequence> feature_batch(std::uint64_t seed, const Wiring& w, bool same_length) {
    std::mt19937_64 rng(seed);
    std::vector<Sequence> batch;
    const ModelConfig& c = w.config;
    for (const std::size_t T : same_length ? std::vector<std::size_t>{6, 6, 6} : std::vector<std::size_t>{5, 7, 6}) {
        Sequence q;
        for (std::size_t t = 0; t < T; ++t) q.tokens.push_back(int(rng() % std::uint64_t(c.vocab_size)));
        for (std::size_t t = 0; t + 1 < T; ++t) q.weights.push_back(t % 3 == 1 ? 0.0 : 0.5 + double(rng() % 4));
        if (c.cross_attention) q.memory = testing::memory_of(rng, c, 4, w.valid[batch.size() % w.valid.size()]);
        batch.push_back(q);
    }
    return batch;
}

// Every wiring of feature_wirings() (GQA, windows, rope, cross-attention, alone and combined), with
// both kernels, both masks (with a window, none keeps its left edge), batches of different lengths
// and of one length.
TEST_CASE("train_loss agrees with the float64 oracle with GQA, windows, rope and cross-attention",
          "[optimized][train_step][v2]") {
    AgreementRun run;
    std::uint64_t seed = 300;
    for (const Wiring& w : feature_wirings()) {
        const Model m = with_zeros(init_model(w.config, seed));
        for (const TrainMask mask : {TrainMask::causal, TrainMask::none})
            for (const bool same : {false, true})
                run.check(m, feature_batch(seed, w, same), mask,
                          w.name + " (seed " + std::to_string(seed) + ")" + (same ? " lengths 6,6,6" : " lengths 5,7,6"));
        ++seed;
    }
    CHECK(run.cases == int(feature_wirings().size()) * 8);
    run.report();
}

TEST_CASE("train_loss without grad is the same loss", "[optimized][train_step]") {
    const ModelConfig c = tiny(Norm::pre, Activation::gelu, false, Positional::learned, true);
    const Model m = init_model(c, 5);
    const auto batch = batch_of(5, c, false);
    Grads g;
    CHECK(train_loss(m, batch, {}, {}, &g) == train_loss(m, batch));
}

// Every bug of the step's own backward moves some gradient by far more than the bound; the loss
// stays exact. Each at a wiring where it can show (tied weights, learned positions).
TEST_CASE("each planted bug of the step's backward is caught", "[optimized][train_step]") {
    const std::vector<GradBug> bugs = optimized::step_grad_bugs();
    CHECK(bugs.size() == 5);
    for (const Norm norm : {Norm::post, Norm::pre}) {
        const ModelConfig c = tiny(norm, Activation::gelu, true, Positional::learned, true);
        const Model m = init_model(c, 11);
        const Params p = Params::from_model(m);
        const auto batch = batch_of(11, c, false);
        Params g64;
        const double l64 = decoder_loss(c, p, batch, {}, &g64);
        for (const GradBug bug : bugs) {
            Grads g32;
            const double l32 = train_loss(m, batch, {}, {.bug = bug}, &g32);
            const GradComparison a = compare(l32, g32, l64, g64);
            INFO(to_string(norm) << " " << to_string(bug) << ": " << where(a));
            CHECK(a.worst_ratio > 100 * kGradBound);
            CHECK(std::abs(l32 - l64) < kLossBound * std::max(1.0, std::abs(l64)));
        }
    }
}

// The attention's bugs live in the kernel's backward: the zoo's mutants of them (the reference
// forward, a backward with one bug) are caught by the same comparison, and StepOptions refuses them.
TEST_CASE("the attention's planted bugs: backward zoo kernels caught, StepOptions refuses them", "[optimized][train_step]") {
    const ModelConfig c = tiny(Norm::pre, Activation::relu, false, Positional::sinusoidal, true);
    const Model m = init_model(c, 13);
    const auto batch = batch_of(13, c, false);
    Params g64;
    const double l64 = decoder_loss(c, Params::from_model(m), batch, {}, &g64);
    for (const char* name : {"bwd_d_term_dropped", "bwd_causal_forgotten"}) {  // softmax_rowsum_dropped, mask_ignored
        const KernelEntry* e = find_kernel(name);
        REQUIRE(e != nullptr);
        Grads g32;
        const double l32 = train_loss(m, batch, {e->fn_v2, e->backward_v2}, {}, &g32);
        const GradComparison a = compare(l32, g32, l64, g64);
        INFO(name << ": " << where(a));
        CHECK(a.worst_ratio > 100 * kGradBound);
    }
    for (const GradBug bug : {GradBug::softmax_rowsum_dropped, GradBug::mask_ignored_in_backward}) {
        Grads g;
        CHECK_THROWS_AS(train_loss(m, batch, {}, {.bug = bug}, &g), InputError);
    }
}

// Large enough (1.4e8 and 1.8e8 train_flops) that the step runs on the threads it is given: under
// 1e8 it runs on one (train_step.cpp, kSerialBelowFlops), and this test would compare nothing.
TEST_CASE("train_loss: the same bits twice, and 1 and 2 threads agree within the bound", "[optimized][train_step]") {
    ModelConfig c = tiny(Norm::post, Activation::gelu_tanh, false, Positional::learned, false);
    c.vocab_size = 64;
    c.d_model = 96;
    c.n_heads = 4;
    c.d_ff = 192;
    c.max_len = 64;
    const Model m = init_model(c, 17);
    for (const bool same : {false, true}) {
        std::mt19937_64 rng(17);
        std::vector<Sequence> batch;
        for (const std::size_t T : same ? std::vector<std::size_t>{64, 64, 64} : std::vector<std::size_t>{40, 64, 50}) {
            Sequence q;
            for (std::size_t t = 0; t < T; ++t) q.tokens.push_back(int(rng() % 64));
            q.weights.assign(T - 1, 1.0);
            batch.push_back(q);
        }
        REQUIRE(optimized::train_flops(c, batch) > 1e8);
        const auto run = [&](int threads) {
            const testing::ThreadCount tc(threads);
            Grads g;
            const double l = train_loss(m, batch, {}, {}, &g);
            return std::make_pair(l, g);
        };
        const auto a = run(2), b = run(2), one = run(1);
        CHECK(a.first == b.first);
        CHECK(a.second == b.second);
        Params as_double = Params::from_model(m);
        for (auto& [name, v] : as_double.values) v.assign(a.second.at(name).begin(), a.second.at(name).end());
        const GradComparison diff = compare(one.first, one.second, a.first, as_double);
        INFO(diff.describe("1 thread", "2 threads"));
        CHECK(diff.ok);
        CHECK(std::abs(a.first - one.first) < kLossBound * std::abs(a.first));
    }
}

int fails(const attncheck_problem_v2*) { return 7; }
int fails_backward(const attncheck_problem_v2*, const attncheck_grads_v2*) { return 3; }

TEST_CASE("train_loss: a kernel that returns nonzero raises KernelError naming the pass and the layer", "[optimized][train_step]") {
    const ModelConfig c = tiny(Norm::pre, Activation::relu, true, Positional::sinusoidal, true);
    const Model m = init_model(c, 19);
    for (const bool same : {false, true}) {
        const auto batch = batch_of(19, c, same);
        Grads g;
        CHECK_THROWS_WITH(train_loss(m, batch, {fails, attncheck_optimized_kernel_v2_backward}, {}, &g),
                          Catch::Contains("forward returned 7 for layer 0"));
        CHECK_THROWS_AS(train_loss(m, batch, {fails, attncheck_optimized_kernel_v2_backward}), optimized::KernelError);
        // The backward runs from the last layer down.
        CHECK_THROWS_WITH(train_loss(m, batch, {attncheck_optimized_kernel_v2, fails_backward}, {}, &g),
                          Catch::Contains("backward returned 3 for layer 1"));
        CHECK_THROWS_AS(train_loss(m, batch, {attncheck_optimized_kernel_v2, fails_backward}, {}, &g), optimized::KernelError);
    }
}

TEST_CASE("train_loss refuses what decoder_loss refuses", "[optimized][train_step]") {
    const ModelConfig c = tiny(Norm::pre, Activation::relu, true, Positional::sinusoidal, true);
    const Model m = init_model(c, 23);
    const Params p = Params::from_model(m);
    const Sequence ok{{1, 2, 3}, {1, 1}};
    for (const auto& bad : std::vector<std::vector<Sequence>>{
             {},                                  // empty
             {{{1}, {}}},                         // nothing to predict
             {{{1, 11, 2}, {1, 1}}},              // a token out of range
             {ok, {{1, 2, 3}, {1}}},              // weights of the wrong length
             {{{1, 2, 3}, {1, -1}}},              // a negative weight
             {{{1, 2, 3}, {0, 0}}},               // every weight 0
             {{std::vector<int>(13, 1), std::vector<double>(12, 1.0)}}}) {  // longer than max_len
        Grads g;
        CHECK_THROWS_AS(decoder_loss(c, p, bad), InputError);
        CHECK_THROWS_AS(train_loss(m, bad, {}, {}, &g), InputError);
    }
    CHECK_THROWS_AS(train_loss(m, {ok}, {nullptr, nullptr}), InputError);
}

// The backward's packing: W packed from its transpose is pack_weights(W), padding included, also
// into storage a larger matrix left behind (a step reuses one PackedMatrix for every product).
TEST_CASE("pack_weights_transposed packs W from W^T as pack_weights does, reusing storage", "[optimized][train_step]") {
    std::mt19937_64 rng(29);
    optimized::PackedMatrix into;
    for (const auto& [n, k] : {std::pair{70, 40}, {33, 5}, {32, 17}, {1, 3}}) {  // larger first: stale storage
        std::vector<float> w(std::size_t(n) * std::size_t(k)), wt(w.size());
        for (float& v : w) v = float(int(rng() % 200) - 100);
        for (int j = 0; j < n; ++j)
            for (int c = 0; c < k; ++c) wt[std::size_t(c) * std::size_t(n) + std::size_t(j)] = w[std::size_t(j) * std::size_t(k) + std::size_t(c)];
        const optimized::PackedMatrix want = optimized::pack_weights(w.data(), n, k, nullptr);
        optimized::pack_weights_transposed(wt.data(), n, k, n, into);
        INFO("n " << n << ", k " << k);
        CHECK(into.n == n);
        CHECK(into.k == k);
        CHECK(into.bias.empty());
        REQUIRE(into.panels.size() >= want.panels.size());
        CHECK(std::equal(want.panels.begin(), want.panels.end(), into.panels.begin()));
    }
}

TEST_CASE("train_flops counts the products from the shapes", "[optimized][train_step]") {
    ModelConfig c = tiny(Norm::pre, Activation::relu, true, Positional::sinusoidal, true);
    const std::vector<Sequence> one{{{1, 2, 3, 4}, {1, 1, 1}}};
    const double d = 16, f = 24, V = 11, T = 4;
    const double linear = 6 * T * (2 * (4 * d * d + 2 * d * f) + V * d);
    CHECK(optimized::train_flops(c, one) == Approx(linear + 2 * 2 * 10 * d * 7));          // 10 causal pairs
    CHECK(optimized::train_flops(c, one, TrainMask::none) == Approx(linear + 2 * 2 * 16 * d * 7));  // 16 pairs
    // A window of 1: rows see 1, 2, 2, 2 keys (causal); 4, 4, 3, 2 (none: the left edge only).
    c.attn_window = 1;
    CHECK(optimized::train_flops(c, one) == Approx(linear + 2 * 2 * 7 * d * 7));
    CHECK(optimized::train_flops(c, one, TrainMask::none) == Approx(linear + 2 * 2 * 13 * d * 7));
    // Grouped-query heads: the k and v projections have hkv dk = 8 outputs instead of d = 16.
    c.attn_window = -1;
    c.n_kv_heads = 1;
    const double gqa_linear = 6 * T * (2 * ((16 + 16 + 2 * 8) * d + 2 * d * f) + V * d);
    CHECK(optimized::train_flops(c, one) == Approx(gqa_linear + 2 * 2 * 10 * d * 7));
    // Cross-attention over a memory of 5 rows, 3 of them valid: q and o on the 4 rows, k and v
    // (forward and dW) on the 5, 4 x 3 more pairs.
    c.n_kv_heads = 0;
    c.cross_attention = true;
    std::vector<Sequence> with_memory = one;
    with_memory[0].memory = Memory{5, 3, std::vector<float>(5 * 16, 0.5f)};
    const double cross_linear = 6 * T * (2 * (6 * d * d + 2 * d * f) + V * d) + 4 * 2 * 5 * 2 * d * d;
    CHECK(optimized::train_flops(c, with_memory) == Approx(cross_linear + 2 * 2 * (10 + 12) * d * 7));
}

}  // namespace
