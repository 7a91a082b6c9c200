// reference/decoder_grad.cpp — the decoder's loss and its gradients in float64
// (reference/decoder_grad.hpp). Plain loops, one function per layer kind with its forward and its
// backward next to each other; every tensor's shape is in a comment where it is made.
#include "reference/decoder_grad.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "attncheck/error.hpp"
#include "model/positions.hpp"

namespace attncheck::reference {
namespace {

using Vec = std::vector<double>;

// ---- linear: y = x W^T + b (MODEL.md §Shapes) -------------------------------------------------

//   x [n, in], W [out, in], b [out] -> y [n, out]
Vec linear_forward(const Vec& x, const Vec& W, const Vec* b, std::size_t n, std::size_t in, std::size_t out) {
    Vec y(n * out);
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            double acc = b ? (*b)[o] : 0.0;
            for (std::size_t c = 0; c < in; ++c) acc += x[r * in + c] * W[o * in + c];
            y[r * out + o] = acc;
        }
    return y;
}

// Given dy [n, out]: dx += dy W [n, in] (when dx is given), dW += dy^T x [out, in], db += the
// column sums of dy [out] (when db is given).
void linear_backward(const Vec& dy, const Vec& x, const Vec& W, Vec* dx, Vec& dW, Vec* db, std::size_t n,
                     std::size_t in, std::size_t out) {
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            const double g = dy[r * out + o];
            if (g == 0) continue;
            if (db) (*db)[o] += g;
            for (std::size_t c = 0; c < in; ++c) {
                dW[o * in + c] += g * x[r * in + c];
                if (dx) (*dx)[r * in + c] += g * W[o * in + c];
            }
        }
}

// ---- LayerNorm (biased variance, MODEL.md §layer) ---------------------------------------------

struct NormCache {
    Vec xhat;  // [n, d]: (x - mean) / sqrt(var + eps)
    Vec rstd;  // [n]:    1 / sqrt(var + eps)
};

//   x [n, d] -> y [n, d] = xhat * w + b
Vec norm_forward(const Vec& x, const Vec& w, const Vec& b, double eps, std::size_t n, std::size_t d, NormCache& cache) {
    Vec y(n * d);
    cache.xhat.assign(n * d, 0.0);
    cache.rstd.assign(n, 0.0);
    for (std::size_t r = 0; r < n; ++r) {
        double mean = 0;
        for (std::size_t c = 0; c < d; ++c) mean += x[r * d + c];
        mean /= double(d);
        double var = 0;
        for (std::size_t c = 0; c < d; ++c) var += (x[r * d + c] - mean) * (x[r * d + c] - mean);
        var /= double(d);
        const double rstd = 1.0 / std::sqrt(var + eps);
        cache.rstd[r] = rstd;
        for (std::size_t c = 0; c < d; ++c) {
            const double xh = (x[r * d + c] - mean) * rstd;
            cache.xhat[r * d + c] = xh;
            y[r * d + c] = xh * w[c] + b[c];
        }
    }
    return y;
}

// Given dy [n, d]: dw += sum_r dy * xhat, db += sum_r dy, and dx += (with g = dy * w)
//   rstd * (g - mean(g) - xhat * mean(g * xhat))      per row
// (the mean term is the gradient through the mean, the last through the variance).
void norm_backward(const Vec& dy, const NormCache& cache, const Vec& w, std::size_t n, std::size_t d, Vec& dx, Vec& dw,
                   Vec& db, GradBug bug) {
    for (std::size_t r = 0; r < n; ++r) {
        double mean_g = 0, mean_gx = 0;
        for (std::size_t c = 0; c < d; ++c) {
            const double g = dy[r * d + c] * w[c];
            mean_g += g;
            mean_gx += g * cache.xhat[r * d + c];
        }
        mean_g /= double(d);
        mean_gx /= double(d);
        if (bug == GradBug::layer_norm_mean_dropped) mean_g = 0;
        for (std::size_t c = 0; c < d; ++c) {
            const double xh = cache.xhat[r * d + c], g = dy[r * d + c] * w[c];
            dw[c] += dy[r * d + c] * xh;
            db[c] += dy[r * d + c];
            dx[r * d + c] += cache.rstd[r] * (g - mean_g - xh * mean_gx);
        }
    }
}

