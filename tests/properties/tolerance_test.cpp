// tests/properties/tolerance_test.cpp — the agreement check of include/attncheck/tolerance.hpp and
// the bounds of reference/error_bound.hpp (NUMERICS.md version 2), on numbers whose verdict we
// know (STYLE.md: "one tolerance model ... with a test of the checker itself").
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/model.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/tolerance.hpp"
#include "reference/attention.hpp"
#include "reference/decoder.hpp"
#include "reference/error_bound.hpp"

using attncheck::check_against_bound;
using attncheck::reference::attention_bounded;
using attncheck::reference::BoundedOutput;

TEST_CASE("check_against_bound: the test ratio is error / bound, ok up to 1", "[tolerance]") {
    const std::vector<double> oracle{1.0, -2.0, 0.5, 3.0};
    const std::vector<double> bound{1e-6, 1e-6, 1e-6, 2e-6};
    std::vector<float> candidate{1.0f, -2.0f, 0.5f, 3.0f};
    auto a = check_against_bound(candidate, oracle, bound);
    CHECK(a.ok);
    CHECK(a.checked == 4);
    CHECK(a.worst_ratio == 0.0);

    candidate[3] = float(3.0 + 1.9e-6);  // within its own bound, not within its neighbours'
    a = check_against_bound(candidate, oracle, bound);
    CHECK(a.ok);
    CHECK(a.worst_index == 3);
    CHECK(a.worst_ratio == Approx(std::abs(double(candidate[3]) - 3.0) / 2e-6));

    candidate[1] = float(-2.0 - 4e-6);
    a = check_against_bound(candidate, oracle, bound);
    CHECK_FALSE(a.ok);
    CHECK(a.worst_index == 1);
    CHECK(a.worst_ratio > 1.0);
    CHECK(a.error == Approx(std::abs(double(candidate[1]) + 2.0)));
    CHECK(a.bound == 1e-6);
    const std::string text = a.describe();
    CHECK(text.find("x the bound") != std::string::npos);
    CHECK(text.find("that any correct float32 evaluation meets") != std::string::npos);
}

TEST_CASE("check_against_bound: exact results and non-finite candidates", "[tolerance]") {
    const std::vector<double> oracle{0.0, 1.0};
    const std::vector<double> bound{0.0, 1e-6};
    CHECK(check_against_bound(std::vector<float>{0.0f, 1.0f}, oracle, bound).ok);
    // A bound of 0 (a row with no visible key) admits no error at all.
    const auto inexact = check_against_bound(std::vector<float>{1e-30f, 1.0f}, oracle, bound);
    CHECK_FALSE(inexact.ok);
    // ... and says so instead of a ratio to 0 ("infx the bound 0").
    CHECK_THAT(inexact.describe(), Catch::Contains("must be exact (bound 0)") && !Catch::Contains("infx"));
    const auto nan = check_against_bound(std::vector<float>{0.0f, std::numeric_limits<float>::quiet_NaN()}, oracle, bound);
    CHECK_FALSE(nan.ok);
    CHECK(nan.non_finite);
    CHECK(nan.describe().find("non-finite") != std::string::npos);
    CHECK_FALSE(check_against_bound(std::vector<float>{0.0f, INFINITY}, oracle, bound).ok);
    CHECK_THROWS_AS(check_against_bound(std::vector<float>{0.0f}, oracle, bound), std::invalid_argument);
}

