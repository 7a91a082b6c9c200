// reference/attention_grad.cpp — the float64 oracle of the backward pass (attention_grad.hpp) and
// the reference backward kernel behind the v2 C ABI.
//
// One query row at a time, as the forward oracle: its visible keys' exact scores (score_span, with
// the bound on a float32 kernel's score), the exact probabilities p_j, output o and
//   dP_j = dout . v_j,   D = dout . o,   dS_j = p_j (dP_j - D),   dS0_j = dS_j (1 - t_j^2)
// (t_j = tanh(s0_j / softcap), 1 without softcap), and their contributions
//   dq += scale dS0_j k_j,   dk_j += scale dS0_j q,   dv_j += p_j dout.
// Beside each quantity x, the bound ex on |a correct float32 kernel's x - x|, derived in
// docs/numerics.md, "The backward pass"; the comments name the steps.
//
// Notation: u = 2^-24 (float32, the accumulation); ud = unit_roundoff(dtype); n = the row's
// visible keys; g(k) = 1.01 k u, Higham's gamma_k for k u < 0.01 (any order of summation).
#include "reference/attention_grad.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::reference {

namespace {

constexpr double u = kUnitRoundoff32;
constexpr double kInf = std::numeric_limits<double>::infinity();

double g(double k) { return 1.01 * k * u; }

// A bound that came out NaN (an infinite term times zero) is no bound: +inf.
double sane(double bound) { return std::isnan(bound) ? kInf : bound; }

// Half the subnormal spacing of the dtype (float16); 0 where float32's underflow terms cover it.
double tiny_rounding(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? 0x1p-25 : dtype == ATTNCHECK_DTYPE_BF16 ? kMinNormal32 : 0.0;
}

std::string dout_error(const attncheck_problem_v2& p, const attncheck_tensor_v2& dout) {
    if (std::string e = problem_v2_error(p); !e.empty()) return e;
    if (!p.lse) return "lse is null (the backward reads the forward's lse)";
    if (p.block_table) return "a block_table is given (the backward takes dense or varlen k and v)";
    if (!dout.data) return "dout.data is null";
    for (int d = 0; d < 4; ++d)
        if (dout.stride[d] < 0) return "dout.stride[" + std::to_string(d) + "] is negative";
    return {};
}

// Per key row and column, the two sums a gradient's bound is made of: A = sum of (bound of a
// term's factor) x (the other factor), B = sum of |term| + that; and the terms' count.
struct Accumulated {
    std::vector<double> a, b;
    std::vector<int> terms;
};

struct Key {
    int j;
    ScoreV2 sc;
    double p = 0, ep = 0;    // p_j and its bound
    double dP = 0, edP = 0;  // dout . v_j and its bound
    double mdP = 0;          // sum_c |dout_c v_jc|
};

}  // namespace