// ---- the feed-forward activation and its derivative --------------------------------------------

double activate(Activation a, double x) {
    switch (a) {
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::gelu: return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
        case Activation::gelu_tanh:
            return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    }
    return x;
}

double activate_grad(Activation a, double x) {
    switch (a) {
        case Activation::relu: return x > 0 ? 1 : 0;
        case Activation::gelu:  // Phi(x) + x phi(x)
            return 0.5 * (1 + std::erf(x / std::numbers::sqrt2)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
        case Activation::gelu_tanh: {
            const double k = std::sqrt(2 / std::numbers::pi), t = std::tanh(k * (x + 0.044715 * x * x * x));
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
        }
    }
    return 1;
}

// ---- multi-head self-attention (MODEL.md §layer steps 1-3) ------------------------------------

struct Dims {
    std::size_t T, d, h, dk, f, V;
};

struct AttentionCache {
    Vec a;        // [T, d] the input
    Vec Q, K, V;  // [T, d] each
    Vec P;        // [h, T, T] the probabilities (0 where masked)
    Vec O;        // [T, d] the heads' outputs, concatenated
};

bool visible(TrainMask mask, std::size_t i, std::size_t t) { return mask == TrainMask::none || t <= i; }

// P [h, T, T] of Q and K: per head and row, softmax of the scaled scores over the visible keys.
Vec attention_probs(const Vec& Q, const Vec& K, const Dims& s, TrainMask mask) {
    const double scale = 1.0 / std::sqrt(double(s.dk));
    Vec P(s.h * s.T * s.T, 0.0);
    for (std::size_t j = 0; j < s.h; ++j)
        for (std::size_t i = 0; i < s.T; ++i) {
            double* row = &P[(j * s.T + i) * s.T];
            double mx = -INFINITY;
            for (std::size_t t = 0; t < s.T; ++t) {
                if (!visible(mask, i, t)) continue;
                double dot = 0;
                for (std::size_t c = 0; c < s.dk; ++c) dot += Q[i * s.d + j * s.dk + c] * K[t * s.d + j * s.dk + c];
                row[t] = dot * scale;
                mx = std::max(mx, row[t]);
            }
            double sum = 0;
            for (std::size_t t = 0; t < s.T; ++t)
                if (visible(mask, i, t)) sum += row[t] = std::exp(row[t] - mx);
            for (std::size_t t = 0; t < s.T; ++t) row[t] = visible(mask, i, t) ? row[t] / sum : 0.0;
        }
    return P;
}

//   a [T, d] -> y [T, d]; prefix "layers.l.self_attn."
Vec attention_forward(const Vec& a, const Params& p, const std::string& prefix, const Dims& s, TrainMask mask,
                      AttentionCache& c) {
    c.a = a;
    c.Q = linear_forward(a, p.at(prefix + "q.weight"), &p.at(prefix + "q.bias"), s.T, s.d, s.d);
    c.K = linear_forward(a, p.at(prefix + "k.weight"), &p.at(prefix + "k.bias"), s.T, s.d, s.d);
    c.V = linear_forward(a, p.at(prefix + "v.weight"), &p.at(prefix + "v.bias"), s.T, s.d, s.d);
    c.P = attention_probs(c.Q, c.K, s, mask);
    c.O.assign(s.T * s.d, 0.0);
    for (std::size_t j = 0; j < s.h; ++j)
        for (std::size_t i = 0; i < s.T; ++i)
            for (std::size_t t = 0; t < s.T; ++t) {
                const double pr = c.P[(j * s.T + i) * s.T + t];
                if (pr == 0) continue;
                for (std::size_t col = 0; col < s.dk; ++col) c.O[i * s.d + j * s.dk + col] += pr * c.V[t * s.d + j * s.dk + col];
            }
    return linear_forward(c.O, p.at(prefix + "o.weight"), &p.at(prefix + "o.bias"), s.T, s.d, s.d);
}

// Given dy [T, d]: the weights' gradients into g, the input's into da (+=). Per head, with
// S the scaled scores and dO the gradient of O:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = dS K / sqrt(dk),  dK = dS^T Q / sqrt(dk)
void attention_backward(const Vec& dy, const AttentionCache& c, const Params& p, Params& g, const std::string& prefix,
                        const Dims& s, GradBug bug, Vec& da) {
    const double scale = 1.0 / std::sqrt(double(s.dk));
    Vec dO(s.T * s.d, 0.0);
    linear_backward(dy, c.O, p.at(prefix + "o.weight"), &dO, g.at(prefix + "o.weight"), &g.at(prefix + "o.bias"), s.T, s.d, s.d);
    // The planted bug: probabilities recomputed without the mask for the backward.
    const Vec P = bug == GradBug::mask_ignored_in_backward ? attention_probs(c.Q, c.K, s, TrainMask::none) : c.P;
    Vec dQ(s.T * s.d, 0.0), dK(s.T * s.d, 0.0), dV(s.T * s.d, 0.0), dP(s.T);
    for (std::size_t j = 0; j < s.h; ++j)
        for (std::size_t i = 0; i < s.T; ++i) {
            const double* Pi = &P[(j * s.T + i) * s.T];
            const double* dOi = &dO[i * s.d + j * s.dk];
            double rowsum = 0;
            for (std::size_t t = 0; t < s.T; ++t) {
                double acc = 0;
                for (std::size_t col = 0; col < s.dk; ++col) {
                    acc += dOi[col] * c.V[t * s.d + j * s.dk + col];
                    dV[t * s.d + j * s.dk + col] += Pi[t] * dOi[col];
                }
                dP[t] = acc;
                rowsum += Pi[t] * acc;
            }
            if (bug == GradBug::softmax_rowsum_dropped) rowsum = 0;
            for (std::size_t t = 0; t < s.T; ++t) {
                const double dS = Pi[t] * (dP[t] - rowsum) * scale;
                if (dS == 0) continue;
                for (std::size_t col = 0; col < s.dk; ++col) {
                    dQ[i * s.d + j * s.dk + col] += dS * c.K[t * s.d + j * s.dk + col];
                    dK[t * s.d + j * s.dk + col] += dS * c.Q[i * s.d + j * s.dk + col];
                }
            }
        }
    for (const char* w : {"q.", "k.", "v."}) {
        const Vec& dW = w[0] == 'q' ? dQ : w[0] == 'k' ? dK : dV;
        const std::string name = prefix + w;
        linear_backward(dW, c.a, p.at(name + "weight"), &da, g.at(name + "weight"), &g.at(name + "bias"), s.T, s.d, s.d);
    }
}

// ---- feed-forward (MODEL.md §layer "Feed-forward") --------------------------------------------

struct FfnCache {
    Vec a;     // [T, d] the input
    Vec pre;   // [T, f] a W1^T + b1
    Vec post;  // [T, f] act(pre)
};

Vec ffn_forward(const Vec& a, const Params& p, const std::string& prefix, const Dims& s, Activation act, FfnCache& c) {
    c.a = a;
    c.pre = linear_forward(a, p.at(prefix + "fc1.weight"), &p.at(prefix + "fc1.bias"), s.T, s.d, s.f);
    c.post.resize(c.pre.size());
    for (std::size_t i = 0; i < c.pre.size(); ++i) c.post[i] = activate(act, c.pre[i]);
    return linear_forward(c.post, p.at(prefix + "fc2.weight"), &p.at(prefix + "fc2.bias"), s.T, s.f, s.d);
}

void ffn_backward(const Vec& dy, const FfnCache& c, const Params& p, Params& g, const std::string& prefix, const Dims& s,
                  Activation act, Vec& da) {
    Vec dpost(s.T * s.f, 0.0);
    linear_backward(dy, c.post, p.at(prefix + "fc2.weight"), &dpost, g.at(prefix + "fc2.weight"), &g.at(prefix + "fc2.bias"),
                    s.T, s.f, s.d);
    for (std::size_t i = 0; i < dpost.size(); ++i) dpost[i] *= activate_grad(act, c.pre[i]);
    linear_backward(dpost, c.a, p.at(prefix + "fc1.weight"), &da, g.at(prefix + "fc1.weight"), &g.at(prefix + "fc1.bias"),
                    s.T, s.d, s.f);
}

// ---- the whole decoder -----------------------------------------------------------------------

// A sublayer F with its LayerNorm, wired post (x = LN(x + F(x))) or pre (x = x + F(LN(x))).
struct SublayerCache {
    NormCache norm;  // of x + F(x) (post) or of x (pre)
};
struct LayerCache {
    SublayerCache attn_sub, ffn_sub;
    AttentionCache attn;
    FfnCache ffn;
};
struct ForwardCache {
    std::vector<LayerCache> layers;
    NormCache final_norm;  // pre-norm only
    Vec xf;                // [T, d] the lm head's input
};

Dims dims_of(const ModelConfig& c, std::size_t T) {
    return {T, std::size_t(c.d_model), std::size_t(c.n_heads), std::size_t(c.head_dim()), std::size_t(c.d_ff),
            std::size_t(c.vocab_size)};
}

const Vec& lm_head(const ModelConfig& c, const Params& p) {
    return p.at(c.tie_embeddings ? "embed.weight" : "lm_head.weight");
}

// MODEL.md §The whole decoder, with self-attention under `mask`.          -> logits [T, V]
Vec forward(const ModelConfig& c, const Params& p, const std::vector<int>& tokens, TrainMask mask, ForwardCache& cache) {
    const Dims s = dims_of(c, tokens.size());
    const double scale = c.embed_scale_sqrt_d ? std::sqrt(double(c.d_model)) : 1.0;
    const Vec table = c.positional == Positional::sinusoidal ? sinusoidal_positions(s.T, s.d) : Vec{};
    const Vec& pos = c.positional == Positional::learned ? p.at("pos.weight") : table;
    Vec x(s.T * s.d);  // [T, d]: §decoder 1
    for (std::size_t t = 0; t < s.T; ++t)
        for (std::size_t col = 0; col < s.d; ++col)
            x[t * s.d + col] = p.at("embed.weight")[std::size_t(tokens[t]) * s.d + col] * scale + pos[t * s.d + col];
    const bool pre = c.norm == Norm::pre;
    const double eps = c.ln_eps;
    cache.layers.assign(std::size_t(c.n_layers), {});
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string prefix = "layers." + std::to_string(l) + ".";
        LayerCache& lc = cache.layers[std::size_t(l)];
        const auto sublayer = [&](const std::string& norm, SublayerCache& sc, auto&& F) {
            const Vec& w = p.at(prefix + norm + ".weight");
            const Vec& b = p.at(prefix + norm + ".bias");
            if (pre) {
                const Vec y = F(norm_forward(x, w, b, eps, s.T, s.d, sc.norm));
                for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
            } else {
                Vec z = F(x);
                for (std::size_t i = 0; i < x.size(); ++i) z[i] += x[i];
                x = norm_forward(z, w, b, eps, s.T, s.d, sc.norm);
            }
        };
        sublayer("norm_self", lc.attn_sub,
                 [&](const Vec& a) { return attention_forward(a, p, prefix + "self_attn.", s, mask, lc.attn); });
        sublayer("norm_ffn", lc.ffn_sub, [&](const Vec& a) { return ffn_forward(a, p, prefix + "ffn.", s, c.activation, lc.ffn); });
    }
    cache.xf = pre ? norm_forward(x, p.at("final_norm.weight"), p.at("final_norm.bias"), eps, s.T, s.d, cache.final_norm) : x;
    return linear_forward(cache.xf, lm_head(c, p), nullptr, s.T, s.d, s.V);  // §decoder 3
}