namespace {

struct Problem {
    attncheck_problem p{};
    std::vector<float> q, k, v;
    std::vector<std::int32_t> valid;
};

Problem random_problem(std::mt19937_64& rng, bool pow2_scale) {
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    Problem r;
    // Drawn in the order written (a braced list is evaluated left to right).
    attncheck::ProblemShape shape{.batch = pick(1, 2), .heads = pick(1, 2), .q_len = pick(1, 9), .kv_len = pick(1, 40),
                                  .head_dim = pick(1, 70), .value_dim = pick(1, 9), .q_offset = pick(0, 3),
                                  .causal = pick(0, 1) == 1};
    shape.scale = pow2_scale ? std::ldexp(1.0f, -pick(0, 3)) : float(1.0 / std::sqrt(double(shape.head_dim)));
    if (pick(0, 1)) {
        for (int b = 0; b < shape.batch; ++b) r.valid.push_back(pick(0, shape.kv_len));
        shape.kv_valid_len = r.valid.data();
    }
    r.p = attncheck::make_problem(shape);
    const attncheck_problem& p = r.p;
    std::normal_distribution<double> normal(0.0, pick(0, 3) == 0 ? 4.0 : 1.0);
    r.q.resize(std::size_t(p.batch) * p.heads * p.q_len * p.head_dim);
    r.k.resize(std::size_t(p.batch) * p.heads * p.kv_len * p.head_dim);
    r.v.resize(std::size_t(p.batch) * p.heads * p.kv_len * p.value_dim);
    for (auto* x : {&r.q, &r.k, &r.v})
        for (float& e : *x) e = float(normal(rng));
    return r;
}

// Two correct float32 evaluations unlike the reference: the scale folded into q, and exp2 with
// log2 e folded into the scale, each with the dot product summed backwards; and one wrong one,
// which forgets the scale on the diagonal key only (a mask-adjacent bug of one score).
enum class Variant { folded_q, exp2_folded, wrong_diagonal_scale };

std::vector<float> variant_attention(const Problem& r, Variant which) {
    const attncheck_problem& p = r.p;
    const std::size_t Tq = std::size_t(p.q_len), Tk = std::size_t(p.kv_len), Dk = std::size_t(p.head_dim),
                      Dv = std::size_t(p.value_dim);
    std::vector<float> out(std::size_t(p.batch) * p.heads * Tq * Dv, 0.0f);
    const float log2e = 1.44269504f;
    for (std::size_t b = 0; b < std::size_t(p.batch); ++b) {
        const std::int64_t valid = p.kv_valid_len ? p.kv_valid_len[b] : std::int64_t(Tk);
        for (std::size_t h = 0; h < std::size_t(p.heads); ++h) {
            const std::size_t bh = b * std::size_t(p.heads) + h;
            for (std::size_t i = 0; i < Tq; ++i) {
                std::vector<float> s(Tk, -INFINITY);
                float m = -INFINITY;
                for (std::size_t j = 0; j < Tk; ++j) {
                    if (!attncheck::reference::key_visible(std::int64_t(i), std::int64_t(j), p.q_offset, p.causal != 0, valid))
                        continue;
                    float dot = 0;
                    for (std::size_t c = Dk; c-- > 0;) {
                        float qc = r.q[(bh * Tq + i) * Dk + c];
                        if (which == Variant::folded_q) qc *= p.scale;
                        dot += qc * r.k[(bh * Tk + j) * Dk + c];
                    }
                    if (which == Variant::exp2_folded) dot *= p.scale * log2e;
                    if (which == Variant::wrong_diagonal_scale) dot *= (std::int64_t(j) == p.q_offset + std::int64_t(i)) ? 1.0f : p.scale;
                    s[j] = dot;
                    m = std::max(m, dot);
                }
                if (m == -INFINITY) continue;
                float sum = 0;
                std::vector<float> w(Tk, 0.0f);
                for (std::size_t j = 0; j < Tk; ++j) {
                    w[j] = which == Variant::exp2_folded ? std::exp2(s[j] - m) : std::exp(s[j] - m);
                    sum += w[j];
                }
                for (std::size_t c = 0; c < Dv; ++c) {
                    float acc = 0;
                    for (std::size_t j = 0; j < Tk; ++j) acc += w[j] * r.v[(bh * Tk + j) * Dv + c];
                    out[(bh * Tq + i) * Dv + c] = acc / sum;
                }
            }
        }
    }
    return out;
}

}  // namespace

TEST_CASE("attention_bounded: the value is the float64 reference, a row with no key is exact",
          "[tolerance][bound]") {
    std::mt19937_64 rng(20261126);
    for (int trial = 0; trial < 50; ++trial) {
        const Problem r = random_problem(rng, trial % 2 == 0);
        const BoundedOutput o = attention_bounded(r.p, r.q.data(), r.k.data(), r.v.data());
        const std::vector<double> ref = attncheck::reference::attention<double>(r.p, r.q.data(), r.k.data(), r.v.data());
        REQUIRE(o.value.size() == ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) {
            INFO("trial " << trial << " element " << i);
            CHECK(o.value[i] == Approx(ref[i]).margin(1e-12));
            CHECK(o.bound[i] >= 0.0);
            if (ref[i] == 0.0 && o.bound[i] == 0.0) continue;  // an empty row: exact
            CHECK(o.bound[i] > 0.0);
        }
    }
}