GradOracle attention_grad_oracle(const attncheck_problem_v2& p, const attncheck_tensor_v2& dout,
                                 const GradOracleOptions& options) {
    if (const std::string e = dout_error(p, dout); !e.empty())
        throw std::invalid_argument("attention_grad_oracle: malformed call: " + e);
    const int B = p.batch, Dk = p.head_dim, Dv = p.value_dim;
    const std::size_t uDk = std::size_t(Dk), uDv = std::size_t(Dv);
    GradOracle o;
    o.head_dim = Dk, o.value_dim = Dv;
    o.first_row.assign(std::size_t(B) + 1, 0);
    o.first_key.assign(std::size_t(B) + 1, 0);
    o.q_len.resize(std::size_t(B));
    o.key_rows.resize(std::size_t(B));
    for (int b = 0; b < B; ++b) {
        const std::size_t ub = std::size_t(b);
        o.q_len[ub] = q_len_of(p, b);
        o.key_rows[ub] = kv_rows_of(p, b);
        o.first_row[ub + 1] = o.first_row[ub] + std::size_t(p.q_heads) * std::size_t(o.q_len[ub]);
        o.first_key[ub + 1] = o.first_key[ub] + std::size_t(p.kv_heads) * std::size_t(o.key_rows[ub]);
    }
    const std::size_t rows = o.rows(), keys = o.key_rows_total();
    o.dq.assign(rows * uDk, 0.0);
    o.dq_bound.assign(rows * uDk, 0.0);
    o.dk.assign(keys * uDk, 0.0);
    o.dv.assign(keys * uDv, 0.0);
    o.key_seen.assign(keys, 0);
    Accumulated ak{std::vector<double>(keys * uDk), std::vector<double>(keys * uDk), std::vector<int>(keys)};
    // The sinks' gradients, one per query head, summed over every row of the head.
    Accumulated as{std::vector<double>(std::size_t(p.q_heads)), std::vector<double>(std::size_t(p.q_heads)),
                   std::vector<int>(std::size_t(p.q_heads))};
    if (p.sinks) o.dsinks.assign(std::size_t(p.q_heads), 0.0);
    Accumulated av{std::vector<double>(keys * uDv), std::vector<double>(keys * uDv), {}};

    const double scale = double(p.scale), ud = unit_roundoff(p.dtype);
    // Underflow: a float32 result below 2^-126 may be subnormal or flushed to 0 (FTZ/DAZ, as
    // -ffast-math or CUDA's --use_fast_math compile a kernel), off by up to 2^-126 absolutely,
    // which no relative term covers. Every product and every partial sum is charged it; in a sum
    // times the scale, |scale| times it when the scale comes after (numerics.md section 5).
    const double fl = kMinNormal32, fl_scaled = std::max(1.0, std::abs(scale)) * kMinNormal32;
    const bool narrow = p.dtype != ATTNCHECK_DTYPE_F32;
    const bool rounded = options.probabilities_rounded && narrow;
    const bool bounds = !options.values_only;
    const auto load = [&](const void* data, std::int64_t offset) { return double(load_element(p.dtype, data, offset)); };
    std::vector<Key> row_keys;
    std::vector<ScoreV2> scores;
    std::vector<double> dO(uDv), out_exact(uDv), q(uDk), dq(uDk), aq(uDk), bq(uDk);
    KeysValues kv;
    kv.row_major_keys = true;

    for (int b = 0; b < B; ++b)
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = kv_head_of(p, h);
            kv.load(p, b, hk);
            for (int i = 0; i < o.q_len[std::size_t(b)]; ++i) {
                load_query_row(p, b, h, i, q);
                // The visible keys (one interval), scored over their span.
                row_keys.clear();
                for (int j = 0; j < kv_len_of(p, b); ++j)
                    if (visible_v2(p, b, i, j)) row_keys.push_back({j, {}});
                if (!row_keys.empty()) {
                    const int lo = row_keys.front().j;
                    score_span(p, options.tanh_ulps, b, h, i, q.data(), kv, lo, row_keys.back().j - lo + 1, true, scores);
                    for (Key& k : row_keys) k.sc = scores[std::size_t(k.j - lo)];
                }
                const std::size_t n = row_keys.size();
                // No key: dq = 0 exactly, nothing reaches any key, and out = 0 makes D = 0, so
                // the row adds nothing to its sink's gradient either.
                if (n == 0) continue;
                const double nn = double(n) + (p.sinks ? 1.0 : 0.0);  // the terms of the row's sums

                // The exact probabilities from the exact scores (not from the given lse); a sink
                // is one more score without a value.
                const double sink = p.sinks ? double(p.sinks[h]) : -kInf;
                double m = sink;
                for (const Key& k : row_keys) m = std::max(m, k.sc.s);
                double z = p.sinks ? std::exp(sink - m) : 0.0;
                for (const Key& k : row_keys) z += std::exp(k.sc.s - m);
                const double lse = m + std::log(z);
                for (Key& k : row_keys) k.p = std::exp(k.sc.s - lse);

                // P recomputed. From the given lse: the exponent exp(s_j - lse~) errs by the
                // score's e_j, the exponential's stage u (4 |s_j| + 4 |lse~| + 4) as in the
                // forward, and the given lse's own distance from lse. Or by a whole softmax of the
                // recomputed scores (max, sum, divide): within e^{2E} of p_j plus u (3n + 10).
                // Flushed weights: 2^-126 absolute. Rounded to the dtype (declared): ud more.
                const float lse_given = p.lse[lse_offset_v2(p, b, h, i)];
                const double lse_error = std::isfinite(lse_given) ? std::abs(double(lse_given) - lse) : kInf;
                double E_softmax = p.sinks ? u * (4.0 * std::abs(sink) + 4.0 * std::abs(m) + 4.0) : 0.0;
                for (const Key& k : row_keys)
                    E_softmax = std::max(E_softmax, k.sc.e + u * (4.0 * std::abs(k.sc.s) + 4.0 * std::abs(m) + 4.0));
                const double rel_softmax = std::expm1(2.0 * E_softmax) * (1.0 + g(3.0 * nn + 10.0)) + g(3.0 * nn + 10.0);
                for (Key& k : row_keys) {
                    if (!bounds) break;
                    const double E = k.sc.e + u * (4.0 * std::abs(k.sc.s) + 4.0 * std::abs(double(lse_given)) + 4.0) + lse_error;
                    double rel = std::max(std::expm1(E), rel_softmax);
                    if (rounded) rel += ud * (1.0 + rel);
                    k.ep = sane(rel * k.p + kMinNormal32 + (rounded ? tiny_rounding(p.dtype) : 0.0));
                }

                // dout, the exact output, and dP_j = dout . v_j (a Dv-term float32 dot).
                for (int c = 0; c < Dv; ++c) dO[std::size_t(c)] = load(dout.data, q_offset_v2(p, dout, b, h, i, c));
                std::fill(out_exact.begin(), out_exact.end(), 0.0);
                for (Key& k : row_keys) {
                    const double* vj = kv.value(k.j);
                    if (bounds)
                        for (int c = 0; c < Dv; ++c) k.mdP += std::abs(dO[std::size_t(c)] * vj[c]);
                    for (int c = 0; c < Dv; ++c) {
                        const double vc = vj[c];
                        out_exact[std::size_t(c)] += k.p * vc;
                        k.dP += dO[std::size_t(c)] * vc;
                    }
                    k.edP = g(double(Dv) + 2.0) * k.mdP + 2.0 * double(Dv) * fl;
                }

                // D = dout . o: from the given out (a Dv-term dot of it, plus its distance from
                // o), or as sum_j P_j dP_j of the recomputed terms: whichever bound is larger.
                double D = 0, eD_out = 0, mag_out = 0;
                for (int c = 0; c < Dv; ++c) {
                    const double oc = out_exact[std::size_t(c)];
                    const double given = load(p.out.data, q_offset_v2(p, p.out, b, h, i, c));
                    D += dO[std::size_t(c)] * oc;
                    eD_out += std::abs(dO[std::size_t(c)]) * (std::isfinite(given) ? std::abs(given - oc) : kInf);
                    mag_out += std::abs(dO[std::size_t(c)] * given);
                }
                eD_out += g(double(Dv) + 2.0) * mag_out + 2.0 * double(Dv) * fl;
                double eD_p = 0, mag_p = 0;
                for (const Key& k : row_keys) {
                    eD_p += k.ep * std::abs(k.dP) + (k.p + k.ep) * k.edP;
                    mag_p += (k.p + k.ep) * (std::abs(k.dP) + k.edP);
                }
                eD_p += g(nn + 2.0) * mag_p + 2.0 * nn * fl;
                const double eD = sane(std::max(eD_out, eD_p));

                // The sink's gradient: -p_sink D, p_sink = exp(sink - lse~) recomputed as a key's P.
                if (p.sinks) {
                    const double ps = std::exp(sink - lse);
                    const double E = u * (4.0 * std::abs(sink) + 4.0 * std::abs(double(lse_given)) + 4.0) + lse_error;
                    const double e_ps = sane(std::max(std::expm1(E), rel_softmax) * ps + kMinNormal32);
                    const std::size_t uh = std::size_t(h);
                    o.dsinks[uh] -= ps * D;
                    as.a[uh] += e_ps * (std::abs(D) + eD) + ps * eD + u * (ps + e_ps) * (std::abs(D) + eD) + 2.0 * fl;
                    as.b[uh] += (ps + e_ps) * (std::abs(D) + eD);
                    ++as.terms[uh];
                }

                std::fill(dq.begin(), dq.end(), 0.0);
                std::fill(aq.begin(), aq.end(), 0.0);
                std::fill(bq.begin(), bq.end(), 0.0);
                for (const Key& k : row_keys) {
                    // dS = P (dP - D): the difference, then the product, one rounding each.
                    const double diff = k.dP - D;
                    const double e_diff = k.edP + eD + u * (std::abs(diff) + k.edP + eD) + fl;
                    const double dS = k.p * diff;
                    double e_dS = k.ep * (std::abs(diff) + e_diff) + k.p * e_diff + u * (k.p + k.ep) * (std::abs(diff) + e_diff) + fl;
                    double dS0 = dS, e_dS0 = e_dS;
                    if (p.softcap > 0) {
                        // f = 1 - t^2 from the kernel's t (its tanh, or its capped score / cap):
                        // |t~ - t| <= e_c / cap + 2u |t|; f's error 2 |t| et + et^2 + 2u.
                        const double cap = double(p.softcap), t = std::tanh(k.sc.s0 / cap), f = 1.0 - t * t;
                        const double et = k.sc.e_capped / cap + 2.0 * u * std::abs(t);
                        const double ef = 2.0 * std::abs(t) * et + et * et + 2.0 * u + fl;
                        dS0 = dS * f;
                        e_dS0 = std::abs(f) * e_dS + ef * (std::abs(dS) + e_dS) + u * (std::abs(f) + ef) * (std::abs(dS) + e_dS) + fl;
                    }
                    if (rounded) e_dS0 += ud * (std::abs(dS0) + e_dS0) + tiny_rounding(p.dtype);
                    e_dS0 = sane(e_dS0);

                    const std::size_t kr = o.key(b, hk, k.j);
                    o.key_seen[kr] = 1;
                    ++ak.terms[kr];
                    const double* kj = kv.key(k.j);
                    for (int c = 0; c < Dk; ++c) {
                        const std::size_t uc = std::size_t(c);
                        dq[uc] += scale * dS0 * kj[c];
                        o.dk[kr * uDk + uc] += scale * dS0 * q[uc];
                    }
                    for (int c = 0; c < Dv; ++c) o.dv[kr * uDv + std::size_t(c)] += k.p * dO[std::size_t(c)];
                    if (!bounds) continue;
                    for (int c = 0; c < Dk; ++c) {
                        const std::size_t uc = std::size_t(c);
                        aq[uc] += e_dS0 * std::abs(kj[c]);
                        bq[uc] += (std::abs(dS0) + e_dS0) * std::abs(kj[c]);
                        ak.a[kr * uDk + uc] += e_dS0 * std::abs(q[uc]);
                        ak.b[kr * uDk + uc] += (std::abs(dS0) + e_dS0) * std::abs(q[uc]);
                    }
                    for (int c = 0; c < Dv; ++c) {
                        const std::size_t uc = std::size_t(c);
                        av.a[kr * uDv + uc] += k.ep * std::abs(dO[uc]);
                        av.b[kr * uDv + uc] += (k.p + k.ep) * std::abs(dO[uc]);
                    }
                }
                // dq = scale sum_j dS0_j k_j: an n-term sum (any order) and the scale's product.
                const std::size_t r = o.row(b, h, i);
                for (std::size_t c = 0; c < uDk; ++c) {
                    double bound = std::abs(scale) * (aq[c] + g(nn + 3.0) * bq[c]) + (2.0 * nn + 1.0) * fl_scaled;
                    if (narrow) bound += ud * (std::abs(dq[c]) + bound) + tiny_rounding(p.dtype);
                    o.dq[r * uDk + c] = dq[c];
                    o.dq_bound[r * uDk + c] = sane(bound);
                }
            }
        }

    if (!bounds) {
        o.dq_bound.clear();
        return o;
    }
    // dk_j = scale sum over the rows that see key j (of every query head of its group), dv_j the
    // same without the scale: sums of m terms in any order.
    o.dk_bound.assign(keys * uDk, 0.0);
    o.dv_bound.assign(keys * uDv, 0.0);
    for (std::size_t kr = 0; kr < keys; ++kr) {
        const double terms = double(ak.terms[kr]);
        for (std::size_t c = 0; c < uDk; ++c) {
            const std::size_t x = kr * uDk + c;
            double bound = ak.terms[kr] ? std::abs(scale) * (ak.a[x] + g(terms + 3.0) * ak.b[x]) + (2.0 * terms + 1.0) * fl_scaled : 0.0;
            if (narrow && ak.terms[kr]) bound += ud * (std::abs(o.dk[x]) + bound) + tiny_rounding(p.dtype);
            o.dk_bound[x] = sane(bound);
        }
        for (std::size_t c = 0; c < uDv; ++c) {
            const std::size_t x = kr * uDv + c;
            double bound = ak.terms[kr] ? av.a[x] + g(terms + 2.0) * av.b[x] + 2.0 * terms * fl : 0.0;
            if (narrow && ak.terms[kr]) bound += ud * (std::abs(o.dv[x]) + bound) + tiny_rounding(p.dtype);
            o.dv_bound[x] = sane(bound);
        }
    }
    if (p.sinks) {
        o.dsinks_bound.resize(std::size_t(p.q_heads));
        for (std::size_t h = 0; h < o.dsinks_bound.size(); ++h)
            o.dsinks_bound[h] = sane(as.a[h] + g(double(as.terms[h]) + 2.0) * as.b[h]);
    }
    return o;
}

}  // namespace attncheck::reference