// The backward of forward(): dlogits [T, V] -> every parameter's gradient, added to g.
void backward(const ModelConfig& c, const Params& p, const std::vector<int>& tokens, GradBug bug,
              const ForwardCache& cache, const Vec& dlogits, Params& g) {
    const Dims s = dims_of(c, tokens.size());
    const bool pre = c.norm == Norm::pre;
    // logits = xf lm^T: the lm head's gradient (the embedding's, when tied), and xf's.
    Vec dhead(s.V * s.d, 0.0);
    Vec dx(s.T * s.d, 0.0);
    linear_backward(dlogits, cache.xf, lm_head(c, p), &dx, dhead, nullptr, s.T, s.d, s.V);
    if (!(c.tie_embeddings && bug == GradBug::tied_embedding_once)) {
        Vec& gh = g.at(c.tie_embeddings ? "embed.weight" : "lm_head.weight");
        for (std::size_t i = 0; i < gh.size(); ++i) gh[i] += dhead[i];
    }
    if (pre) {
        Vec dx_in(s.T * s.d, 0.0);
        norm_backward(dx, cache.final_norm, p.at("final_norm.weight"), s.T, s.d, dx_in, g.at("final_norm.weight"),
                      g.at("final_norm.bias"), bug);
        dx = std::move(dx_in);
    }
    for (int l = c.n_layers - 1; l >= 0; --l) {
        const std::string prefix = "layers." + std::to_string(l) + ".";
        const LayerCache& lc = cache.layers[std::size_t(l)];
        // The sublayers in reverse: dx is the gradient of the sublayer's output; it becomes the
        // gradient of its input. The residual carries dx (pre) or dz (post) straight through.
        const auto sublayer = [&](const std::string& norm, const SublayerCache& sc, bool first, auto&& F_backward) {
            const Vec& w = p.at(prefix + norm + ".weight");
            Vec& gw = g.at(prefix + norm + ".weight");
            Vec& gb = g.at(prefix + norm + ".bias");
            const bool keep_residual = !(first && bug == GradBug::residual_dropped);
            Vec dx_in(s.T * s.d, 0.0);
            if (pre) {
                Vec du(s.T * s.d, 0.0);
                F_backward(dx, du);  // y = F(u), u = LN(x): du
                norm_backward(du, sc.norm, w, s.T, s.d, dx_in, gw, gb, bug);
                if (keep_residual)
                    for (std::size_t i = 0; i < dx.size(); ++i) dx_in[i] += dx[i];
            } else {
                Vec dz(s.T * s.d, 0.0);
                norm_backward(dx, sc.norm, w, s.T, s.d, dz, gw, gb, bug);  // x' = LN(z), z = x + F(x)
                F_backward(dz, dx_in);
                if (keep_residual)
                    for (std::size_t i = 0; i < dz.size(); ++i) dx_in[i] += dz[i];
            }
            dx = std::move(dx_in);
        };
        sublayer("norm_ffn", lc.ffn_sub, false,
                 [&](const Vec& dy, Vec& da) { ffn_backward(dy, lc.ffn, p, g, prefix + "ffn.", s, c.activation, da); });
        sublayer("norm_self", lc.attn_sub, true, [&](const Vec& dy, Vec& da) {
            attention_backward(dy, lc.attn, p, g, prefix + "self_attn.", s, bug, da);
        });
    }
    // x[t] = embed[token_t] * scale + pos[t].
    const double scale = c.embed_scale_sqrt_d ? std::sqrt(double(c.d_model)) : 1.0;
    Vec& ge = g.at("embed.weight");
    for (std::size_t t = 0; t < s.T; ++t)
        for (std::size_t col = 0; col < s.d; ++col) ge[std::size_t(tokens[t]) * s.d + col] += scale * dx[t * s.d + col];
    if (c.positional == Positional::learned) {
        Vec& gp = g.at("pos.weight");
        const std::size_t N = std::size_t(c.max_len);
        for (std::size_t t = 0; t < s.T; ++t) {
            const std::size_t to = bug == GradBug::position_shifted ? std::min(t + 1, N - 1) : t;
            for (std::size_t col = 0; col < s.d; ++col) gp[to * s.d + col] += dx[t * s.d + col];
        }
    }
}

