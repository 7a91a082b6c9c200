// tests/reference/f32_evaluations.hpp — correct float32 evaluations of a version 2 problem in
// differently ordered ways, the candidates the oracle's bound must never flag
// (docs/numerics.md, "Version 2"), and planted bugs the bound must catch.
//
// Each evaluation reads the problem through the ABI's helpers (attncheck/problem_v2.hpp) and
// accumulates in float32, the way real kernels do:
//   two_pass   scores, the row maximum, exp, the sum, P V, one division per element
//   online     FlashAttention's one pass over tiles of keys, a running maximum and rescaling,
//              fused multiply-adds in P V
//   exp2       the scale and log2 e folded into q (or, with softcap, into the capped score),
//              exp2 and log2, the output times the reciprocal of the sum
//   reversed   keys and the dot product's terms in reverse order
//   split_kv   three chunks of keys evaluated apart, their unnormalised sums merged by
//              rescaling and divided once
//   split_lse  flash-decoding (FlashAttention-2's combine): three chunks, each returning its
//              normalised output o_c and float32 lse_c; lse = M + log sum_c exp(lse_c - M) with
//              M = max_c lse_c, and o = sum_c exp(lse_c - lse) o_c (nothing divides at the end)
// P may be rounded to the dtype (float16 / bfloat16) before P V, with the sum of the unrounded P
// (FlashAttention) or of the rounded one. The output is rounded to the dtype; lse is float32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attncheck/problem_v2.hpp"

