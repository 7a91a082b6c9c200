// reference/error_bound.cpp — the running error bounds of error_bound.hpp. Every term is derived
// in docs/numerics.md; the names here (own rounding, propagation) follow it.
//
// Notation: u = 2^-24; for an exact value x (float64) and a float32 evaluation x^ of it, the
// bound e(x) satisfies |x^ - x| <= e(x). Each operation adds its own rounding (what a correct
// float32 evaluation may add, in any order) and maps the incoming bounds through the operation's
// sensitivity. Magnitudes of inputs are taken as |x| + e(x), the largest a float32 input can be.
#include "reference/error_bound.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "attncheck/error.hpp"
#include "reference/attention.hpp"

namespace attncheck::reference {

double gamma32(double n) { return n * kUnitRoundoff32 / (1.0 - n * kUnitRoundoff32); }

// The weights' relative error eta is first order in u; |e^eta - 1| <= eta e^eta makes it exact.
SplitMerge split_merge_output(double n, double lse) {
    const double ln_n = std::log(n);
    const double eta = kUnitRoundoff32 * (6.0 * n + 16.0 * std::abs(lse) + 24.0 * ln_n + 16.0);
    const double grow = std::exp(eta + kUnitRoundoff32 * 10.0 * ln_n);
    return {eta * grow, kUnitRoundoff32 * 10.0 * ln_n * grow};
}

double split_merge_lse_term(double n, double lse) {
    return kUnitRoundoff32 * (n + 16.0 * std::abs(lse) + 30.0 * std::log(n) + 8.0);
}

namespace {

constexpr double u = kUnitRoundoff32;

// The columns [c0, c0 + n) of m.
BoundedMatrix columns(const BoundedMatrix& m, std::size_t c0, std::size_t n) {
    BoundedMatrix r(m.rows, n);
    for (std::size_t i = 0; i < m.rows; ++i)
        for (std::size_t c = 0; c < n; ++c) {
            r.x(i, c) = m.x(i, c0 + c);
            r.e(i, c) = m.e(i, c0 + c);
        }
    return r;
}

// y = x W^T + b (b may be null), x [n, in], W [out, in] and b [out]: the model's float32
// tensors, exact.
//   own rounding: an in-term dot product plus the bias, any order, FMA or not:
//     gamma_{in+1} (sum_c |W_oc| |x_c| + |b_o|)      (in + 2 below: one spare rounding for a
//     kernel that rounds the product before an FMA-less add and then the bias)
//   propagation: sum_c |W_oc| e(x_c)
BoundedMatrix linear(const BoundedMatrix& x, const Tensor& W, const Tensor* b) {
    const std::size_t n = x.rows, in = x.cols, out = W.shape[0];
    BoundedMatrix y(n, out);
    const double g = gamma32(double(in) + 2.0);
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            double acc = 0, mag = 0, prop = 0;
            for (std::size_t c = 0; c < in; ++c) {
                const double w = double(W.data[o * in + c]);
                acc += x.x(r, c) * w;
                mag += std::abs(w) * (std::abs(x.x(r, c)) + x.e(r, c));
                prop += std::abs(w) * x.e(r, c);
            }
            if (b) {
                acc += double(b->data[o]);
                mag += std::abs(double(b->data[o]));
            }
            y.x(r, o) = acc;
            y.e(r, o) = prop + g * mag;
        }
    return y;
}

// z = x + y: e(z) = e(x) + e(y) + u (|z| + e(x) + e(y)).
BoundedMatrix add(const BoundedMatrix& x, const BoundedMatrix& y) {
    BoundedMatrix z(x.rows, x.cols);
    for (std::size_t i = 0; i < z.value.size(); ++i) {
        z.value[i] = x.value[i] + y.value[i];
        const double prop = x.bound[i] + y.bound[i];
        z.bound[i] = prop + u * (std::abs(z.value[i]) + prop);
    }
    return z;
}

// LayerNorm over each row (d columns), y = (x - mean) / sqrt(var + eps) * gamma + beta.
//   own rounding (mean and a two-pass or Welford variance in float32, or statistics in wider
//   precision): the mean errs by dm <= gamma_{d+1} mean|x|; the variance (d squares summed,
//   divided, plus eps) by a relative gamma_{d+4}; sqrt and the reciprocal by u each; so
//   1/sigma errs relatively by gamma_{d+4}/2 + 3u. Then (x_c - mean) * inv * gamma_c + beta_c
//   rounds 4 times:
//     own_c = |gamma_c| / sigma * (dm + u |x_c - mean|) + |gamma_c xh_c| (gamma_{d+4}/2 + 6u)
//             + u (|y_c| + |beta_c|)
//   propagation, first order (xh = (x - mean) / sigma, the derivative of LayerNorm):
//     |gamma_c| / sigma * (e_c (1 - 2/d) + mean(e) + |xh_c| mean(|xh| e))
//   (the first two terms bound |delta x_c - mean(delta x)|; the mean of one element is exact)
//   times 1 / (1 - 2 rho) for rho = sqrt(mean(e^2)) / sigma < 1/4 (the relative change of sigma
//   an input perturbation can cause bounds the second-order terms); where the inputs' bound is
//   not small against sigma, only the range of LayerNorm bounds the error: |xh| <= sqrt(d - 1)
//   for both values, so 2 |gamma_c| sqrt(d) + own.
BoundedMatrix layer_norm(const BoundedMatrix& x, const std::vector<float>& gamma, const std::vector<float>& beta,
                         double eps) {
    const std::size_t n = x.rows, d = x.cols;
    BoundedMatrix y(n, d);
    const double dd = double(d);
    const double g_var = gamma32(dd + 4.0), g_mean = gamma32(dd + 1.0);
    for (std::size_t r = 0; r < n; ++r) {
        double mean = 0, mean_abs = 0, mean_e = 0, mean_e2 = 0;
        for (std::size_t c = 0; c < d; ++c) {
            mean += x.x(r, c);
            mean_abs += std::abs(x.x(r, c)) + x.e(r, c);
            mean_e += x.e(r, c);
            mean_e2 += x.e(r, c) * x.e(r, c);
        }
        mean /= dd;
        mean_abs /= dd;
        mean_e /= dd;
        mean_e2 /= dd;
        double var = 0;
        for (std::size_t c = 0; c < d; ++c) var += (x.x(r, c) - mean) * (x.x(r, c) - mean);
        var /= dd;
        const double sigma = std::sqrt(var + eps);
        double mean_xh_e = 0;
        for (std::size_t c = 0; c < d; ++c) mean_xh_e += std::abs(x.x(r, c) - mean) / sigma * x.e(r, c);
        mean_xh_e /= dd;
        // d = 1: the mean is the element itself, exactly (a sum of one term, a division by 1).
        const double dm = d == 1 ? 0.0 : g_mean * mean_abs;
        const double rho = std::sqrt(mean_e2) / sigma;
        for (std::size_t c = 0; c < d; ++c) {
            const double gc = std::abs(double(gamma[c])), bc = double(beta[c]);
            const double xh = (x.x(r, c) - mean) / sigma;
            y.x(r, c) = xh * double(gamma[c]) + bc;
            const double own = gc / sigma * (dm + u * std::abs(x.x(r, c) - mean)) +
                               gc * std::abs(xh) * (g_var / 2.0 + 6.0 * u) + u * (std::abs(y.x(r, c)) + std::abs(bc));
            const double range = 2.0 * gc * std::sqrt(dd);
            double prop = range;
            // |delta x_c - mean(delta x)| <= (1 - 1/d) e_c + (1/d) sum_{k != c} e_k = e_c (1 - 2/d) + mean(e)
            // (0 for d = 1: LayerNorm of one element is beta, whatever its input).
            const double centred = x.e(r, c) * (1.0 - 2.0 / dd) + mean_e;
            if (rho < 0.25) prop = std::min(range, gc / sigma * (centred + std::abs(xh) * mean_xh_e) / (1.0 - 2.0 * rho));
            y.e(r, c) = prop + own;
        }
    }
    return y;
}

// The feed-forward activation, element by element.
//   relu: 1-Lipschitz and exact: e(y) = e(x).
//   gelu = x Phi(x) and gelu_tanh: both 1.13-Lipschitz (sup |gelu'| = 1.1289, at x = 2.42;
//   1.15 covers the tanh form too), propagation 1.15 e(x). Own rounding:
//     gelu: x / sqrt 2 (2u) moves erf by <= 2/sqrt(pi) e^{-z^2} 2u |z|, erf itself a few ulps,
//     1 + erf and the two products u each: u (3 |x| + 3 |y| + x^2 e^{-x^2/2}).
//     gelu_tanh: the argument a = c (x + 0.044715 x^3) errs by 6u c (|x| + 0.044715 |x|^3),
//     moving tanh by (1 - t^2) times that; tanh a few ulps and, computed from exp, u absolute;
//     0.5 x (1 + t) rounds 3 times:
//     0.5 |x| ((1 - t^2) 6u c (|x| + 0.044715 |x|^3) + 3u |t| + 3u) + 3u |y|.
double activate_exact(Activation a, double x) {
    switch (a) {
        case Activation::relu: return x > 0 ? x : 0.0;
        case Activation::gelu: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
        case Activation::gelu_tanh:
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    }
    return x;
}

void activate(Activation a, BoundedMatrix& m) {
    constexpr double kLipschitz = 1.15;
    const double c = std::sqrt(2.0 / std::numbers::pi);
    for (std::size_t i = 0; i < m.value.size(); ++i) {
        const double x = m.value[i], ex = m.bound[i];
        const double y = activate_exact(a, x);
        double own = 0, prop = ex;
        if (a == Activation::gelu) {
            own = u * (3.0 * std::abs(x) + 3.0 * std::abs(y) + x * x * std::exp(-x * x / 2.0));
            prop = kLipschitz * ex;
        } else if (a == Activation::gelu_tanh) {
            const double t = std::tanh(c * (x + 0.044715 * x * x * x));
            own = 0.5 * std::abs(x) *
                      ((1.0 - t * t) * 6.0 * u * c * (std::abs(x) + 0.044715 * std::abs(x * x * x)) +
                       3.0 * u * std::abs(t) + 3.0 * u) +
                  3.0 * u * std::abs(y);
            prop = kLipschitz * ex;
        }
        m.value[i] = y;
        m.bound[i] = prop + own;
    }
}

}  // namespace

