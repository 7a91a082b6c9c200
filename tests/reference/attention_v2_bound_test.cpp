// tests/reference/attention_v2_bound_test.cpp — the bound of the float64 oracle of kernel ABI
// version 2 (reference/attention_v2.hpp): it holds for correct float32 evaluations in six orders
// (f32_evaluations.hpp) on random problems of every feature, planted bugs exceed it, a tanh of
// declared accuracy is within the bound that declares it, and the C library's tanhf within the
// default; and the oracle's consistency: with the version 1 oracle on problems version 1 can
// express, and across layouts of one logical problem.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attention_v2_cases.hpp"
#include "attncheck/problem_v2.hpp"
#include "f32_evaluations.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"
#include "v2_case.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::test;  // V2Case, Spec, the oracle, random problems (v2_case.hpp, attention_v2_cases.hpp)

// The ratio reported where the bound is 0 and the candidate differs, or the candidate is NaN.
constexpr double kInfRatio = std::numeric_limits<double>::infinity();

const char* style_name(Style s) { return s == Style::normal ? "normal" : s == Style::large ? "large" : "integer"; }

// Largest |candidate - oracle| / bound over the outputs and over the lse, with where it was.
// For f16/bf16, `accumulation` is the ratio of the float32 result before its rounding to the
// dtype against the bound without the output-rounding term (bound = b + ud (|o| + b) + tiny, so
// b = (bound - ud |o| - tiny) / (1 + ud)): how tight the bound is where the dtype's own
// rounding does not dominate it (where b is not lost in cancellation).
struct Ratios {
    double out = 0, lse = 0, accumulation = 0;
    std::string where;
};
double tiny_rounding(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? 0x1p-25 : dtype == ATTNCHECK_DTYPE_BF16 ? 0x1p-126 : 0.0;
}
Ratios ratios(const OracleV2& o, const test::Evaluation& ev, bool lse, std::int32_t dtype = ATTNCHECK_DTYPE_F32) {
    Ratios r;
    const std::size_t Dv = std::size_t(o.value_dim);
    const double ud = unit_roundoff(dtype);
    for (std::size_t row = 0; row < o.rows(); ++row) {
        for (std::size_t c = 0; c < Dv; ++c) {
            const std::size_t at = row * Dv + c;
            REQUIRE(std::isfinite(o.out[at]));  // the oracle never reads padding
            const double err = std::abs(double(ev.out[at]) - o.out[at]);
            const double ratio = o.out_bound[at] > 0 ? err / o.out_bound[at] : (err == 0 ? 0.0 : kInfRatio);
            if (dtype != ATTNCHECK_DTYPE_F32 && o.out_bound[at] > 0) {
                const double b = (o.out_bound[at] - ud * std::abs(o.out[at]) - tiny_rounding(dtype)) / (1 + ud);
                if (b > 0.01 * o.out_bound[at])  // else lost to cancellation against the tiny term
                    r.accumulation = std::max(r.accumulation, std::abs(double(ev.out_f32[at]) - o.out[at]) / b);
            }
            if (!(ratio <= r.out)) {
                r.out = std::isnan(ratio) ? kInfRatio : ratio;
                std::ostringstream w;
                w << "out row " << row << " col " << c << ": " << ev.out[at] << " vs " << o.out[at] << " bound "
                  << o.out_bound[at];
                r.where = w.str();
            }
        }
        if (!lse) continue;
        const double l = ev.lse[row];
        double ratio = 0;
        if (std::isinf(o.lse[row])) ratio = l == o.lse[row] ? 0.0 : kInfRatio;
        else ratio = std::abs(l - o.lse[row]) / o.lse_bound[row];
        if (!(ratio <= r.lse)) r.lse = std::isnan(ratio) ? kInfRatio : ratio;
    }
    return r;
}

