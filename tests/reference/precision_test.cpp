// tests/reference/precision_test.cpp — the float32 reference against the float64 one.
//
// The float64 reference is the oracle of NUMERICS.md and the float32 reference is one correct
// float32 evaluation (the built-in reference kernel and decoder). Both are the same template, so
// these tests do not check the semantics (tests/independent does that); they check that the
// float32 instantiation is a faithful rounding of the float64 one: no step silently loses
// precision (a float accumulator where a long sum needs care, an overflow in exp, a table
// computed badly in float).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim,
// Dv = value_dim; V, d, T, S as in MODEL.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/kernels.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/tolerance.hpp"
#include "reference/attention.hpp"
#include "reference/decoder.hpp"
#include "reference/error_bound.hpp"
#include "variants.hpp"

namespace {

using namespace attncheck;
using reference::Decoder;

// float32 decoder vs float64 decoder, relative to the largest |logit|.
// Why 1e-4: each of the ~20 float32 steps of a 2-layer decoder (inner products of length at most
// max(d, f) = 16, LayerNorm, softmax over at most 12 keys) errs by about n * eps32 ~ 16 * 6e-8 =
// 1e-6 relative; LayerNorm can amplify by 1/std of its input, a few units for these random
// weights. That predicts at most a few 1e-6 to 1e-5; the measured worst case over the 96
// variants (reported by the WARN below) was 2.6e-7. 1e-4 keeps an order of magnitude over the
// prediction, and any semantic divergence between the instantiations (a constant or a table
// computed differently in float) would be O(1e-3) or more.
constexpr double kFloatDecoderRelBound = 1e-4;

TEST_CASE("reference<float> tracks reference<double> on every model configuration",
          "[reference][precision]") {
    double worst = 0;
    for (int index = 0; index < test::kNumVariants; ++index) {
        test::VariantCase v(11, index);
        INFO(v.describe());
        const ModelConfig& c = v.config;
        const Decoder<float> df(v.model);
        const Decoder<double> dd(v.model);
        const std::vector<int> tokens = v.tokens(c.max_len);
        // 5 memory rows of which 3 are real: padding is always in play with cross-attention.
        const auto memory = v.memory(5, 3);
        const xt::xtensor<float, 2> lf = df.forward(tokens, memory);   // [T, V]
        const xt::xtensor<double, 2> ld = dd.forward(tokens, memory);  // [T, V]
        REQUIRE(lf.shape() == ld.shape());
        const double scale = xt::amax(xt::abs(ld))();
        REQUIRE(scale > 0);
        std::size_t worst_i = 0;
        double worst_here = 0;
        for (std::size_t i = 0; i < ld.size(); ++i) {
            const double err = std::abs(double(lf.flat(i)) - ld.flat(i)) / scale;
            REQUIRE(std::isfinite(double(lf.flat(i))));
            if (err > worst_here) worst_here = err, worst_i = i;
        }
        const std::size_t V = std::size_t(c.vocab_size);
        INFO("worst logit [" << worst_i / V << ", " << worst_i % V << "]: float " << lf.flat(worst_i)
                             << ", double " << ld.flat(worst_i) << ", |error|/max|logit| "
                             << worst_here << " > " << kFloatDecoderRelBound);
        CHECK(worst_here <= kFloatDecoderRelBound);
        worst = std::max(worst, worst_here);
    }
    WARN("worst float32-vs-float64 decoder error over " << test::kNumVariants
                                                        << " variants: " << worst
                                                        << " x max|logit|");
}

// A random ABI problem: shapes, offset, causality and padding all drawn; values N(0, 1).
struct Problem {
    attncheck_problem p{};
    std::vector<int32_t> valid;     // [B]
    std::vector<float> q, k, v;     // [B,H,Tq,Dk], [B,H,Tk,Dk], [B,H,Tk,Dv]
};

Problem random_problem(std::mt19937_64& rng, bool identity_values = false) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int batch = uniform(1, 3), heads = uniform(1, 3), kv_len = uniform(1, 70), q_len = uniform(1, kv_len);
    const bool causal = uniform(0, 1);
    const int head_dim = uniform(1, 40);
    Problem r;
    attncheck_problem& p = r.p;
    p = make_problem({.batch = batch, .heads = heads, .q_len = q_len, .kv_len = kv_len, .head_dim = head_dim,
                      .value_dim = identity_values ? kv_len : uniform(1, 40),
                      .q_offset = kv_len - q_len,  // prefill, chunk or step: the last q_len positions
                      .causal = causal,
                      .scale = float(1.0 / std::sqrt(double(head_dim)))});
    // Padding in half the problems; a sequence may be entirely padding (valid 0).
    if (uniform(0, 1)) {
        for (int b = 0; b < p.batch; ++b) r.valid.push_back(uniform(0, p.kv_len));
        p.kv_valid_len = r.valid.data();
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t B = std::size_t(p.batch), H = std::size_t(p.heads), Tq = std::size_t(p.q_len),
                      Tk = std::size_t(p.kv_len), Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    r.q.resize(B * H * Tq * Dk);
    r.k.resize(B * H * Tk * Dk);
    r.v.resize(B * H * Tk * Dv);
    for (float& x : r.q) x = normal(rng);
    for (float& x : r.k) x = normal(rng);
    if (identity_values) {
        // v = I per (b, h): out row i is then the probability row i (KERNEL_ABI.md).
        for (std::size_t bh = 0; bh < B * H; ++bh)
            for (std::size_t j = 0; j < Tk; ++j) r.v[(bh * Tk + j) * Dv + j] = 1.0f;
    } else {
        for (float& x : r.v) x = normal(rng);
    }
    return r;
}

// The forward error bound of the float32 textbook attention against exact arithmetic, for one
// problem (standard rounding-error analysis, eps = eps32, gamma_n ~ n eps):
//   a score scale * q.k errs by at most (Dk + 1) eps s_max, s_max = scale * max sum_c |q_c k_c|;
//   exp(score - max) then errs relatively by about 2 (Dk + 1) eps s_max + eps;
//   the row sum and the division add (Tk + 1) eps; so each probability errs relatively by
//   r = 2 (Dk + 1) s_max eps + (Tk + 2) eps;
//   out = sum_j p_j v_j adds Tk eps: |error| <= max|v| (r + Tk eps).
// Doubled for the float64 oracle's own (negligible) error and the first-order approximation.
double attention_error_bound(const Problem& r) {
    const attncheck_problem& p = r.p;
    const std::size_t BH = std::size_t(p.batch) * std::size_t(p.heads), Tq = std::size_t(p.q_len),
                      Tk = std::size_t(p.kv_len), Dk = std::size_t(p.head_dim);
    double s_max = 0;
    for (std::size_t bh = 0; bh < BH; ++bh)
        for (std::size_t i = 0; i < Tq; ++i)
            for (std::size_t j = 0; j < Tk; ++j) {
                double s = 0;
                for (std::size_t c = 0; c < Dk; ++c)
                    s += std::abs(double(r.q[(bh * Tq + i) * Dk + c]) * double(r.k[(bh * Tk + j) * Dk + c]));
                s_max = std::max(s_max, double(p.scale) * s);
            }
    double v_max = 0;
    for (float x : r.v) v_max = std::max(v_max, double(std::abs(x)));
    const double rel = (2.0 * double(Dk + 1) * s_max + double(Tk + 2)) * kEps32;
    return 2.0 * v_max * (rel + double(Tk) * kEps32);
}

TEST_CASE("the float32 baseline is within its error bound of float64, the reference kernel is the oracle rounded",
          "[reference][precision][abi]") {
    for (int trial = 0; trial < 200; ++trial) {
        const std::uint64_t seed = test::case_seed(12, trial);
        std::mt19937_64 rng(seed);
        const Problem r = random_problem(rng);
        const attncheck_problem& p = r.p;
        INFO("trial " << trial << ", seed " << seed << ": B=" << p.batch << " H=" << p.heads
                      << " Tq=" << p.q_len << " Tk=" << p.kv_len << " Dk=" << p.head_dim
                      << " Dv=" << p.value_dim << " q_offset=" << p.q_offset << " causal="
                      << p.causal << " padded=" << (p.kv_valid_len != nullptr));
        std::vector<float> out(std::size_t(p.batch) * std::size_t(p.heads) * std::size_t(p.q_len) *
                               std::size_t(p.value_dim));
        REQUIRE(attncheck_reference_kernel(&p, r.q.data(), r.k.data(), r.v.data(), out.data()) ==
                ATTNCHECK_OK);
        const std::vector<float> baseline = reference::attention<float>(p, r.q.data(), r.k.data(), r.v.data());
        const std::vector<double> oracle = reference::attention<double>(p, r.q.data(), r.k.data(), r.v.data());
        // The version 1 reference kernel is the version 2 one (the float64 oracle of
        // attention_v2.cpp, rounded): it sums in the textbook's order, so bitwise the float32
        // rounding of attention<double>, which finds the visible keys by attention.hpp's rule.
        std::vector<float> oracle_rounded(oracle.size());
        std::transform(oracle.begin(), oracle.end(), oracle_rounded.begin(), [](double x) { return float(x); });
        REQUIRE(out == oracle_rounded);
        // The float32 textbook evaluation is within a simple worst-case bound of the float64
        // oracle, element by element.
        const double bound = attention_error_bound(r);
        std::size_t worst_i = 0;
        double worst = -1;
        for (std::size_t i = 0; i < baseline.size(); ++i) {
            const double err = std::abs(double(baseline[i]) - oracle[i]);
            if (err > worst) worst = err, worst_i = i;
        }
        INFO("worst element [" << worst_i << "]: float " << baseline[worst_i] << ", double " << oracle[worst_i]
                               << ", |error| " << worst << " > bound " << bound);
        CHECK(worst <= bound);
        // NUMERICS.md's per-element bound for any correct float32 evaluation accepts both.
        const reference::BoundedOutput v2 = reference::attention_bounded(p, r.q.data(), r.k.data(), r.v.data());
        for (const std::vector<float>* result : {&baseline, static_cast<const std::vector<float>*>(&out)}) {
            const Agreement a = check_against_bound(*result, v2.value, v2.bound);
            INFO((result == &out ? "the reference kernel: " : "the float32 baseline: ") << a.describe());
            CHECK(a.ok);
        }
    }
}

// The reference sums a row of n probabilities in float32, one after another, after dividing each
// by the float32 sum of the same n weights: the sum of the quotients errs by at most about
// n eps32 (n - 1 additions of terms that sum to ~1, and each quotient's own rounding).
double reference_row_sum_bound(std::size_t n) { return (double(n) + 2.0) * kEps32; }

TEST_CASE("the reference kernel's probabilities: masked exactly 0, in [0, 1], rows sum to 1",
          "[reference][precision][abi]") {
    // Identity values expose P itself; every row with a visible key must sum to 1 within
    // reference_row_sum_bound(Tk), every row without one must be all zeros.
    for (int trial = 0; trial < 200; ++trial) {
        const std::uint64_t seed = test::case_seed(13, trial);
        std::mt19937_64 rng(seed);
        const Problem r = random_problem(rng, /*identity_values=*/true);
        const attncheck_problem& p = r.p;
        INFO("trial " << trial << ", seed " << seed);
        const std::size_t B = std::size_t(p.batch), H = std::size_t(p.heads), Tq = std::size_t(p.q_len),
                          Tk = std::size_t(p.kv_len);
        std::vector<float> P(B * H * Tq * Tk);  // [B, H, Tq, Tk]
        REQUIRE(attncheck_reference_kernel(&p, r.q.data(), r.k.data(), r.v.data(), P.data()) == ATTNCHECK_OK);
        for (std::size_t b = 0; b < B; ++b) {
            const std::int64_t valid = p.kv_valid_len ? p.kv_valid_len[b] : std::int64_t(Tk);
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t i = 0; i < Tq; ++i) {
                    double sum = 0;
                    bool any_visible = false;
                    for (std::size_t j = 0; j < Tk; ++j) {
                        const float x = P[((b * H + h) * Tq + i) * Tk + j];
                        const bool visible = reference::key_visible(std::int64_t(i), std::int64_t(j),
                                                                    p.q_offset, p.causal != 0, valid);
                        INFO("P[" << b << "," << h << "," << i << "," << j << "] = " << x
                                  << (visible ? " (visible)" : " (masked)"));
                        if (!visible) CHECK(x == 0.0f);
                        CHECK(x >= 0.0f);
                        CHECK(x <= 1.0f);
                        any_visible = any_visible || visible;
                        sum += double(x);
                    }
                    INFO("row [" << b << "," << h << "," << i << "] sums to " << sum);
                    if (any_visible)
                        CHECK(std::abs(sum - 1.0) <= reference_row_sum_bound(Tk));
                    else
                        CHECK(sum == 0.0);
                }
        }
    }
}