// One head. For row i with n visible keys, scores s_ij = scale q_i.k_j, max m_i, weights p_ij,
// out o_ic = sum_j p_ij v_jc:
//   score error (NUMERICS.md): e_ij = u ((Dk + 4) |scale| sum_d |q_id||k_jd| + 4 |s_ij| + 4 |m_i| + 4)
//     [Dk + 1 roundings of a dot product in any order with the scale applied before or after,
//     one spare per operand; 4 |s| and 4 |m| for the max subtraction and a scale or log2 e folded
//     into the exponent; 4 for exp/exp2 of a few ulps expressed as a score error]
//     + |scale| sum_d (e(q_id) |k_jd| + |q_id| e(k_jd) + e(q_id) e(k_jd))   (inputs' bounds)
//     + scale_error |s_ij|                                                  (a rounded scale)
//   With E_i = max_j e_ij, the softmax moves each weight by the factor e^{delta s_j} / Z with
//   Z = sum p e^{delta s} in [e^{-E}, e^{E}]; since sum_j p_ij (v_jc - o_ic) = 0 exactly,
//     |delta o_ic| <= e^{2E} (sum_j p_ij e_ij |v_jc - o_ic| + sum_j p_ij e(v_jc))
//   without linearisation. Then the sums of the normalisation and of p v, in any order, with
//   online rescaling and a split-KV merge: u (3n + 8) (sum_j p_ij (|v_jc| + e(v_jc)) + |o_ic|);
//   a merge of normalised partials through their float32 lse (flash-decoding) adds
//   split_merge_output (error_bound.hpp) of sum_j p_ij (|v_jc| + e(v_jc)) and max_j |v_jc|;
//   and float32 underflow (gradual or flushed) of the weights and products:
//   (n + 2) 2^-126 (max_j |v_jc| + 1).
//   Where E is so large that e^{2E} loses meaning, the output being a convex combination of the
//   values caps the first part at max_j (|v_jc - o_ic| + e(v_jc)).
BoundedMatrix attend_head_bounded(const BoundedMatrix& q, const BoundedMatrix& k, const BoundedMatrix& v,
                                  std::int64_t q_offset, bool causal, std::int64_t valid_len, double scale,
                                  double scale_error) {
    const std::size_t Tq = q.rows, Tk = k.rows, Dk = q.cols, Dv = v.cols;
    BoundedMatrix out(Tq, Dv);
    std::vector<double> s(Tk), e(Tk), p(Tk);
    std::vector<char> visible(Tk);
    const double abs_scale = std::abs(scale);
    for (std::size_t i = 0; i < Tq; ++i) {
        std::size_t n = 0;
        double m = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < Tk; ++j) {
            visible[j] = key_visible(std::int64_t(i), std::int64_t(j), q_offset, causal, valid_len);
            if (!visible[j]) continue;
            ++n;
            double dot = 0, mag = 0, prop = 0;
            for (std::size_t c = 0; c < Dk; ++c) {
                dot += q.x(i, c) * k.x(j, c);
                mag += std::abs(q.x(i, c)) * std::abs(k.x(j, c));
                prop += q.e(i, c) * std::abs(k.x(j, c)) + std::abs(q.x(i, c)) * k.e(j, c) + q.e(i, c) * k.e(j, c);
            }
            s[j] = scale * dot;
            e[j] = u * (double(Dk) + 4.0) * abs_scale * mag + abs_scale * prop + scale_error * std::abs(s[j]);
            m = std::max(m, s[j]);
        }
        if (n == 0) continue;  // no visible key: out 0, bound 0 (the convention is checked elsewhere)
        double sum = 0, E = 0;
        for (std::size_t j = 0; j < Tk; ++j) {
            if (!visible[j]) continue;
            e[j] += u * (4.0 * std::abs(s[j]) + 4.0 * std::abs(m) + 4.0);
            E = std::max(E, e[j]);
            p[j] = std::exp(s[j] - m);
            sum += p[j];
        }
        for (std::size_t j = 0; j < Tk; ++j) p[j] = visible[j] ? p[j] / sum : 0.0;
        const double arith = u * (3.0 * double(n) + 8.0);
        const SplitMerge merge = split_merge_output(double(n), m + std::log(sum));
        const double growth = std::exp(2.0 * E);
        for (std::size_t c = 0; c < Dv; ++c) {
            double o = 0;
            for (std::size_t j = 0; j < Tk; ++j)
                if (visible[j]) o += p[j] * v.x(j, c);
            double soft = 0, mag = 0, vmax = 0, cap = 0;
            for (std::size_t j = 0; j < Tk; ++j) {
                if (!visible[j]) continue;
                const double vj = v.x(j, c), ev = v.e(j, c);
                soft += p[j] * (e[j] * std::abs(vj - o) + ev);
                mag += p[j] * (std::abs(vj) + ev);
                vmax = std::max(vmax, std::abs(vj));
                cap = std::max(cap, std::abs(vj - o) + ev);
            }
            const double first = (std::isfinite(growth) && growth < 2.0) ? std::min(growth * soft, cap) : cap;
            out.x(i, c) = o;
            out.e(i, c) = first + arith * (mag + std::abs(o)) + merge.magnitude * mag +
                          merge.largest * vmax + (double(n) + 2.0) * kMinNormal32 * (vmax + 1.0);
        }
    }
    return out;
}