// Random problems of every style (a tenth of them with long rows, Tk 300-600), each evaluated
// in every order, and for f16/bf16 the two-pass and online orders again with P rounded to the
// dtype (sum of the rounded and of the unrounded P), checked against the bound with
// probabilities_rounded. Every ratio must be <= 1; the largest are reported.
void bound_campaign(std::uint32_t seed, int per_style) {
    Random r(seed);
    for (const std::int32_t dtype : kDtypes) {
        double worst_out = 0, worst_lse = 0, worst_rounded = 0, worst_accumulation = 0;
        double out_by_order[std::size(test::kOrders)] = {}, lse_by_order[std::size(test::kOrders)] = {};
        std::string worst_where;
        int cases = 0;
        for (const Style style : kStyles)
            for (int t = 0; t < per_style; ++t) {
                const Spec s = random_spec(r, dtype, style, t % 10 == 0);
                V2Case c(s);
                fill_random(c, r, style);
                INFO(style_name(style) << " " << describe_v2(c.p));
                const OracleV2 o = attention_v2_oracle(c.p);
                for (std::size_t k = 0; k < std::size(test::kOrders); ++k) {
                    const test::Order order = test::kOrders[k];
                    INFO("order " << test::order_name(order));
                    const Ratios x = ratios(o, test::evaluate_f32(c.p, order), true, dtype);
                    INFO(x.where);
                    REQUIRE(x.out <= 1.0);
                    REQUIRE(x.lse <= 1.0);
                    if (x.out > worst_out) worst_out = x.out, worst_where = x.where;
                    // f16/bf16: the accumulation, since the output's own rounding reaches ~1 in every order
                    const double accumulated = dtype == ATTNCHECK_DTYPE_F32 ? x.out : x.accumulation;
                    out_by_order[k] = std::max(out_by_order[k], accumulated);
                    lse_by_order[k] = std::max(lse_by_order[k], x.lse);
                    worst_lse = std::max(worst_lse, x.lse);
                    worst_accumulation = std::max(worst_accumulation, x.accumulation);
                }
                if (dtype != ATTNCHECK_DTYPE_F32) {
                    const OracleV2 orounded = attention_v2_oracle(c.p, OracleV2Options{true});
                    const struct {
                        test::Order order;
                        test::PRounding rounding;
                    } variants[] = {{test::Order::online, test::PRounding::numerator},
                                    {test::Order::two_pass, test::PRounding::both}};
                    for (const auto& variant : variants) {
                        INFO("order " << test::order_name(variant.order) << " with P rounded");
                        const Ratios x = ratios(orounded, test::evaluate_f32(c.p, variant.order, variant.rounding), true);
                        INFO(x.where);
                        REQUIRE(x.out <= 1.0);
                        REQUIRE(x.lse <= 1.0);
                        worst_rounded = std::max(worst_rounded, x.out);
                    }
                }
                ++cases;
            }
        WARN(dtype_name(dtype) << ": " << cases << " problems x " << (std::size(test::kOrders) + (dtype == ATTNCHECK_DTYPE_F32 ? 0 : 2))
                               << " evaluations, largest ratio out " << worst_out << " (" << worst_where << "), lse "
                               << worst_lse << ", out with P rounded " << worst_rounded
                               << ", out before its rounding to the dtype " << worst_accumulation);
        std::ostringstream by_order;
        for (std::size_t k = 0; k < std::size(test::kOrders); ++k)
            by_order << (k ? ", " : "") << test::order_name(test::kOrders[k]) << " " << out_by_order[k] << " / " << lse_by_order[k];
        WARN(dtype_name(dtype) << ": largest ratio by order, out (before its rounding to the dtype) / lse: " << by_order.str());
        CHECK(worst_out > 0);
    }
}

}  // namespace

TEST_CASE("the bound holds for correct float32 evaluations in six orders", "[reference][v2][bound]") {
    bound_campaign(2026, 60);
}

// The same over 30 times as many problems (minutes): run by hand for docs/numerics.md.
TEST_CASE("bound campaign, long", "[.][campaign]") { bound_campaign(7, 2000); }