TEST_CASE("the reference decoder's attention probabilities are causal, padded and normalised",
          "[reference][precision]") {
    for (int index = 0; index < test::kNumVariants; index += 7) {  // a spread of variants
        test::VariantCase v(14, index);
        INFO(v.describe());
        const ModelConfig& c = v.config;
        const Decoder<float> dec(v.model);
        const int T = 9, S = 6, valid = 4;
        const std::vector<int> tokens = v.tokens(T);
        const auto memory = v.memory(S, valid);
        const auto probs = dec.attention_probs(tokens, memory);
        REQUIRE(probs.self.size() == std::size_t(c.n_layers));
        REQUIRE(probs.cross.size() == (c.cross_attention ? std::size_t(c.n_layers) : 0u));
        auto check = [&](const xt::xtensor<float, 3>& P, bool causal, int valid_len, const char* which) {
            REQUIRE(P.shape(0) == std::size_t(c.n_heads));
            REQUIRE(P.shape(1) == std::size_t(T));
            for (std::size_t h = 0; h < P.shape(0); ++h)
                for (std::size_t i = 0; i < P.shape(1); ++i) {
                    double sum = 0;
                    for (std::size_t j = 0; j < P.shape(2); ++j) {
                        const float x = P(h, i, j);
                        INFO(which << " P[" << h << "," << i << "," << j << "] = " << x);
                        if (!reference::key_visible(std::int64_t(i), std::int64_t(j), 0, causal, valid_len))
                            CHECK(x == 0.0f);
                        CHECK((x >= 0.0f && x <= 1.0f));
                        sum += double(x);
                    }
                    INFO(which << " row [" << h << "," << i << "] sums to " << sum);
                    CHECK(std::abs(sum - 1.0) <= reference_row_sum_bound(P.shape(2)));
                }
        };
        for (const auto& P : probs.self) check(P, true, T, "self");
        for (const auto& P : probs.cross) {
            REQUIRE(P.shape(2) == std::size_t(S));
            check(P, false, valid, "cross");
        }
    }
}

}  // namespace
