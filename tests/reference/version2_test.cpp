// tests/reference/version2_test.cpp — the reference decoder with MODEL.md "Version 2 additions":
// grouped-query heads, the sliding window and rotary positions.
//
// Each check is one a plausible bug breaks:
//   rotation by hand            the pairing (i, i+1) instead of (i, i+dk/2), a sign, the angle
//                               of the wrong position or frequency;
//   GQA = MHA with K/V copied   the kv head of query head j taken as j % hkv instead of j / g;
//   window >= T-1 = no window   a window mask that drops a key it should keep;
//   window probabilities        a window of 2w+1 keys, or w keys, or measured from the wrong end;
//   incremental = forward,      a rotation at the wrong position in the prefix re-run, a window
//   causality                   that reaches into the future.
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "reference/decoder.hpp"
#include "reference/error_bound.hpp"
#include "variants.hpp"

namespace {

using namespace attncheck;
using reference::Decoder;

TEST_CASE("rotate_heads rotates the pairs (i, i + dk/2) by p * theta^(-2i/dk)", "[reference][v2][rope]") {
    // Two heads of width 4, theta 100: the frequencies are 1 and 100^(-1/2) = 0.1.
    const std::size_t dk = 4;
    const auto angles = reference::rope_angles<double>(3, dk, 100.0);
    xt::xtensor<double, 2> x = {{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8}};
    const xt::xtensor<double, 2> before = x;
    reference::rotate_heads<double>(x, dk, angles);
    // Position 0: the identity.
    for (std::size_t c = 0; c < 8; ++c) CHECK(x(0, c) == before(0, c));
    // Position 2: angles 2 (pair 0, 2) and 0.2 (pair 1, 3), in each head.
    const double a0 = 2.0, a1 = 0.2;
    const auto rot = [](double xa, double xb, double a) {
        return std::pair{xa * std::cos(a) - xb * std::sin(a), xa * std::sin(a) + xb * std::cos(a)};
    };
    for (std::size_t head = 0; head < 2; ++head) {
        const double o = double(head) * 4;
        const auto [p0, p2] = rot(1 + o, 3 + o, a0);
        const auto [p1, p3] = rot(2 + o, 4 + o, a1);
        CHECK(x(2, head * 4 + 0) == Approx(p0).epsilon(1e-15));
        CHECK(x(2, head * 4 + 2) == Approx(p2).epsilon(1e-15));
        CHECK(x(2, head * 4 + 1) == Approx(p1).epsilon(1e-15));
        CHECK(x(2, head * 4 + 3) == Approx(p3).epsilon(1e-15));
    }
    // The rotation keeps each pair's length.
    for (std::size_t t = 0; t < 3; ++t)
        for (std::size_t c : {0u, 1u, 4u, 5u})
            CHECK(std::hypot(x(t, c), x(t, c + 2)) == Approx(std::hypot(before(t, c), before(t, c + 2))));
}

// The GQA model's k and v rows copied so that MHA head j holds kv head j / g: the same function.
Model replicate_kv(const Model& gqa) {
    Model mha = gqa;
    const ModelConfig& c = gqa.config;
    mha.config.n_kv_heads = 0;
    const std::size_t d = std::size_t(c.d_model), dk = std::size_t(c.head_dim());
    const std::size_t g = std::size_t(c.group_size());
    for (int l = 0; l < c.n_layers; ++l)
        for (const char* which : {"k", "v"}) {
            const std::string p = "layers." + std::to_string(l) + ".self_attn." + which + ".";
            const Tensor& w = gqa.at(p + "weight");  // [hkv*dk, d]
            const Tensor& b = gqa.at(p + "bias");    // [hkv*dk]
            Tensor W{{d, d}, std::vector<float>(d * d)}, B{{d}, std::vector<float>(d)};
            for (std::size_t row = 0; row < d; ++row) {
                const std::size_t j = row / dk, src = (j / g) * dk + row % dk;
                for (std::size_t col = 0; col < d; ++col) W.data[row * d + col] = w.data[src * d + col];
                B.data[row] = b.data[src];
            }
            mha.tensors[p + "weight"] = W;
            mha.tensors[p + "bias"] = B;
        }
    return mha;
}

TEMPLATE_TEST_CASE("grouped-query attention equals multi-head attention with K and V replicated",
                   "[reference][v2][gqa]", float, double) {
    for (int index = 0; index < test::kNumVariantsV2; ++index) {
        ModelConfig c = test::variant_v2(index);
        if (c.kv_heads() == c.n_heads) continue;
        test::VariantCase v(41, index, c);
        INFO(v.describe());
        const std::vector<int> tokens = v.tokens(9);
        const auto memory = v.memory(4, 3);
        const xt::xtensor<TestType, 2> gqa = Decoder<TestType>(v.model).forward(tokens, memory);
        const xt::xtensor<TestType, 2> mha = Decoder<TestType>(replicate_kv(v.model)).forward(tokens, memory);
        CHECK(bool(gqa == mha));  // the same products in the same order: bitwise
    }
    // The mapping matters: with 2 kv heads over 4 query heads, j / 2 and j % 2 differ (heads 1, 2),
    // so swapping the two kv heads' rows must change the logits.
    ModelConfig c = test::variant_v2(2);
    REQUIRE(c.n_kv_heads == 2);
    test::VariantCase v(42, 2, c);
    Model swapped = v.model;
    for (const char* which : {"k", "v"}) {
        Tensor& w = swapped.tensors["layers.0.self_attn." + std::string(which) + ".weight"];  // [8, 16]
        for (std::size_t i = 0; i < 4 * 16; ++i) std::swap(w.data[i], w.data[4 * 16 + i]);
    }
    const std::vector<int> tokens = v.tokens(6);
    const auto memory = v.memory(4, 3);
    CHECK_FALSE(bool(Decoder<double>(v.model).forward(tokens, memory) == Decoder<double>(swapped).forward(tokens, memory)));
}

TEST_CASE("a window of at least T-1 keys is no window, and a smaller one changes the logits", "[reference][v2][window]") {
    for (int index = 0; index < test::kNumVariantsV2; ++index) {
        ModelConfig c = test::variant_v2(index);
        c.attn_window = -1;
        test::VariantCase v(43, index, c);
        INFO(v.describe());
        const int T = 8;
        const std::vector<int> tokens = v.tokens(T);
        const auto memory = v.memory(4, 3);
        const xt::xtensor<double, 2> none = Decoder<double>(v.model).forward(tokens, memory);
        for (int w : {T - 1, T, 100}) {
            Model windowed = v.model;
            windowed.config.attn_window = w;
            INFO("window " << w);
            CHECK(bool(Decoder<double>(windowed).forward(tokens, memory) == none));  // bitwise
        }
        Model narrow = v.model;
        narrow.config.attn_window = 2;
        const xt::xtensor<double, 2> l2 = Decoder<double>(narrow).forward(tokens, memory);
        // Rows 0 .. 2 see all their keys either way; row 3 onwards loses some.
        CHECK(bool(xt::view(l2, xt::range(0, 3), xt::all()) == xt::view(none, xt::range(0, 3), xt::all())));
        CHECK_FALSE(bool(xt::view(l2, xt::range(3, T), xt::all()) == xt::view(none, xt::range(3, T), xt::all())));
    }
}

TEST_CASE("with a window w, row i attends to exactly keys max(0, i-w) .. i", "[reference][v2][window]") {
    for (int index = 0; index < test::kNumVariantsV2; ++index) {
        const ModelConfig c = test::variant_v2(index);
        if (!c.has_window()) continue;
        test::VariantCase v(44, index, c);
        INFO(v.describe());
        const int T = 9, w = c.attn_window;
        const auto probs = Decoder<double>(v.model).attention_probs(v.tokens(T), v.memory(4, 3));
        REQUIRE(probs.self.size() == std::size_t(c.n_layers));
        for (const auto& P : probs.self)  // [h, T, T]
            for (std::size_t j = 0; j < P.shape(0); ++j)
                for (int i = 0; i < T; ++i) {
                    double sum = 0;
                    for (int t = 0; t < T; ++t) {
                        const double p = P(j, std::size_t(i), std::size_t(t));
                        const bool visible = t <= i && t >= i - w;
                        INFO("head " << j << " row " << i << " key " << t);
                        if (visible) CHECK(p > 0.0);
                        else CHECK(p == 0.0);
                        sum += p;
                    }
                    CHECK(sum == Approx(1.0).epsilon(1e-12));
                }
    }
}

TEST_CASE("version 2 models: forward_incremental equals forward, and later tokens leave earlier rows unchanged",
          "[reference][v2]") {
    for (int index = 0; index < test::kNumVariantsV2; ++index) {
        test::VariantCase v(45, index, test::variant_v2(index));
        INFO(v.describe());
        const Decoder<double> dec(v.model);
        const std::vector<int> tokens = v.tokens(v.config.max_len);
        const auto memory = v.memory(4, 3);
        const xt::xtensor<double, 2> full = dec.forward(tokens, memory);
        const xt::xtensor<double, 2> inc = dec.forward_incremental(tokens, memory);
        const double scale = xt::amax(xt::abs(full))();
        const double worst = xt::amax(xt::abs(full - inc))();
        CHECK(worst <= 1e-12 * scale);

        const int split = 5;
        std::vector<int> b = tokens;
        for (std::size_t t = split; t < b.size(); ++t) b[t] = (b[t] + 1) % v.config.vocab_size;
        const xt::xtensor<double, 2> lb = dec.forward(b, memory);
        CHECK(bool(xt::view(lb, xt::range(0, split), xt::all()) == xt::view(full, xt::range(0, split), xt::all())));
        CHECK_FALSE(bool(xt::view(lb, xt::range(split, split + 1), xt::all()) ==
                         xt::view(full, xt::range(split, split + 1), xt::all())));
    }
}

TEST_CASE("rope: row 0 is unrotated, later rows depend on rope_theta", "[reference][v2][rope]") {
    ModelConfig c = test::variant_v2(16);
    c.positional = Positional::rope;
    c.n_layers = 1;
    test::VariantCase v(46, 16, c);
    const Decoder<double> dec(v.model);
    const auto memory = v.memory(4, 3);
    // The first row sees one key: its attention output is that key's value whatever the
    // rotation, so row 0 does not depend on rope_theta.
    Model other = v.model;
    other.config.rope_theta = 7.0;
    const xt::xtensor<double, 2> other_logits = Decoder<double>(other).forward({3, 5}, memory);
    const xt::xtensor<double, 2> base_logits = dec.forward({3, 5}, memory);
    CHECK(bool(xt::view(other_logits, 0, xt::all()) == xt::view(base_logits, 0, xt::all())));
    CHECK_FALSE(bool(xt::view(other_logits, 1, xt::all()) == xt::view(base_logits, 1, xt::all())));
}

}  // namespace

