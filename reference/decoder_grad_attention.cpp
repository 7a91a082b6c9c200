// reference/decoder_grad_attention.cpp — the decoder's two attentions in float64, each forward
// next to its backward (reference/decoder_grad_internal.hpp): masked self-attention with the
// version 2 features of MODEL.md (grouped-query heads, the sliding window, rotary positions) and
// cross-attention over the memory with its padding. Both are one multi-head attention, attend_*
// below, told which keys a row sees (KeyRule), how many kv heads there are and whether to rotate.
#include <algorithm>
#include <cmath>

#include "reference/decoder_grad_internal.hpp"

namespace attncheck::reference::grad_detail {
namespace {

// P [h, T, Tk] of Q [T, h*dk] and K [Tk, hkv*dk]: per head and row, the softmax of the scaled
// scores over the keys the rule lets the row see; query head j reads kv head j / (h / hkv). A
// row that sees no key (a fully padded memory) stays all 0, so its output is exactly 0, never NaN
// (MODEL.md §layer, last line).
Vec attention_probs(const Vec& Q, const Vec& K, const Dims& s, std::size_t Tk, std::size_t hkv, const KeyRule& rule) {
    const double scale = 1.0 / std::sqrt(double(s.dk));
    const std::size_t group = s.h / hkv, kd = hkv * s.dk;
    Vec P(s.h * s.T * Tk, 0.0);
    for (std::size_t j = 0; j < s.h; ++j)
        for (std::size_t i = 0; i < s.T; ++i) {
            double* row = &P[(j * s.T + i) * Tk];
            const std::size_t k0 = (j / group) * s.dk;
            double mx = -INFINITY;
            for (std::size_t t = 0; t < Tk; ++t) {
                if (!rule.sees(i, t)) continue;
                double dot = 0;
                for (std::size_t c = 0; c < s.dk; ++c) dot += Q[i * s.d + j * s.dk + c] * K[t * kd + k0 + c];
                row[t] = dot * scale;
                mx = std::max(mx, row[t]);
            }
            if (mx == -INFINITY) continue;  // no visible key: the row stays 0
            double sum = 0;
            for (std::size_t t = 0; t < Tk; ++t)
                if (rule.sees(i, t)) sum += row[t] = std::exp(row[t] - mx);
            for (std::size_t t = 0; t < Tk; ++t) row[t] = rule.sees(i, t) ? row[t] / sum : 0.0;
        }
    return P;
}

// Rotary positions (MODEL.md "Version 2 additions"), in place on every head of x [n, heads*dk]:
// row t at position t, element i paired with element i + dk/2, rotated by +a(t, i) (sign 1,
// the forward) or by -a(t, i) (sign -1: the transpose, which takes the gradient of a rotated
// vector back to the gradient of the vector before the rotation).
void rotate(Vec& x, std::size_t n, std::size_t heads, std::size_t dk, const RopeTable& r, double sign) {
    const std::size_t half = dk / 2;
    for (std::size_t t = 0; t < n; ++t)
        for (std::size_t head = 0; head < heads; ++head)
            for (std::size_t i = 0; i < half; ++i) {
                const std::size_t a = t * heads * dk + head * dk + i, b = a + half;
                const double c = r.cos[t * half + i], sn = sign * r.sin[t * half + i];
                const double xa = x[a], xb = x[b];
                x[a] = xa * c - xb * sn;
                x[b] = xa * sn + xb * c;
            }
}

// MODEL.md §layer steps 1-3 on the query stream a [T, d] and the key/value stream src [Tk, d]
// (K, V projected to hkv heads), with the rotation when rope is given.          -> y [T, d]
Vec attend_forward(const Vec& a, const Vec& src, std::size_t Tk, std::size_t hkv, const KeyRule& rule,
                   const RopeTable* rope, const Params& p, const std::string& prefix, const Dims& s,
                   AttentionCache& c) {
    const std::size_t kd = hkv * s.dk, group = s.h / hkv;
    c.a = a;
    c.src = src;
    c.Tk = Tk;
    c.hkv = hkv;
    c.Q = linear_forward(a, p.at(prefix + "q.weight"), &p.at(prefix + "q.bias"), s.T, s.d, s.d);
    c.K = linear_forward(src, p.at(prefix + "k.weight"), &p.at(prefix + "k.bias"), Tk, s.d, kd);
    c.V = linear_forward(src, p.at(prefix + "v.weight"), &p.at(prefix + "v.bias"), Tk, s.d, kd);
    if (rope) {
        rotate(c.Q, s.T, s.h, s.dk, *rope, 1.0);
        rotate(c.K, Tk, hkv, s.dk, *rope, 1.0);
    }
    c.P = attention_probs(c.Q, c.K, s, Tk, hkv, rule);
    c.O.assign(s.T * s.d, 0.0);
    for (std::size_t j = 0; j < s.h; ++j) {
        const std::size_t k0 = (j / group) * s.dk;
        for (std::size_t i = 0; i < s.T; ++i)
            for (std::size_t t = 0; t < Tk; ++t) {
                const double pr = c.P[(j * s.T + i) * Tk + t];
                if (pr == 0) continue;
                for (std::size_t col = 0; col < s.dk; ++col) c.O[i * s.d + j * s.dk + col] += pr * c.V[t * kd + k0 + col];
            }
    }
    return linear_forward(c.O, p.at(prefix + "o.weight"), &p.at(prefix + "o.bias"), s.T, s.d, s.d);
}

// Given dy [T, d] and the probabilities P [h, T, Tk] to differentiate through (the cache's, or
// the planted bug's): the weights' gradients into g, a's into da, src's into dsrc when given.
// Per query head j with kv head kj = j / g, S the scaled scores, dO the gradient of O:
//   dV_kj += P^T dO,  dP = dO V_kj^T,  dS = P * (dP - rowsum(P * dP)),
//   dQ_j = dS K_kj / sqrt(dk),  dK_kj += dS^T Q_j / sqrt(dk)
// (dK and dV summed over the g query heads of the group), then with rope dQ and dK are rotated
// back by the transpose before the projections' backward.
void attend_backward(const Vec& dy, const AttentionCache& c, const Vec& P, const RopeTable* rope, const Params& p,
                     Params& g, const std::string& prefix, const Dims& s, GradBug bug, Vec& da, Vec* dsrc) {
    const double scale = 1.0 / std::sqrt(double(s.dk));
    const std::size_t Tk = c.Tk, kd = c.hkv * s.dk, group = s.h / c.hkv;
    Vec dO(s.T * s.d, 0.0);  // [T, d]
    linear_backward(dy, c.O, p.at(prefix + "o.weight"), &dO, g.at(prefix + "o.weight"), &g.at(prefix + "o.bias"), s.T, s.d, s.d);
    Vec dQ(s.T * s.d, 0.0), dK(Tk * kd, 0.0), dV(Tk * kd, 0.0);  // [T, d], [Tk, hkv*dk] x 2
    Vec dP(Tk);                                                    // [Tk] one row's
    for (std::size_t j = 0; j < s.h; ++j) {
        const std::size_t k0 = (j / group) * s.dk;
        for (std::size_t i = 0; i < s.T; ++i) {
            const double* Pi = &P[(j * s.T + i) * Tk];
            const double* dOi = &dO[i * s.d + j * s.dk];
            double rowsum = 0;
            for (std::size_t t = 0; t < Tk; ++t) {
                double acc = 0;
                for (std::size_t col = 0; col < s.dk; ++col) {
                    acc += dOi[col] * c.V[t * kd + k0 + col];
                    dV[t * kd + k0 + col] += Pi[t] * dOi[col];
                }
                dP[t] = acc;
                rowsum += Pi[t] * acc;
            }
            if (bug == GradBug::softmax_rowsum_dropped) rowsum = 0;
            for (std::size_t t = 0; t < Tk; ++t) {
                const double dS = Pi[t] * (dP[t] - rowsum) * scale;
                if (dS == 0) continue;
                for (std::size_t col = 0; col < s.dk; ++col) {
                    dQ[i * s.d + j * s.dk + col] += dS * c.K[t * kd + k0 + col];
                    dK[t * kd + k0 + col] += dS * c.Q[i * s.d + j * s.dk + col];
                }
            }
        }
    }
    if (rope) {
        rotate(dQ, s.T, s.h, s.dk, *rope, -1.0);
        rotate(dK, Tk, c.hkv, s.dk, *rope, -1.0);
    }
    linear_backward(dQ, c.a, p.at(prefix + "q.weight"), &da, g.at(prefix + "q.weight"), &g.at(prefix + "q.bias"), s.T, s.d, s.d);
    linear_backward(dK, c.src, p.at(prefix + "k.weight"), dsrc, g.at(prefix + "k.weight"), &g.at(prefix + "k.bias"), Tk, s.d, kd);
    linear_backward(dV, c.src, p.at(prefix + "v.weight"), dsrc, g.at(prefix + "v.weight"), &g.at(prefix + "v.bias"), Tk, s.d, kd);
}

}  // namespace

// ---- masked self-attention (MODEL.md §layer steps 1-3 and "Version 2 additions") -------------

Vec self_attention_forward(const Vec& a, const Params& p, const std::string& prefix, const Dims& s,
                           const SelfAttentionOptions& o, AttentionCache& c) {
    return attend_forward(a, a, s.T, s.hkv, o.keys, o.rope, p, prefix, s, c);
}

void self_attention_backward(const Vec& dy, const AttentionCache& c, const Params& p, Params& g,
                             const std::string& prefix, const Dims& s, const RopeTable* rope, GradBug bug, Vec& da) {
    // The planted bug: the probabilities recomputed for the backward with every key visible,
    // neither the causal mask nor the window.
    const KeyRule everything{false, -1, s.T};
    const Vec P = bug == GradBug::mask_ignored_in_backward ? attention_probs(c.Q, c.K, s, s.T, s.hkv, everything) : c.P;
    // K and V are projections of the same input as Q: their gradients join da.
    attend_backward(dy, c, P, rope, p, g, prefix, s, bug, da, &da);
}

// ---- cross-attention (MODEL.md §layer "Cross-attention") -----------------------------------

Vec cross_attention_forward(const Vec& a, const Vec& memory, std::size_t S, std::size_t valid_len, const Params& p,
                            const std::string& prefix, const Dims& s, AttentionCache& c) {
    const KeyRule padding{false, -1, valid_len};
    return attend_forward(a, memory, S, s.h, padding, nullptr, p, prefix, s, c);
}

void cross_attention_backward(const Vec& dy, const AttentionCache& c, const Params& p, Params& g,
                              const std::string& prefix, const Dims& s, GradBug bug, Vec& da) {
    // mask_ignored_in_backward is a bug of the self-attention mask; the padding here stays.
    attend_backward(dy, c, c.P, nullptr, p, g, prefix, s, bug, da, nullptr);
}

}  // namespace attncheck::reference::grad_detail