namespace attncheck::test {

enum class Order { two_pass, online, exp2, reversed, split_kv, split_lse };
inline const char* order_name(Order o) {
    switch (o) {
    case Order::two_pass: return "two_pass";
    case Order::online: return "online";
    case Order::exp2: return "exp2";
    case Order::reversed: return "reversed";
    case Order::split_kv: return "split_kv";
    case Order::split_lse: return "split_lse";
    }
    return "?";
}
inline constexpr Order kOrders[] = {Order::two_pass, Order::online,   Order::exp2,
                                    Order::reversed, Order::split_kv, Order::split_lse};

// Where the probabilities are rounded to the dtype: nowhere, only in P V, or in P V and the sum.
enum class PRounding { none, numerator, both };

// Bugs seen in real kernels, planted into the two-pass evaluation. tanh_approx is not a bug
// when declared: a tanh with a relative error of 0.9 * 2^-11 (tanh.approx.f32 on a GPU).
enum class Bug { none, no_scale, dropped_key, lse_log2, window_both_sides, gqa_modulus, softcap_before_scale, tanh_approx };

// Results in the oracle's logical order: rows (b, h, i), out [rows, Dv] as stored (rounded to
// the dtype, read back as float), the same before that rounding (out_f32), lse [rows].
struct Evaluation {
    std::vector<float> out, out_f32, lse;
};

namespace detail {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.693147180559945309417f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The unnormalised state of a softmax over some keys: maximum, sum of weights, sum of weight * v.
struct Partial {
    float m = kNegInf, l = 0;
    std::vector<float> acc;
};

struct RowContext {
    const attncheck_problem_v2& p;
    int b, h, i, hk;
    Order order;
    PRounding round_p;
    Bug bug;
};

// The key's score in float32; base 2 (times log2 e) for the exp2 order.
inline float score(const RowContext& r, int j) {
    const attncheck_problem_v2& p = r.p;
    const int D = p.head_dim;
    const bool base2 = r.order == Order::exp2;
    const bool scale_in_q = base2 && !(p.softcap > 0);
    const float scale = r.bug == Bug::no_scale ? 1.0f : p.scale;
    const float q_factor = scale_in_q ? scale * kLog2e : 1.0f;
    float dot = 0;
    for (int t = 0; t < D; ++t) {
        const int d = r.order == Order::reversed ? D - 1 - t : t;
        float qd = load_element(p.dtype, p.q.data, q_offset_v2(p, p.q, r.b, r.h, r.i, d));
        if (scale_in_q) qd *= q_factor;
        dot += qd * load_element(p.dtype, p.k.data, kv_offset_v2(p, p.k, r.b, r.hk, j, d));
    }
    float s = scale_in_q ? dot : scale * dot;
    if (p.softcap > 0) {
        if (r.bug == Bug::softcap_before_scale) s = scale * (p.softcap * std::tanh(dot / p.softcap));
        else if (r.bug == Bug::tanh_approx) s = p.softcap * (std::tanh(s / p.softcap) * (1.0f + 0.9f * 0x1p-11f));
        else s = p.softcap * std::tanh(s / p.softcap);
        if (base2) s *= kLog2e;
    }
    if (p.alibi_slopes) {
        const float slope = base2 ? p.alibi_slopes[r.h] * kLog2e : p.alibi_slopes[r.h];
        s -= slope * float(p.q_pos[r.b] + r.i - j);
    }
    return s;
}

inline float expo(const RowContext& r, float x) { return r.order == Order::exp2 ? std::exp2(x) : std::exp(x); }

// Adds keys `js` (already scored into `s`) to the partial state, one tile.
inline void absorb(const RowContext& r, const std::vector<int>& js, const std::vector<float>& s, Partial& st) {
    const attncheck_problem_v2& p = r.p;
    float tile_max = kNegInf;
    for (float x : s) tile_max = std::max(tile_max, x);
    const float m_new = std::max(st.m, tile_max);
    const float alpha = st.m == kNegInf ? 0.0f : expo(r, st.m - m_new);
    st.l *= alpha;
    for (float& a : st.acc) a *= alpha;
    st.m = m_new;
    for (std::size_t t = 0; t < js.size(); ++t) {
        const float w = expo(r, s[t] - m_new);
        const float wv = r.round_p == PRounding::none ? w : round_to(p.dtype, w);
        st.l += r.round_p == PRounding::both ? wv : w;
        for (int c = 0; c < p.value_dim; ++c) {
            const float vj = load_element(p.dtype, p.v.data, kv_offset_v2(p, p.v, r.b, r.hk, js[t], c));
            st.acc[std::size_t(c)] = r.order == Order::online ? std::fma(wv, vj, st.acc[std::size_t(c)])
                                                              : st.acc[std::size_t(c)] + wv * vj;
        }
    }
}

inline bool visible(const RowContext& r, int j) {
    if (r.bug == Bug::window_both_sides && r.p.window_left >= 0) {
        const std::int64_t a = std::int64_t(r.p.q_pos[r.b]) + r.i;
        return j >= 0 && j < kv_len_of(r.p, r.b) && j >= a - r.p.window_left && j <= a + r.p.window_left;
    }
    return visible_v2(r.p, r.b, r.i, j);
}

}  // namespace detail

inline Evaluation evaluate_f32(const attncheck_problem_v2& p, Order order, PRounding round_p = PRounding::none,
                               Bug bug = Bug::none) {
    using namespace detail;
    Evaluation ev;
    const std::size_t Dv = std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, b); ++i) {
                const int hk = bug == Bug::gqa_modulus ? h % p.kv_heads : kv_head_of(p, h);
                const RowContext r{p, b, h, i, hk, order, round_p, bug};
                std::vector<int> js;
                for (int j = 0; j < kv_len_of(p, b); ++j)
                    if (visible(r, j)) js.push_back(j);
                if (bug == Bug::dropped_key && js.size() >= 2) js.pop_back();
                if (order == Order::reversed) std::reverse(js.begin(), js.end());
                std::vector<float> s(js.size());
                for (std::size_t t = 0; t < js.size(); ++t) s[t] = score(r, js[t]);

                // Partials over tiles (online: 16 keys; split_kv, split_lse: three chunks; else one).
                const bool split = order == Order::split_kv || order == Order::split_lse;
                std::size_t tile = js.size();
                if (order == Order::online) tile = 16;
                if (split) tile = std::max<std::size_t>(1, (js.size() + 2) / 3);
                std::vector<Partial> parts;
                Partial run{kNegInf, 0, std::vector<float>(Dv, 0.0f)};
                for (std::size_t t0 = 0; t0 < js.size(); t0 += tile) {
                    const std::size_t t1 = std::min(js.size(), t0 + tile);
                    const std::vector<int> tj(js.begin() + std::ptrdiff_t(t0), js.begin() + std::ptrdiff_t(t1));
                    const std::vector<float> ts(s.begin() + std::ptrdiff_t(t0), s.begin() + std::ptrdiff_t(t1));
                    if (split) {
                        Partial part{kNegInf, 0, std::vector<float>(Dv, 0.0f)};
                        absorb(r, tj, ts, part);
                        parts.push_back(part);
                    } else {
                        absorb(r, tj, ts, run);
                    }
                }
                if (order == Order::split_kv && !parts.empty()) {  // the merge
                    float M = kNegInf;
                    for (const Partial& part : parts) M = std::max(M, part.m);
                    run.m = M;
                    for (const Partial& part : parts) {
                        const float w = std::exp(part.m - M);
                        run.l += w * part.l;
                        for (std::size_t c = 0; c < Dv; ++c) run.acc[c] += w * part.acc[c];
                    }
                }
                if (order == Order::split_lse && !parts.empty()) {
                    // Each chunk's normalised output and float32 lse, then FlashAttention-2's
                    // combine; out and lse are written here and the row is done.
                    std::vector<float> lse_c(parts.size());
                    float M = kNegInf;
                    for (std::size_t k = 0; k < parts.size(); ++k) {
                        lse_c[k] = parts[k].m + std::log(parts[k].l);
                        M = std::max(M, lse_c[k]);
                    }
                    float sum = 0;
                    for (const float l : lse_c) sum += std::exp(l - M);
                    const float lse = M + std::log(sum);
                    std::vector<float> o(Dv, 0.0f);
                    for (std::size_t k = 0; k < parts.size(); ++k) {
                        const float a = std::exp(lse_c[k] - lse);
                        for (std::size_t c = 0; c < Dv; ++c) o[c] += a * (parts[k].acc[c] / parts[k].l);
                    }
                    for (std::size_t c = 0; c < Dv; ++c) {
                        ev.out.push_back(round_to(p.dtype, o[c]));
                        ev.out_f32.push_back(o[c]);
                    }
                    ev.lse.push_back(lse);
                    continue;
                }
                for (std::size_t c = 0; c < Dv; ++c) {
                    float o = 0;
                    if (!js.empty()) o = order == Order::exp2 ? run.acc[c] * (1.0f / run.l) : run.acc[c] / run.l;
                    ev.out.push_back(round_to(p.dtype, o));
                    ev.out_f32.push_back(o);
                }
                float lse = kNegInf;
                if (!js.empty()) {
                    lse = order == Order::exp2 ? (run.m + std::log2(run.l)) * kLn2 : run.m + std::log(run.l);
                    if (bug == Bug::lse_log2) lse = run.m / kLn2 + std::log2(run.l);
                }
                ev.lse.push_back(lse);
            }
    return ev;
}

}  // namespace attncheck::test