BoundedOutput attention_bounded(const attncheck_problem& p, const float* q, const float* k, const float* v) {
    const std::size_t B = std::size_t(p.batch), H = std::size_t(p.heads), Tq = std::size_t(p.q_len),
                      Tk = std::size_t(p.kv_len), Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    BoundedOutput r;
    r.value.resize(B * H * Tq * Dv);
    r.bound.resize(B * H * Tq * Dv);
    BoundedMatrix qh(Tq, Dk), kh(Tk, Dk), vh(Tk, Dv);
    for (std::size_t b = 0; b < B; ++b) {
        const std::int64_t valid = p.kv_valid_len ? std::int64_t(p.kv_valid_len[b]) : std::int64_t(Tk);
        for (std::size_t h = 0; h < H; ++h) {
            const std::size_t bh = b * H + h;
            std::copy(q + bh * Tq * Dk, q + (bh + 1) * Tq * Dk, qh.value.begin());
            std::copy(k + bh * Tk * Dk, k + (bh + 1) * Tk * Dk, kh.value.begin());
            std::copy(v + bh * Tk * Dv, v + (bh + 1) * Tk * Dv, vh.value.begin());
            const BoundedMatrix o = attend_head_bounded(qh, kh, vh, p.q_offset, p.causal != 0, valid, double(p.scale));
            std::copy(o.value.begin(), o.value.end(), r.value.begin() + std::ptrdiff_t(bh * Tq * Dv));
            std::copy(o.bound.begin(), o.bound.end(), r.bound.begin() + std::ptrdiff_t(bh * Tq * Dv));
        }
    }
    return r;
}