// The tokens through check_tokens (model/tokens.cpp, as every decoder checks them), then what a
// training sequence needs besides: something to predict and one weight per predicted token.
void check_sequence(const ModelConfig& c, const Sequence& q, std::size_t index) {
    const std::string at = "sequence " + std::to_string(index) + ": ";
    if (q.tokens.size() < 2) throw InputError(at + "fewer than 2 tokens (nothing to predict)");
    try {
        check_tokens(c, q.tokens);
    } catch (const InputError& e) {
        throw InputError(at + e.what());
    }
    if (q.weights.size() != q.tokens.size() - 1)
        throw InputError(at + std::to_string(q.weights.size()) + " weights for " + std::to_string(q.tokens.size()) +
                         " tokens (one per predicted token: T - 1)");
    for (const double w : q.weights)
        if (!(w >= 0) || !std::isfinite(w)) throw InputError(at + "a weight that is negative or not finite");
}

}  // namespace

const char* to_string(TrainMask m) { return m == TrainMask::causal ? "causal" : "none"; }

const char* to_string(GradBug b) {
    switch (b) {
        case GradBug::none: return "none";
        case GradBug::layer_norm_mean_dropped: return "layer_norm_mean_dropped";
        case GradBug::tied_embedding_once: return "tied_embedding_once";
        case GradBug::position_shifted: return "position_shifted";
        case GradBug::softmax_rowsum_dropped: return "softmax_rowsum_dropped";
        case GradBug::residual_dropped: return "residual_dropped";
        case GradBug::mask_ignored_in_backward: return "mask_ignored_in_backward";
        case GradBug::loss_not_normalised: return "loss_not_normalised";
    }
    return "?";
}