TEST_CASE("attention_bounded admits correct float32 evaluations in other orders and rejects a wrong one",
          "[tolerance][bound]") {
    std::mt19937_64 rng(7);
    double worst_correct = 0, worst_wrong = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const Problem r = random_problem(rng, trial % 2 == 0);
        const BoundedOutput o = attention_bounded(r.p, r.q.data(), r.k.data(), r.v.data());
        INFO("trial " << trial);
        const std::vector<float> as_written = attncheck::reference::attention<float>(r.p, r.q.data(), r.k.data(), r.v.data());
        for (const auto& candidate :
             {as_written, variant_attention(r, Variant::folded_q), variant_attention(r, Variant::exp2_folded)}) {
            const auto a = check_against_bound(candidate, o.value, o.bound);
            INFO(a.describe());
            CHECK(a.ok);
            worst_correct = std::max(worst_correct, a.worst_ratio);
        }
        worst_wrong = std::max(worst_wrong, check_against_bound(variant_attention(r, Variant::wrong_diagonal_scale),
                                                                o.value, o.bound).worst_ratio);
    }
    // Tight enough to matter: correct evaluations reach a visible fraction of the bound, and the
    // one-score bug is far outside it.
    CHECK(worst_correct > 0.01);
    CHECK(worst_wrong > 100.0);
}

TEST_CASE("DecoderBound: its value is the float64 decoder and float32 reference decoders stay within it",
          "[tolerance][bound][decoder]") {
    using attncheck::ModelConfig;
    const std::vector<ModelConfig> configs = {
        // d = 2: where version 1 raised false alarms.
        {.vocab_size = 2, .d_model = 2, .n_heads = 2, .d_ff = 2, .n_layers = 1, .max_len = 4,
         .norm = attncheck::Norm::pre, .positional = attncheck::Positional::learned},
        {.cross_attention = true, .activation = attncheck::Activation::gelu},
        {.activation = attncheck::Activation::gelu_tanh, .embed_scale_sqrt_d = false},
    };
    double worst = 0;
    for (std::size_t ci = 0; ci < configs.size(); ++ci)
        for (std::uint64_t seed = 1; seed <= 6; ++seed) {
            const ModelConfig& c = configs[ci];
            const attncheck::Model m = attncheck::init_model(c, seed);
            std::vector<int> tokens;
            for (int t = 0; t < c.max_len; ++t) tokens.push_back(int((seed * 7 + std::uint64_t(t) * 13) % std::uint64_t(c.vocab_size)));
            std::optional<attncheck::Memory> mem;
            if (c.cross_attention) {
                attncheck::Memory mm{5, 3, std::vector<float>(std::size_t(5 * c.d_model))};
                for (std::size_t i = 0; i < mm.data.size(); ++i) mm.data[i] = float(std::sin(double(i) * 0.7 + double(seed)));
                mem = mm;
            }
            INFO("config " << ci << " seed " << seed);
            const BoundedOutput o = attncheck::reference::DecoderBound(m).forward(tokens, mem);
            const auto oracle = attncheck::reference::Decoder<double>(m).forward(tokens, mem);
            const auto f32 = attncheck::reference::Decoder<float>(m).forward(tokens, mem);
            REQUIRE(o.value.size() == oracle.size());
            for (std::size_t i = 0; i < o.value.size(); ++i) CHECK(o.value[i] == Approx(oracle.flat(i)).margin(1e-9));
            const std::vector<float> cand(f32.begin(), f32.end());
            const auto a = check_against_bound(cand, std::vector<double>(oracle.begin(), oracle.end()), o.bound);
            INFO(a.describe());
            CHECK(a.ok);
            worst = std::max(worst, a.worst_ratio);
        }
    CHECK(worst > 1e-4);  // not vacuous: the float32 decoder errs measurably against the bound
}