TEST_CASE("planted bugs exceed the bound", "[reference][v2][bound]") {
    // Each bug on problems that exercise it; the largest ratio over a few problems must exceed 1.
    struct Planted {
        test::Bug bug;
        const char* name;
        void (*adjust)(Spec&);
    };
    const Planted bugs[] = {
        {test::Bug::no_scale, "missing scale", [](Spec&) {}},
        {test::Bug::dropped_key, "dropped key", [](Spec&) {}},
        {test::Bug::lse_log2, "lse in log2 units", [](Spec&) {}},
        {test::Bug::window_both_sides, "window of 2w+1 keys",
         [](Spec& s) { s.causal = true, s.window_left = 3, s.window_right = -1, s.q_pos.assign(s.q_pos.size(), 0); }},
        {test::Bug::gqa_modulus, "GQA group size as modulus",
         [](Spec& s) { s.kv_heads = 2, s.q_heads = 4, s.alibi.clear(); }},
        {test::Bug::softcap_before_scale, "softcap before the scale", [](Spec& s) { s.softcap = 2.0f; }},
    };
    for (const std::int32_t dtype : kDtypes)
        for (const Planted& planted : bugs) {
            Random r(99);
            double worst = 0;
            for (int t = 0; t < 12; ++t) {
                Spec s = random_spec(r, dtype, Style::normal, false);
                s.tk.assign(s.tk.size(), std::max(8, s.tk[0]));
                s.tq.assign(s.tq.size(), 4);
                s.varlen = false, s.kv_lens = false, s.block_size = 0, s.kv_capacity = 0;
                s.head_dim = std::max(s.head_dim, 8), s.value_dim = s.head_dim;
                if (planted.bug == test::Bug::no_scale) s.softcap = 0;
                planted.adjust(s);
                if (s.q_pos[0] == 0) s.causal = true, s.window_right = -1;
                V2Case c(s);
                fill_random(c, r, Style::normal);
                const OracleV2 o = attention_v2_oracle(c.p);
                const Ratios x = ratios(o, test::evaluate_f32(c.p, test::Order::two_pass, test::PRounding::none, planted.bug), true);
                worst = std::max({worst, x.out, x.lse});
            }
            INFO(dtype_name(dtype) << " " << planted.name);
            CHECK(worst > 1.0);
            WARN(dtype_name(dtype) << " " << planted.name << ": largest ratio " << worst);
        }
}

TEST_CASE("a tanh of declared accuracy: within the bound that declares it, over the default one",
          "[reference][v2][bound]") {
    // tanh.approx.f32 (relative error up to 2^-11 = 4096 ulps) is a correct softcap for a kernel
    // that declares tanh_ulps = 4096, and a score error far over the default 2 ulps.
    Random r(31);
    double declared = 0, undeclared = 0;
    for (const std::int32_t dtype : kDtypes)
        for (int t = 0; t < 20; ++t) {
            Spec s = random_spec(r, dtype, kStyles[t % 3], false);
            s.softcap = float(r.uniform(5, 30));
            V2Case c(s);
            fill_random(c, r, kStyles[t % 3]);
            INFO(describe_v2(c.p));
            const test::Evaluation ev = test::evaluate_f32(c.p, test::Order::two_pass, test::PRounding::none, test::Bug::tanh_approx);
            OracleV2Options options;
            options.tanh_ulps = 4096;
            const Ratios x = ratios(attention_v2_oracle(c.p, options), ev, true);
            REQUIRE(x.out <= 1.0);
            REQUIRE(x.lse <= 1.0);
            declared = std::max({declared, x.out, x.lse});
            const Ratios y = ratios(attention_v2_oracle(c.p), ev, true);
            undeclared = std::max({undeclared, y.out, y.lse});
        }
    WARN("tanh of 2^-11: largest ratio " << declared << " declared, " << undeclared << " undeclared");
    CHECK(undeclared > 1.0);
}