// ---- the decoder ----------------------------------------------------------------------------

namespace {

// §decoder 1: x[t] = embed[token_t] * s + pos[t] (no pos with rope).
//   s = sqrt(d) rounded (u) times embed (u): 2u |embed s|; learned positions are exact;
//   sinusoidal ones, sin/cos of angle a = t / 10000^(2i/d): the angle in float32 errs by
//   4u |a| (the frequency from pow/exp, the product), sin/cos a few ulps and the rounding
//   to float32: 4u |a| + 3u |pos|; the sum: u (|x| + bounds).
BoundedMatrix bounded_embedding(const Model& model, const std::vector<int>& tokens) {
    const ModelConfig& c = model.config;
    const std::size_t n = tokens.size(), d = std::size_t(c.d_model);
    const Tensor& embed = model.at("embed.weight");
    const Tensor* learned_pos = c.positional == Positional::learned ? &model.at("pos.weight") : nullptr;
    const double s = c.embed_scale_sqrt_d ? std::sqrt(double(c.d_model)) : 1.0;
    BoundedMatrix x(n, d);
    for (std::size_t t = 0; t < n; ++t)
        for (std::size_t col = 0; col < d; ++col) {
            const double es = double(embed.data[std::size_t(tokens[t]) * d + col]) * s;
            double pos = 0, e_pos = 0;
            if (learned_pos) {
                pos = double(learned_pos->data[t * d + col]);
            } else if (c.positional == Positional::sinusoidal) {
                const std::size_t even = col - col % 2;
                const double angle = double(t) / std::pow(10000.0, double(even) / double(d));
                pos = col % 2 == 0 ? std::sin(angle) : std::cos(angle);
                e_pos = u * (4.0 * angle + 3.0 * std::abs(pos));
            }
            const double e_in = (c.embed_scale_sqrt_d ? 2.0 * u * std::abs(es) : 0.0) + e_pos;
            x.x(t, col) = es + pos;
            x.e(t, col) = e_in + u * (std::abs(es + pos) + e_in);
        }
    return x;
}

// Rotary positions (MODEL.md "Version 2 additions") on every head of x [T, heads*dk], row t at
// position t: (x_i, x_j) -> (x_i c - x_j s, x_i s + x_j c), j = i + dk/2, c, s = cos, sin of
// a = t theta^(-2i/dk). A float32 decoder may compute the angle in float32 (4u |a|: the
// frequency from pow/exp, the product) and cos/sin to a few ulps and round them (3u): each of
// c, s errs by at most 4u |a| + 3u; then two products and a sum: 3u (|x_i c| + |x_j s|). With
// the inputs' bounds e_i, e_j:
//   e' <= |c| e_i + |s| e_j + (|x_i| + e_i + |x_j| + e_j)(4u |a| + 3u) + 3u (|x_i c| + |x_j s|).
BoundedMatrix bounded_rope(const BoundedMatrix& x, std::size_t dk, double theta) {
    const std::size_t half = dk / 2;
    BoundedMatrix y = x;
    for (std::size_t t = 0; t < x.rows; ++t)
        for (std::size_t head = 0; head < x.cols / dk; ++head)
            for (std::size_t i = 0; i < half; ++i) {
                const std::size_t a = head * dk + i, b = a + half;
                const double angle = double(t) * std::pow(theta, -double(2 * i) / double(dk));
                const double c = std::cos(angle), s = std::sin(angle);
                const double xa = x.x(t, a), xb = x.x(t, b), ea = x.e(t, a), eb = x.e(t, b);
                const double trig = 4.0 * u * angle + 3.0 * u;
                const double common = (std::abs(xa) + ea + std::abs(xb) + eb) * trig;
                y.x(t, a) = xa * c - xb * s;
                y.x(t, b) = xa * s + xb * c;
                y.e(t, a) = std::abs(c) * ea + std::abs(s) * eb + common + 3.0 * u * (std::abs(xa * c) + std::abs(xb * s));
                y.e(t, b) = std::abs(s) * ea + std::abs(c) * eb + common + 3.0 * u * (std::abs(xa * s) + std::abs(xb * c));
            }
    return y;
}

// Rows first .. last of m.
BoundedMatrix rows_of(const BoundedMatrix& m, std::size_t first, std::size_t last) {
    BoundedMatrix r(last - first + 1, m.cols);
    std::copy(m.value.begin() + std::ptrdiff_t(first * m.cols), m.value.begin() + std::ptrdiff_t((last + 1) * m.cols),
              r.value.begin());
    std::copy(m.bound.begin() + std::ptrdiff_t(first * m.cols), m.bound.begin() + std::ptrdiff_t((last + 1) * m.cols),
              r.bound.begin());
    return r;
}

// Multi-head attention (MODEL.md §layer 1-3) of `in` over `src` with the weights under
// `prefix` ("layers.0.self_attn."). The kernel receives scale = 1/sqrt(dk) rounded to float32
// (relative error u at most, after a float32 sqrt and division 3u). Self-attention (is_self)
// has the version 2 additions: query head j reads kv head j / (h / hkv) (which keys a row sees,
// no new rounding), the window (row i attends to keys max(0, i - w) .. i alone: masked keys
// change no sum) and rope (bounded_rope on q and k).
BoundedMatrix bounded_attention(const Model& model, const BoundedMatrix& in, const BoundedMatrix& src,
                                const std::string& prefix, bool causal, std::size_t valid_len, bool is_self) {
    const ModelConfig& c = model.config;
    const std::size_t d = std::size_t(c.d_model), h = std::size_t(c.n_heads), dk = std::size_t(c.head_dim());
    const std::size_t group = is_self ? std::size_t(c.group_size()) : 1;
    const int window = is_self ? c.attn_window : -1;
    auto param = [&](const std::string& name) -> const Tensor& { return model.at(prefix + name); };
    BoundedMatrix Q = linear(in, param("q.weight"), &param("q.bias"));
    BoundedMatrix K = linear(src, param("k.weight"), &param("k.bias"));
    const BoundedMatrix Vv = linear(src, param("v.weight"), &param("v.bias"));
    if (is_self && c.positional == Positional::rope) {
        Q = bounded_rope(Q, dk, c.rope_theta);
        K = bounded_rope(K, dk, c.rope_theta);
    }
    const double scale = 1.0 / std::sqrt(double(dk));
    BoundedMatrix O(in.rows, d);
    for (std::size_t head = 0; head < h; ++head) {
        const std::size_t kv = head / group;
        const BoundedMatrix Qh = columns(Q, head * dk, dk), Kh = columns(K, kv * dk, dk), Vh = columns(Vv, kv * dk, dk);
        BoundedMatrix Oh;
        if (window < 0) {
            Oh = attend_head_bounded(Qh, Kh, Vh, 0, causal, std::int64_t(valid_len), scale, 3.0 * u);
        } else {
            Oh = BoundedMatrix(in.rows, dk);
            for (std::size_t i = 0; i < in.rows; ++i) {
                const std::size_t first = i > std::size_t(window) ? i - std::size_t(window) : 0;
                const BoundedMatrix Oi = attend_head_bounded(rows_of(Qh, i, i), rows_of(Kh, first, i), rows_of(Vh, first, i),
                                                             std::int64_t(i - first), true, std::int64_t(i - first + 1),
                                                             scale, 3.0 * u);
                for (std::size_t col = 0; col < dk; ++col) {
                    Oh.x(i, col) = Oi.x(0, col);
                    Oh.e(i, col) = Oi.e(0, col);
                }
            }
        }
        for (std::size_t r = 0; r < in.rows; ++r)
            for (std::size_t col = 0; col < dk; ++col) {
                O.x(r, head * dk + col) = Oh.x(r, col);
                O.e(r, head * dk + col) = Oh.e(r, col);
            }
    }
    return linear(O, param("o.weight"), &param("o.bias"));
}

}  // namespace