std::vector<GradBug> all_grad_bugs() {
    return {GradBug::layer_norm_mean_dropped, GradBug::tied_embedding_once,    GradBug::position_shifted,
            GradBug::softmax_rowsum_dropped,  GradBug::residual_dropped,       GradBug::mask_ignored_in_backward,
            GradBug::loss_not_normalised};
}

Params Params::from_model(const Model& m) {
    Params p;
    for (const TensorSpec& spec : expected_tensors(m.config)) {
        const Tensor& t = m.at(spec.name);
        p.values[spec.name] = Vec(t.data.begin(), t.data.end());
        p.shapes[spec.name] = spec.shape;
    }
    return p;
}

Params Params::zeros_like() const {
    Params z;
    z.shapes = shapes;
    for (const auto& [name, v] : values) z.values[name] = Vec(v.size(), 0.0);
    return z;
}

Model Params::to_model(const ModelConfig& c) const {
    Model m;
    m.config = c;
    for (const auto& [name, v] : values) {
        Tensor t;
        t.shape = shapes.at(name);
        t.data.assign(v.begin(), v.end());
        m.tensors[name] = std::move(t);
    }
    m.validate();
    return m;
}

std::vector<double>& Params::at(const std::string& name) {
    const auto it = values.find(name);
    if (it == values.end()) throw InputError("no parameter " + name);
    return it->second;
}