TEST_CASE("the v2 oracle equals the v1 oracle on v1-expressible problems", "[reference][v2][consistency]") {
    // f32, Hq = Hk, contiguous [B,H,T,D], one q_offset (q_pos the same for every sequence).
    Random r(5);
    for (int t = 0; t < 40; ++t) {
        attncheck_problem p1{};
        p1.abi_version = ATTNCHECK_ABI_VERSION;
        p1.batch = r.uniform(1, 3), p1.heads = r.uniform(1, 3);
        p1.q_len = r.uniform(1, 9), p1.kv_len = r.uniform(1, 20);
        p1.head_dim = r.uniform(1, 16), p1.value_dim = r.uniform(1, 16);
        p1.q_offset = r.uniform(0, p1.kv_len);
        p1.causal = r.coin(0.7);
        p1.scale = 1.0f / std::sqrt(float(p1.head_dim));
        std::vector<std::int32_t> valid;
        for (int b = 0; b < p1.batch; ++b) valid.push_back(r.uniform(0, p1.kv_len));
        if (r.coin()) p1.kv_valid_len = valid.data();
        const std::size_t BH = std::size_t(p1.batch * p1.heads);
        std::vector<float> q(BH * std::size_t(p1.q_len * p1.head_dim)), k(BH * std::size_t(p1.kv_len * p1.head_dim)),
            v(BH * std::size_t(p1.kv_len * p1.value_dim));
        for (auto* x : {&q, &k, &v})
            for (float& e : *x) e = float(r.normal());

        Spec s;
        s.batch = p1.batch, s.q_heads = s.kv_heads = p1.heads, s.head_dim = p1.head_dim, s.value_dim = p1.value_dim;
        s.tq.assign(std::size_t(p1.batch), p1.q_len);
        s.tk = p1.kv_valid_len ? std::vector<int>(valid.begin(), valid.end()) : std::vector<int>(std::size_t(p1.batch), p1.kv_len);
        s.kv_capacity = p1.kv_len, s.kv_lens = p1.kv_valid_len != nullptr;
        s.q_pos.assign(std::size_t(p1.batch), p1.q_offset);
        s.causal = p1.causal != 0, s.scale = p1.scale;
        V2Case c(s);
        // Same values: v1's contiguous [B,H,T,D] element (b, h, t, d) into the v2 view.
        for (int b = 0; b < p1.batch; ++b)
            for (int h = 0; h < p1.heads; ++h) {
                const std::size_t bh = std::size_t(b * p1.heads + h);
                for (int i = 0; i < p1.q_len; ++i)
                    for (int d = 0; d < p1.head_dim; ++d)
                        c.q.set(c.q_at(b, h, i, d), q[(bh * std::size_t(p1.q_len) + std::size_t(i)) * std::size_t(p1.head_dim) + std::size_t(d)]);
                for (int j = 0; j < c.tk(b); ++j) {
                    for (int d = 0; d < p1.head_dim; ++d)
                        c.k.set(c.k_at(b, h, j, d), k[(bh * std::size_t(p1.kv_len) + std::size_t(j)) * std::size_t(p1.head_dim) + std::size_t(d)]);
                    for (int d = 0; d < p1.value_dim; ++d)
                        c.v.set(c.v_at(b, h, j, d), v[(bh * std::size_t(p1.kv_len) + std::size_t(j)) * std::size_t(p1.value_dim) + std::size_t(d)]);
                }
            }
        INFO(describe_v2(c.p));
        const reference::BoundedOutput o1 = reference::attention_bounded(p1, q.data(), k.data(), v.data());
        const OracleV2 o2 = attention_v2_oracle(c.p);
        REQUIRE(o2.out.size() == o1.value.size());
        for (std::size_t e = 0; e < o1.value.size(); ++e) {
            REQUIRE(std::abs(o2.out[e] - o1.value[e]) <= 1e-12);
            // Version 2 covers at least the evaluations version 1 does.
            REQUIRE(o2.out_bound[e] >= o1.bound[e]);
        }
    }
}