extern "C" int attncheck_reference_kernel_v2_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g) {
    using namespace attncheck;
    if (!p || !g) return ATTNCHECK_UNSUPPORTED;
    // No exception may cross the C boundary: an allocation that fails is reported as unsupported.
    try {
        if (!grads_v2_error(*p, *g).empty()) return ATTNCHECK_UNSUPPORTED;
        // The whole result first, then dq, dk and dv, each element once, at the ABI's offsets.
        reference::GradOracleOptions values;
        values.values_only = true;
        const reference::GradOracle o = reference::attention_grad_oracle(*p, g->dout, values);
        for (int b = 0; b < p->batch; ++b) {
            for (int h = 0; h < p->q_heads; ++h)
                for (int i = 0; i < o.q_len[std::size_t(b)]; ++i)
                    for (int c = 0; c < p->head_dim; ++c)
                        store_element(p->dtype, g->dq.data, q_offset_v2(*p, g->dq, b, h, i, c),
                                      reference::round_double_to(p->dtype, o.dq[o.row(b, h, i) * std::size_t(p->head_dim) + std::size_t(c)]));
            for (int hk = 0; hk < p->kv_heads; ++hk)
                for (int j = 0; j < o.key_rows[std::size_t(b)]; ++j) {
                    const std::size_t kr = o.key(b, hk, j);
                    for (int c = 0; c < p->head_dim; ++c)
                        store_element(p->dtype, g->dk.data, kv_offset_v2(*p, g->dk, b, hk, j, c),
                                      reference::round_double_to(p->dtype, o.dk[kr * std::size_t(p->head_dim) + std::size_t(c)]));
                    for (int c = 0; c < p->value_dim; ++c)
                        store_element(p->dtype, g->dv.data, kv_offset_v2(*p, g->dv, b, hk, j, c),
                                      reference::round_double_to(p->dtype, o.dv[kr * std::size_t(p->value_dim) + std::size_t(c)]));
                }
        }
        for (std::size_t h = 0; h < o.dsinks.size(); ++h) g->dsinks[h] = float(o.dsinks[h]);
        return ATTNCHECK_OK;
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