const std::vector<double>& Params::at(const std::string& name) const {
    const auto it = values.find(name);
    if (it == values.end()) throw InputError("no parameter " + name);
    return it->second;
}

std::size_t Params::count() const {
    std::size_t n = 0;
    for (const auto& [name, v] : values) n += v.size();
    return n;
}

void check_trainable(const ModelConfig& c) {
    c.validate();
    if (c.cross_attention) throw InputError("training: cross_attention=true is not supported yet (decoder-only models)");
    if (c.n_kv_heads != 0 && c.n_kv_heads != c.n_heads)
        throw InputError("training: grouped-query heads (n_kv_heads) are not supported yet");
    if (c.has_window()) throw InputError("training: attn_window is not supported yet");
    if (c.positional == Positional::rope) throw InputError("training: positional=rope is not supported yet");
}

std::vector<double> decoder_logits(const ModelConfig& c, const Params& p, const std::vector<int>& tokens, TrainMask mask) {
    check_trainable(c);
    check_tokens(c, tokens);
    ForwardCache cache;
    return forward(c, p, tokens, mask, cache);
}

double check_batch(const ModelConfig& c, const std::vector<Sequence>& batch) {
    check_trainable(c);
    if (batch.empty()) throw InputError("an empty batch");
    double total_weight = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        check_sequence(c, batch[i], i);
        for (const double w : batch[i].weights) total_weight += w;
    }
    if (!(total_weight > 0)) throw InputError("every weight of the batch is 0: no position to learn from");
    return total_weight;
}