TEST_CASE("the oracle depends on the layout only through the values it addresses", "[reference][v2][consistency]") {
    // One logical problem (same values, filled in the same logical order) as dense [B,H,T,D],
    // [B,T,H,D] with gaps, varlen and paged through a shuffled table: identical results, bit
    // for bit. And GQA equals MHA with each kv head replicated over its query-head group.
    Random r(41);
    for (int t = 0; t < 30; ++t) {
        Spec base = random_spec(r, kDtypes[t % 3], kStyles[t % 3], false);
        base.varlen = false, base.block_size = 0, base.kv_lens = true, base.row_gap = 0, base.layout = Layout::bhtd;
        base.tq.assign(base.tq.size(), base.tq[0]);
        base.kv_capacity = *std::max_element(base.tk.begin(), base.tk.end());
        Spec bthd = base, varlen = base, paged = base;
        bthd.layout = Layout::bthd, bthd.row_gap = 2;
        varlen.varlen = true, varlen.kv_lens = false;
        paged.block_size = r.uniform(1, 7), paged.spare_blocks = 2, paged.layout = Layout::bthd;
        const auto oracle_of = [&](const Spec& s) {
            V2Case c(s);
            Random values(std::uint32_t(500 + t));
            fill_random(c, values, kStyles[t % 3]);
            return attention_v2_oracle(c.p);
        };
        const OracleV2 o = oracle_of(base);
        for (const Spec* s : {&bthd, &varlen, &paged}) {
            V2Case shown(*s);
            INFO(describe_v2(shown.p));
            const OracleV2 x = oracle_of(*s);
            REQUIRE(x.out == o.out);
            REQUIRE(x.out_bound == o.out_bound);
            REQUIRE(x.visible == o.visible);
            for (std::size_t row = 0; row < o.rows(); ++row) {
                REQUIRE(float_to_bits(float(x.lse[row])) == float_to_bits(float(o.lse[row])));
                REQUIRE(x.lse_bound[row] == o.lse_bound[row]);
            }
        }

        // GQA against MHA with replicated kv heads.
        V2Case gqa(base);
        fill_random(gqa, r, kStyles[t % 3]);
        Spec mha_spec = base;
        mha_spec.kv_heads = base.q_heads;
        V2Case mha(mha_spec);
        const int group = base.q_heads / base.kv_heads;
        for (int b = 0; b < base.batch; ++b)
            for (int h = 0; h < base.q_heads; ++h) {
                for (int i = 0; i < gqa.tq(b); ++i)
                    for (int d = 0; d < base.head_dim; ++d) mha.q.set(mha.q_at(b, h, i, d), gqa.q.get(gqa.q_at(b, h, i, d)));
                for (int j = 0; j < gqa.tk(b); ++j) {
                    for (int d = 0; d < base.head_dim; ++d)
                        mha.k.set(mha.k_at(b, h, j, d), gqa.k.get(gqa.k_at(b, h / group, j, d)));
                    for (int d = 0; d < base.value_dim; ++d)
                        mha.v.set(mha.v_at(b, h, j, d), gqa.v.get(gqa.v_at(b, h / group, j, d)));
                }
            }
        INFO(describe_v2(gqa.p));
        const OracleV2 og = attention_v2_oracle(gqa.p), om = attention_v2_oracle(mha.p);
        REQUIRE(og.out == om.out);
        REQUIRE(og.out_bound == om.out_bound);
    }
}

TEST_CASE("the C library's tanhf is within the default tanh_ulps in the unit the softcap bound uses", "[reference][v2]") {
    // The bound allows |tanhf(x) - tanh(x)| <= k 2^-23 |tanh(x)| (docs/numerics.md, softcap); k
    // defaults to 2, for glibc's tanhf. tools/tanh_error.cpp measured every positive float (glibc
    // 2.36): at most 1.42 in this unit, at the first input below. In ulps of the result the same
    // tanhf reaches 2.19 (the second input): that is not the unit of tanh_ulps.
    const double k = reference::OracleV2Options{}.tanh_ulps;
    const auto error = [](float at) {
        // Through a volatile: g++ folds tanhf of a constant at compile time, correctly rounded.
        volatile float v = at;
        const float x = v;
        const long double t = std::tanh(static_cast<long double>(x));
        return double(std::fabs(static_cast<long double>(std::tanh(x)) - t) / (std::fabs(t) * 0x1p-23L));
    };
    CHECK(error(0x1.2755fap-3f) <= k);
    CHECK(error(0x1.ddca18p-3f) <= k);
    // A sweep of 2^20 floats over (0, 10], where tanh leaves 1 (beyond, tanhf is 1 or its neighbour).
    double worst = 0;
    float at = 0;
    for (int i = 1; i <= (1 << 20); ++i) {
        const float x = 10.0f * float(i) / float(1 << 20);
        if (error(x) > worst) worst = error(x), at = x;
    }
    INFO("worst " << worst << " at x = " << at);
    CHECK(worst <= k);
}