namespace {

TEST_CASE("DecoderBound with GQA, windows and rope: its value is the oracle and the float32 reference is within it",
          "[reference][v2][bound]") {
    double worst = 0;
    for (int index = 0; index < test::kNumVariantsV2; ++index) {
        test::VariantCase v(47, index, test::variant_v2(index));
        INFO(v.describe());
        const std::vector<int> tokens = v.tokens(v.config.max_len);
        const auto memory = v.memory(4, 3);
        const reference::BoundedOutput o = reference::DecoderBound(v.model).forward(tokens, memory);
        const xt::xtensor<double, 2> oracle = Decoder<double>(v.model).forward(tokens, memory);
        const xt::xtensor<float, 2> f32 = Decoder<float>(v.model).forward(tokens, memory);
        REQUIRE(o.value.size() == oracle.size());
        for (std::size_t i = 0; i < o.value.size(); ++i) {
            INFO("logit " << i);
            CHECK(o.value[i] == Approx(oracle.flat(i)).margin(1e-9));
            const double err = std::abs(double(f32.flat(i)) - oracle.flat(i));
            CHECK(err <= o.bound[i]);
            if (o.bound[i] > 0) worst = std::max(worst, err / o.bound[i]);
        }
    }
    CHECK(worst > 0.0);  // the float32 decoder does err
}

}  // namespace