double decoder_loss(const ModelConfig& c, const Params& p, const std::vector<Sequence>& batch, const LossOptions& o,
                    Params* grad) {
    const double total_weight = check_batch(c, batch);
    if (grad) *grad = p.zeros_like();
    const std::size_t V = std::size_t(c.vocab_size);
    double loss = 0;
    for (const Sequence& q : batch) {
        ForwardCache cache;
        const Vec logits = forward(c, p, q.tokens, o.mask, cache);  // [T, V]
        const std::size_t T = q.tokens.size();
        Vec dlogits(T * V, 0.0);
        for (std::size_t t = 0; t + 1 < T; ++t) {
            const double w = q.weights[t];
            if (w == 0) continue;
            const double* row = &logits[t * V];
            const double mx = *std::max_element(row, row + V);
            double sum = 0;
            for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
            const std::size_t target = std::size_t(q.tokens[t + 1]);
            loss += w * (mx + std::log(sum) - row[target]);
            // d(-log softmax[target]) / dlogits = softmax - onehot(target), times w / W.
            const double norm = o.bug == GradBug::loss_not_normalised ? w : w / total_weight;
            for (std::size_t v = 0; v < V; ++v)
                dlogits[t * V + v] = norm * (std::exp(row[v] - mx) / sum - (v == target ? 1.0 : 0.0));
        }
        if (grad) backward(c, p, q.tokens, o.bug, cache, dlogits, *grad);
    }
    return loss / total_weight;
}

double AdamW::step(Params& p, const Params& g) {
    if (step_count == 0) {
        m = p.zeros_like();
        v = p.zeros_like();
    }
    ++step_count;
    double sq = 0;
    for (const auto& [name, gv] : g.values)
        for (const double x : gv) sq += x * x;
    const double norm = std::sqrt(sq);
    const double clip = clip_norm > 0 && norm > clip_norm ? clip_norm / (norm + 1e-6) : 1.0;
    const double c1 = 1 - std::pow(beta1, double(step_count)), c2 = 1 - std::pow(beta2, double(step_count));
    for (auto& [name, pv] : p.values) {
        const Vec& gv = g.at(name);
        Vec& mv = m.at(name);
        Vec& vv = v.at(name);
        // Decay on the matrices (embeddings, projections, the lm head), not on biases, LayerNorm
        // weights or positions.
        const bool decay = p.shapes.at(name).size() == 2 && name != "pos.weight";
        for (std::size_t i = 0; i < pv.size(); ++i) {
            const double gi = gv[i] * clip;
            mv[i] = beta1 * mv[i] + (1 - beta1) * gi;
            vv[i] = beta2 * vv[i] + (1 - beta2) * gi * gi;
            if (decay) pv[i] *= 1 - lr * weight_decay;
            pv[i] -= lr * (mv[i] / c1) / (std::sqrt(vv[i] / c2) + eps);
        }
    }
    return norm;
}

}  // namespace attncheck::reference