DecoderBound::DecoderBound(const Model& m) : model_(m) { m.validate(); }

BoundedOutput DecoderBound::forward(const std::vector<int>& tokens, const std::optional<Memory>& memory) const {
    const ModelConfig& c = model_.config;
    check_tokens(c, tokens);
    check_memory(c, memory);
    const std::size_t n = tokens.size(), d = std::size_t(c.d_model);
    BoundedMatrix x = bounded_embedding(model_, tokens);

    BoundedMatrix mem;
    std::size_t mem_valid = 0;
    if (c.cross_attention) {
        mem = BoundedMatrix(std::size_t(memory->rows), d);
        std::copy(memory->data.begin(), memory->data.end(), mem.value.begin());  // float32: exact
        mem_valid = std::size_t(memory->valid_len);
    }

    auto param = [&](const std::string& name) -> const Tensor& { return model_.at(name); };
    auto norm = [&](const BoundedMatrix& in, const std::string& prefix) {
        return layer_norm(in, model_.at(prefix + "weight").data, model_.at(prefix + "bias").data, c.ln_eps);
    };
    auto feed_forward = [&](const BoundedMatrix& in, const std::string& prefix) {
        BoundedMatrix hidden = linear(in, param(prefix + "fc1.weight"), &param(prefix + "fc1.bias"));
        activate(c.activation, hidden);
        return linear(hidden, param(prefix + "fc2.weight"), &param(prefix + "fc2.bias"));
    };

    // §decoder 2: post: x = LN(x + F(x)); pre: x = x + F(LN(x)).
    const bool pre = c.norm == Norm::pre;
    auto sublayer = [&](const std::string& ln, auto&& F) {
        if (pre) {
            x = add(x, F(norm(x, ln)));
        } else {
            x = norm(add(x, F(x)), ln);
        }
    };
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        sublayer(p + "norm_self.", [&](const BoundedMatrix& in) {
            return bounded_attention(model_, in, in, p + "self_attn.", /*causal=*/true, n, /*is_self=*/true);
        });
        if (c.cross_attention)
            sublayer(p + "norm_cross.", [&](const BoundedMatrix& in) {
                return bounded_attention(model_, in, mem, p + "cross_attn.", /*causal=*/false, mem_valid, /*is_self=*/false);
            });
        sublayer(p + "norm_ffn.", [&](const BoundedMatrix& in) { return feed_forward(in, p + "ffn."); });
    }
    if (pre) x = norm(x, "final_norm.");

    // §decoder 3: logits = x lm_head^T.
    const BoundedMatrix logits = linear(x, model_.lm_head(), nullptr);
    return {logits.value, logits.bound};
}

}  // namespace attncheck::reference
