// reference/decoder_grad.cpp — the decoder's loss and its gradients in float64
// (reference/decoder_grad.hpp). Plain loops, one function per layer kind with its forward and its
// backward next to each other; every tensor's shape is in a comment where it is made. The two
// attentions (self and cross) are in reference/decoder_grad_attention.cpp.
#include "reference/decoder_grad.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "attncheck/error.hpp"
#include "model/positions.hpp"
#include "reference/decoder_grad_internal.hpp"

namespace attncheck::reference {
namespace grad_detail {

// ---- linear: y = x W^T + b (MODEL.md §Shapes) -------------------------------------------------

Vec linear_forward(const Vec& x, const Vec& W, const Vec* b, std::size_t n, std::size_t in, std::size_t out) {
    Vec y(n * out);  // [n, out]
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            double acc = b ? (*b)[o] : 0.0;
            for (std::size_t c = 0; c < in; ++c) acc += x[r * in + c] * W[o * in + c];
            y[r * out + o] = acc;
        }
    return y;
}

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

}  // namespace grad_detail

namespace {

using namespace grad_detail;

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
    SublayerCache self_sub, cross_sub, ffn_sub;  // cross_sub: with cross-attention only
    AttentionCache self_attn, cross_attn;        // cross_attn: with cross-attention only
    FfnCache ffn;
};
struct ForwardCache {
    std::vector<LayerCache> layers;
    RopeTable rope;                    // cos, sin [T, dk/2] (positional = rope only)
    Vec memory;                        // [S, d] the memory in float64 (cross-attention only)
    std::size_t S = 0, valid_len = 0;  // memory rows, and the first padding row
    NormCache final_norm;              // pre-norm only
    Vec xf;                            // [T, d] the lm head's input
};

Dims dims_of(const ModelConfig& c, std::size_t T) {
    return {T, std::size_t(c.d_model), std::size_t(c.n_heads), std::size_t(c.kv_heads()), std::size_t(c.head_dim()),
            std::size_t(c.d_ff), std::size_t(c.vocab_size)};
}

const Vec& lm_head(const ModelConfig& c, const Params& p) {
    return p.at(c.tie_embeddings ? "embed.weight" : "lm_head.weight");
}

// MODEL.md §The whole decoder, with self-attention under `mask` (TrainMask::none drops the causal
// part only; the window, an architecture choice of the config, stays), on a checked memory when
// the config has cross-attention.                                          -> logits [T, V]
Vec forward(const ModelConfig& c, const Params& p, const std::vector<int>& tokens, const std::optional<Memory>& memory,
            TrainMask mask, ForwardCache& cache) {
    const Dims s = dims_of(c, tokens.size());
    const double scale = c.embed_scale_sqrt_d ? std::sqrt(double(c.d_model)) : 1.0;
    const bool rope = c.positional == Positional::rope;
    // §decoder 1: x[t] = embed[token_t] * scale + pos[t]; with rope nothing is added to x.
    const Vec table = c.positional == Positional::sinusoidal ? sinusoidal_positions(s.T, s.d) : Vec{};  // [T, d]
    const Vec& pos = c.positional == Positional::learned ? p.at("pos.weight") : table;
    Vec x(s.T * s.d);  // [T, d]
    for (std::size_t t = 0; t < s.T; ++t)
        for (std::size_t col = 0; col < s.d; ++col) {
            const double e = p.at("embed.weight")[std::size_t(tokens[t]) * s.d + col] * scale;
            x[t * s.d + col] = rope ? e : e + pos[t * s.d + col];
        }
    if (rope) cache.rope = rope_table(s.T, s.dk, c.rope_theta);  // row t: position t
    const SelfAttentionOptions self{{mask == TrainMask::causal, c.attn_window, s.T}, rope ? &cache.rope : nullptr};
    if (c.cross_attention) {
        cache.S = std::size_t(memory->rows);
        cache.valid_len = std::size_t(memory->valid_len);
        cache.memory.assign(memory->data.begin(), memory->data.end());  // [S, d]
    }
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
        sublayer("norm_self", lc.self_sub,
                 [&](const Vec& a) { return self_attention_forward(a, p, prefix + "self_attn.", s, self, lc.self_attn); });
        if (c.cross_attention)
            sublayer("norm_cross", lc.cross_sub, [&](const Vec& a) {
                return cross_attention_forward(a, cache.memory, cache.S, cache.valid_len, p, prefix + "cross_attn.", s,
                                               lc.cross_attn);
            });
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
    const RopeTable* rope = c.positional == Positional::rope ? &cache.rope : nullptr;
    // logits = xf lm^T: the lm head's gradient (the embedding's, when tied), and xf's.
    Vec dhead(s.V * s.d, 0.0);  // [V, d]
    Vec dx(s.T * s.d, 0.0);     // [T, d]
    linear_backward(dlogits, cache.xf, lm_head(c, p), &dx, dhead, nullptr, s.T, s.d, s.V);
    if (!(c.tie_embeddings && bug == GradBug::tied_embedding_once)) {
        Vec& gh = g.at(c.tie_embeddings ? "embed.weight" : "lm_head.weight");
        for (std::size_t i = 0; i < gh.size(); ++i) gh[i] += dhead[i];
    }
    if (pre) {
        Vec dx_in(s.T * s.d, 0.0);  // [T, d]
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
            Vec dx_in(s.T * s.d, 0.0);  // [T, d]
            if (pre) {
                Vec du(s.T * s.d, 0.0);  // [T, d]
                F_backward(dx, du);      // y = F(u), u = LN(x): du
                norm_backward(du, sc.norm, w, s.T, s.d, dx_in, gw, gb, bug);
                if (keep_residual)
                    for (std::size_t i = 0; i < dx.size(); ++i) dx_in[i] += dx[i];
            } else {
                Vec dz(s.T * s.d, 0.0);  // [T, d]
                norm_backward(dx, sc.norm, w, s.T, s.d, dz, gw, gb, bug);  // x' = LN(z), z = x + F(x)
                F_backward(dz, dx_in);
                if (keep_residual)
                    for (std::size_t i = 0; i < dz.size(); ++i) dx_in[i] += dz[i];
            }
            dx = std::move(dx_in);
        };
        sublayer("norm_ffn", lc.ffn_sub, false,
                 [&](const Vec& dy, Vec& da) { ffn_backward(dy, lc.ffn, p, g, prefix + "ffn.", s, c.activation, da); });
        if (c.cross_attention)
            sublayer("norm_cross", lc.cross_sub, false, [&](const Vec& dy, Vec& da) {
                cross_attention_backward(dy, lc.cross_attn, p, g, prefix + "cross_attn.", s, bug, da);
            });
        sublayer("norm_self", lc.self_sub, true, [&](const Vec& dy, Vec& da) {
            self_attention_backward(dy, lc.self_attn, p, g, prefix + "self_attn.", s, rope, bug, da);
        });
    }
    // x[t] = embed[token_t] * scale + pos[t] (rope: no pos).
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
    try {
        check_memory(c, q.memory);
    } catch (const InputError& e) {
        throw InputError(at + e.what());
    }
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

void check_trainable(const ModelConfig& c) { c.validate(); }

std::vector<double> decoder_logits(const ModelConfig& c, const Params& p, const std::vector<int>& tokens, TrainMask mask,
                                   const std::optional<Memory>& memory) {
    check_trainable(c);
    check_tokens(c, tokens);
    check_memory(c, memory);
    ForwardCache cache;
    return forward(c, p, tokens, memory, mask, cache);
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
        const Vec logits = forward(c, p, q.tokens, q.memory, o.mask, cache);  // [T, V]
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
