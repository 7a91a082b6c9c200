// reference/decoder.hpp — the transformer decoder of docs/spec/MODEL.md, written to be read.
//
// This is the specification in code. Every step cites MODEL.md ("§layer 1", "§decoder 3"); every
// tensor carries its shape. Nothing here is fast on purpose: one plain loop per matrix product,
// no cache, no threads, so that a reader can check it against the spec line by line. It is
// templated on the scalar, and every arithmetic operation happens in T:
//   T = double  the oracle every float32 decoder is measured against (NUMERICS.md);
//   T = float   the float32 baseline whose error against the oracle sets the tolerance.
// Weights are stored as float32 in the model and converted to T once, in the constructor.
//
// Dimension legend: V = vocab_size, d = d_model, h = n_heads, dk = d / h, f = d_ff,
// L = n_layers, N = max_len, T = tokens in a call, S = memory rows, hkv = n_kv_heads,
// g = h / hkv (query heads per kv head), w = attn_window.
//
// Attention goes through attend_head() of attention.hpp, whose masking rule is the ABI's
// (key_visible(), visible_v2() restricted to version 1's problems). The version 2
// features of MODEL.md are spelled out where they act: grouped-query heads and the sliding
// window in multi_head_attention(), rotary positions in rotate_heads().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "model/positions.hpp"
#include "reference/attention.hpp"

namespace attncheck::reference {

// ---------------------------------------------------------------------------------------------
// The building blocks, as free functions so that a test can check each against hand values.
// ---------------------------------------------------------------------------------------------

// A float32 model tensor as an xtensor of rank R in precision T (a copy; the model is not kept).
template <class T, std::size_t R>
xt::xtensor<T, R> to_xtensor(const Tensor& t) {
    std::vector<std::size_t> shape = t.shape;  // rank R, checked by Model::validate()
    return xt::cast<T>(xt::adapt(t.data.data(), t.data.size(), xt::no_ownership(), shape));
}

// The linear layer of MODEL.md §Shapes (PyTorch nn.Linear): y = x W^T + b.
//   x [n, in], W [out, in], b [out] -> y [n, out]. Accumulates in T, in index order.
template <class T>
xt::xtensor<T, 2> linear(const xt::xtensor<T, 2>& x, const xt::xtensor<T, 2>& W,
                         const xt::xtensor<T, 1>* b) {
    const std::size_t n = x.shape(0), in = x.shape(1), out = W.shape(0);
    xt::xtensor<T, 2> y = xt::zeros<T>({n, out});  // [n, out]
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            T acc = 0;
            for (std::size_t c = 0; c < in; ++c) acc += x(r, c) * W(o, c);
            y(r, o) = b ? acc + (*b)(o) : acc;
        }
    return y;
}

// LayerNorm over the last axis, biased variance (divide by d, as PyTorch does), eps = ln_eps:
//   y = (x - mean) / sqrt(var + eps) * weight + bias.     x [n, d] -> y [n, d]
template <class T>
xt::xtensor<T, 2> layer_norm(const xt::xtensor<T, 2>& x, const xt::xtensor<T, 1>& weight,
                             const xt::xtensor<T, 1>& bias, T eps) {
    const std::size_t n = x.shape(0), d = x.shape(1);
    xt::xtensor<T, 2> y = xt::zeros<T>({n, d});  // [n, d]
    for (std::size_t r = 0; r < n; ++r) {
        T mean = 0;
        for (std::size_t c = 0; c < d; ++c) mean += x(r, c);
        mean /= T(d);
        T var = 0;
        for (std::size_t c = 0; c < d; ++c) var += (x(r, c) - mean) * (x(r, c) - mean);
        var /= T(d);  // biased: the mean of squared deviations, not the sample variance
        const T inv_std = T(1) / std::sqrt(var + eps);
        for (std::size_t c = 0; c < d; ++c)
            y(r, c) = (x(r, c) - mean) * inv_std * weight(c) + bias(c);
    }
    return y;
}

// The feed-forward activation of MODEL.md §layer "Feed-forward", element by element.
template <class T>
T activate(Activation a, T x) {
    switch (a) {
        case Activation::relu:
            return x > T(0) ? x : T(0);
        case Activation::gelu:  // exact GELU: x * Phi(x), Phi the standard normal CDF
            return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
        case Activation::gelu_tanh:  // the tanh approximation of GELU (Hendrycks & Gimpel)
            return T(0.5) * x *
                   (T(1) + std::tanh(std::sqrt(T(2) / std::numbers::pi_v<T>) * (x + T(0.044715) * x * x * x)));
    }
    return x;  // unreachable: every enumerator is handled above
}

// The sinusoidal table of MODEL.md §decoder 1, rows 0 .. n-1:
//   pos[p, 2i] = sin(p / 10000^(2i/d)),  pos[p, 2i+1] = cos(p / 10000^(2i/d)).
// Computed in double by model/positions.hpp (the optimized decoder's table too), rounded to T
// once, so that the float reference does not add its own error in the angles to the baseline.
//                                                                             -> pos [n, d]
template <class T>
xt::xtensor<T, 2> sinusoidal_positions(std::size_t n, std::size_t d) {
    const std::vector<double> table = attncheck::sinusoidal_positions(n, d);  // [n, d]
    return xt::cast<T>(xt::adapt(table.data(), table.size(), xt::no_ownership(), std::vector<std::size_t>{n, d}));
}

// The rotary angles of MODEL.md "Version 2 additions" for positions 0 .. n-1 (model/positions.hpp,
// computed in double and rounded to T once, like the sinusoidal table).
template <class T>
struct RopeAngles {
    xt::xtensor<T, 2> cos, sin;  // [n, dk/2]
};
template <class T>
RopeAngles<T> rope_angles(std::size_t n, std::size_t dk, double theta) {
    const RopeTable t = attncheck::rope_table(n, dk, theta);
    const std::vector<std::size_t> shape{n, dk / 2};
    return {xt::cast<T>(xt::adapt(t.cos.data(), t.cos.size(), xt::no_ownership(), shape)),
            xt::cast<T>(xt::adapt(t.sin.data(), t.sin.size(), xt::no_ownership(), shape))};
}

// Rotary positions (MODEL.md "Version 2 additions"), in place on every head of x [T, heads*dk]:
// row t is at absolute position t; in each head, element i pairs with element i + dk/2,
//   (x_i, x_{i+dk/2}) -> (x_i cos a - x_{i+dk/2} sin a, x_i sin a + x_{i+dk/2} cos a),
// a = t * theta^(-2i/dk).
template <class T>
void rotate_heads(xt::xtensor<T, 2>& x, std::size_t dk, const RopeAngles<T>& angles) {
    const std::size_t n = x.shape(0), heads = x.shape(1) / dk, half = dk / 2;
    for (std::size_t t = 0; t < n; ++t)
        for (std::size_t head = 0; head < heads; ++head)
            for (std::size_t i = 0; i < half; ++i) {
                const std::size_t a = head * dk + i, b = a + half;
                const T c = angles.cos(t, i), s = angles.sin(t, i);
                const T xa = x(t, a), xb = x(t, b);
                x(t, a) = xa * c - xb * s;
                x(t, b) = xa * s + xb * c;
            }
}

// ---------------------------------------------------------------------------------------------
// The decoder.
// ---------------------------------------------------------------------------------------------

template <class T>
class Decoder {
public:
    // Validates the model (InputError naming the problem) and converts its weights to T.
    explicit Decoder(const Model& m) : config_(m.config) {
        m.validate();
        const ModelConfig& c = config_;
        embed_ = to_xtensor<T, 2>(m.at("embed.weight"));  // [V, d]
        lm_head_ = to_xtensor<T, 2>(m.lm_head());         // [V, d], embed when tied
        if (c.positional == Positional::learned)
            pos_ = to_xtensor<T, 2>(m.at("pos.weight"));  // [N, d]
        else if (c.positional == Positional::sinusoidal)
            pos_ = sinusoidal_positions<T>(std::size_t(c.max_len), std::size_t(c.d_model));
        else  // rope: nothing is added to x; q and k are rotated in every self-attention
            rope_ = rope_angles<T>(std::size_t(c.max_len), std::size_t(c.head_dim()), c.rope_theta);
        for (int i = 0; i < c.n_layers; ++i) {
            const std::string p = "layers." + std::to_string(i) + ".";
            Layer layer;
            layer.self_attn = load_attention(m, p + "self_attn.");
            layer.norm_self = load_norm(m, p + "norm_self.");
            if (c.cross_attention) {
                layer.cross_attn = load_attention(m, p + "cross_attn.");
                layer.norm_cross = load_norm(m, p + "norm_cross.");
            }
            layer.fc1 = load_linear(m, p + "ffn.fc1.");  // [f, d], [f]
            layer.fc2 = load_linear(m, p + "ffn.fc2.");  // [d, f], [d]
            layer.norm_ffn = load_norm(m, p + "norm_ffn.");
            layers_.push_back(std::move(layer));
        }
        if (c.norm == Norm::pre) final_norm_ = load_norm(m, "final_norm.");
    }

    const ModelConfig& config() const { return config_; }

    // Teacher-forced logits [T, V]: every position in one pass (MODEL.md §The whole decoder).
    xt::xtensor<T, 2> forward(const std::vector<int>& tokens,
                              const std::optional<Memory>& memory = std::nullopt) const {
        check_tokens(config_, tokens);
        check_memory(config_, memory);
        return run(tokens, memory, nullptr);
    }

    // The textbook incremental evaluation: the logits of position p are the last row of
    // forward(tokens[0..p]). No cache: it is the definition a KV-cache decoder must match.
    // -> [T, V]
    xt::xtensor<T, 2> forward_incremental(const std::vector<int>& tokens,
                                          const std::optional<Memory>& memory = std::nullopt) const {
        check_tokens(config_, tokens);
        check_memory(config_, memory);
        const std::size_t n = tokens.size(), V = std::size_t(config_.vocab_size);
        xt::xtensor<T, 2> logits = xt::zeros<T>({n, V});  // [T, V]
        for (std::size_t p = 0; p < n; ++p) {
            const std::vector<int> prefix(tokens.begin(), tokens.begin() + std::ptrdiff_t(p + 1));
            const xt::xtensor<T, 2> prefix_logits = run(prefix, memory, nullptr);  // [p+1, V]
            xt::row(logits, std::ptrdiff_t(p)) = xt::row(prefix_logits, std::ptrdiff_t(p));
        }
        return logits;
    }

    // Greedy generation the textbook way: re-run forward over the whole sequence for each new
    // token and take the argmax of its last row (the lowest id on ties, so the result does not
    // depend on how a max is reduced). Returns only the max_new new tokens.
    std::vector<int> generate(const std::vector<int>& prompt, int max_new,
                              const std::optional<Memory>& memory = std::nullopt) const {
        check_tokens(config_, prompt);
        check_memory(config_, memory);
        if (max_new < 0)
            throw InputError("generate: max_new = " + std::to_string(max_new) + " (must be >= 0)");
        if (std::int64_t(prompt.size()) + max_new > std::int64_t(config_.max_len))
            throw InputError("generate: prompt length " + std::to_string(prompt.size()) +
                             " + max_new " + std::to_string(max_new) + " exceeds max_len " +
                             std::to_string(config_.max_len));
        std::vector<int> seq = prompt;
        std::vector<int> generated;
        for (int s = 0; s < max_new; ++s) {
            const xt::xtensor<T, 2> logits = run(seq, memory, nullptr);  // [len, V]
            const std::size_t last = seq.size() - 1;
            int best = 0;
            for (int v = 1; v < config_.vocab_size; ++v)  // strict >: the lowest id wins ties
                if (logits(last, std::size_t(v)) > logits(last, std::size_t(best))) best = v;
            seq.push_back(best);
            generated.push_back(best);
        }
        return generated;
    }

    // Per layer, the attention probabilities of one teacher-forced pass:
    //   self[l]  [h, T, T]  causal, entries above the diagonal exactly 0 (and, with a window w,
    //                       entries (i, t) with t < i - w);
    //   cross[l] [h, T, S]  padding columns (>= memory.valid_len) exactly 0; empty without
    //                       cross-attention.
    struct Probs {
        std::vector<xt::xtensor<T, 3>> self, cross;
    };
    Probs attention_probs(const std::vector<int>& tokens,
                          const std::optional<Memory>& memory = std::nullopt) const {
        check_tokens(config_, tokens);
        check_memory(config_, memory);
        Probs probs;
        run(tokens, memory, &probs);
        return probs;
    }

private:
    struct Linear {
        xt::xtensor<T, 2> weight;  // [out, in]
        xt::xtensor<T, 1> bias;    // [out]
    };
    struct Attention {
        Linear q, o;  // each [d, d], [d]
        Linear k, v;  // each [hkv*dk, d], [hkv*dk] in self-attention, [d, d], [d] in cross
    };
    struct LayerNormWeights {
        xt::xtensor<T, 1> weight, bias;  // [d]
    };
    struct Layer {
        Attention self_attn;
        LayerNormWeights norm_self;
        std::optional<Attention> cross_attn;  // present iff cross_attention
        LayerNormWeights norm_cross;
        Linear fc1, fc2;  // [f, d], [f] and [d, f], [d]
        LayerNormWeights norm_ffn;
    };

    static Linear load_linear(const Model& m, const std::string& prefix) {
        return {to_xtensor<T, 2>(m.at(prefix + "weight")), to_xtensor<T, 1>(m.at(prefix + "bias"))};
    }
    static Attention load_attention(const Model& m, const std::string& prefix) {
        return {load_linear(m, prefix + "q."), load_linear(m, prefix + "o."),
                load_linear(m, prefix + "k."), load_linear(m, prefix + "v.")};
    }
    static LayerNormWeights load_norm(const Model& m, const std::string& prefix) {
        return {to_xtensor<T, 1>(m.at(prefix + "weight")), to_xtensor<T, 1>(m.at(prefix + "bias"))};
    }

    xt::xtensor<T, 2> norm(const xt::xtensor<T, 2>& x, const LayerNormWeights& w) const {
        return layer_norm<T>(x, w.weight, w.bias, T(config_.ln_eps));
    }

    // What a self-attention adds to MODEL.md §layer steps 1-3 (its version 2 additions); the
    // cross-attention uses none of them.
    struct SelfAttentionOptions {
        std::size_t kv_heads;        // hkv: query head j reads kv head j / (h / hkv)
        int window;                  // w: key t is also masked for row i when t < i - w; -1 none
        const RopeAngles<T>* rope;   // rotate q and k (row t at position t); null: no rotation
    };

    // Multi-head attention, MODEL.md §layer steps 1-3.
    //   x [T, d] the query stream; src [Tk, d] the key/value stream (x itself for
    //   self-attention, the memory for cross-attention); valid_len: keys >= it are padding.
    //   self, for self-attention: grouped-query heads, the window and rope (MODEL.md
    //   "Version 2 additions"); null for cross-attention (hkv = h, no window, no rotation).
    //   probs, when given, receives P [h, T, Tk].                               -> y [T, d]
    xt::xtensor<T, 2> multi_head_attention(const xt::xtensor<T, 2>& x, const xt::xtensor<T, 2>& src,
                                           const Attention& a, bool causal, std::size_t valid_len,
                                           const SelfAttentionOptions* self,
                                           xt::xtensor<T, 3>* probs) const {
        const std::size_t n = x.shape(0), Tk = src.shape(0);
        const std::size_t h = std::size_t(config_.n_heads), dk = std::size_t(config_.head_dim());
        const std::size_t hkv = self ? self->kv_heads : h, group = h / hkv;
        const int window = self ? self->window : -1;
        // Step 1: projections, then (rope) the rotation of every query and key head.
        xt::xtensor<T, 2> Q = linear<T>(x, a.q.weight, &a.q.bias);    // [T, d]
        xt::xtensor<T, 2> K = linear<T>(src, a.k.weight, &a.k.bias);  // [Tk, hkv*dk]
        const xt::xtensor<T, 2> Vv = linear<T>(src, a.v.weight, &a.v.bias); // [Tk, hkv*dk]
        if (self && self->rope) {
            rotate_heads<T>(Q, dk, *self->rope);
            rotate_heads<T>(K, dk, *self->rope);
        }
        const T scale = T(1) / std::sqrt(T(dk));
        if (probs) *probs = xt::zeros<T>({h, n, Tk});  // [h, T, Tk]
        xt::xtensor<T, 2> O = xt::zeros<T>({n, h * dk});  // [T, d], heads concatenated
        for (std::size_t j = 0; j < h; ++j) {
            // Query head j owns columns j*dk .. (j+1)*dk - 1 of Q; its kv head kj = j / g the
            // columns kj*dk .. (kj+1)*dk - 1 of K and V.
            const std::size_t c0 = j * dk, c1 = (j + 1) * dk;
            const std::size_t kj = j / group, k0 = kj * dk, k1 = (kj + 1) * dk;
            const xt::xtensor<T, 2> Qj = xt::view(Q, xt::all(), xt::range(c0, c1));   // [T, dk]
            const xt::xtensor<T, 2> Kj = xt::view(K, xt::all(), xt::range(k0, k1));   // [Tk, dk]
            const xt::xtensor<T, 2> Vj = xt::view(Vv, xt::all(), xt::range(k0, k1));  // [Tk, dk]
            xt::xtensor<T, 2> Pj;  // [T, Tk]
            xt::xtensor<T, 2> Oj;  // [T, dk]
            if (window < 0) {
                // Steps 2-3 for one head: scaled scores, -inf mask, softmax, P V. Query row i is
                // at absolute position i (q_offset 0): the whole sequence is evaluated at once.
                Oj = attend_head<T>(Qj, Kj, Vj, /*q_offset=*/0, causal, std::int64_t(valid_len), scale, &Pj);
            } else {
                // The window: row i sees keys max(0, i - w) .. i. Masked keys add exactly 0 to
                // every sum, so attending to those keys alone is the masked row: one call per
                // row, the row's keys as the call's keys (q_offset = i - first: causal up to i).
                Oj = xt::zeros<T>({n, dk});
                Pj = xt::zeros<T>({n, Tk});
                for (std::size_t i = 0; i < n; ++i) {
                    const std::size_t first = i > std::size_t(window) ? i - std::size_t(window) : 0;
                    const xt::xtensor<T, 2> qi = xt::view(Qj, xt::range(i, i + 1), xt::all());  // [1, dk]
                    const xt::xtensor<T, 2> ki = xt::view(Kj, xt::range(first, i + 1), xt::all());  // [i-first+1, dk]
                    const xt::xtensor<T, 2> vi = xt::view(Vj, xt::range(first, i + 1), xt::all());  // [i-first+1, dk]
                    xt::xtensor<T, 2> pi;  // [1, i-first+1]
                    const xt::xtensor<T, 2> oi = attend_head<T>(qi, ki, vi, std::int64_t(i - first), true,
                                                                std::int64_t(i - first + 1), scale, &pi);
                    xt::view(Oj, i, xt::all()) = xt::view(oi, 0, xt::all());
                    xt::view(Pj, i, xt::range(first, i + 1)) = xt::view(pi, 0, xt::all());
                }
            }
            xt::view(O, xt::all(), xt::range(c0, c1)) = Oj;
            if (probs) xt::view(*probs, j, xt::all(), xt::all()) = Pj;
        }
        // Step 3: output projection of the concatenated heads.
        return linear<T>(O, a.o.weight, &a.o.bias);  // [T, d]
    }

    // FFN of MODEL.md §layer "Feed-forward": act(x W1^T + b1) W2^T + b2.   x [T, d] -> [T, d]
    xt::xtensor<T, 2> feed_forward(const xt::xtensor<T, 2>& x, const Layer& layer) const {
        xt::xtensor<T, 2> hidden = linear<T>(x, layer.fc1.weight, &layer.fc1.bias);  // [T, f]
        for (auto& e : hidden) e = activate<T>(config_.activation, e);
        return linear<T>(hidden, layer.fc2.weight, &layer.fc2.bias);  // [T, d]
    }

    // The whole decoder on checked inputs; fills probs when given.           -> logits [T, V]
    xt::xtensor<T, 2> run(const std::vector<int>& tokens, const std::optional<Memory>& memory,
                          Probs* probs) const {
        const ModelConfig& c = config_;
        const std::size_t n = tokens.size(), d = std::size_t(c.d_model);

        // §decoder 1: x[t] = embed[token_t] * s + pos[t] (rope: x[t] = embed[token_t] * s).
        const T s = c.embed_scale_sqrt_d ? std::sqrt(T(c.d_model)) : T(1);
        const bool rope = c.positional == Positional::rope;
        xt::xtensor<T, 2> x = xt::zeros<T>({n, d});  // [T, d]
        for (std::size_t t = 0; t < n; ++t)
            for (std::size_t col = 0; col < d; ++col)
                x(t, col) = rope ? embed_(std::size_t(tokens[t]), col) * s
                                 : embed_(std::size_t(tokens[t]), col) * s + pos_(t, col);
        const SelfAttentionOptions self_options{std::size_t(c.kv_heads()), c.attn_window,
                                                rope ? &rope_ : nullptr};

        // The memory in precision T (only with cross-attention; check_memory has verified it).
        xt::xtensor<T, 2> mem;  // [S, d]
        std::size_t mem_valid = 0;
        if (c.cross_attention) {
            const std::size_t S = std::size_t(memory->rows);
            mem = xt::cast<T>(xt::adapt(memory->data.data(), S * d, xt::no_ownership(),
                                        std::vector<std::size_t>{S, d}));
            mem_valid = std::size_t(memory->valid_len);
        }

        // §decoder 2: L layers; each sublayer F with its own LayerNorm, wired post or pre.
        //   post: x = LN(x + F(x))         pre: x = x + F(LN(x))
        const bool pre = c.norm == Norm::pre;
        auto sublayer = [&](const LayerNormWeights& ln, auto&& F) {
            if (pre) {
                const xt::xtensor<T, 2> y = F(norm(x, ln));  // [T, d]
                x = x + y;
            } else {
                const xt::xtensor<T, 2> y = F(x);  // [T, d]
                const xt::xtensor<T, 2> sum = x + y;  // [T, d]
                x = norm(sum, ln);
            }
        };
        for (const Layer& layer : layers_) {
            xt::xtensor<T, 3>* self_probs = nullptr;  // [h, T, T]
            if (probs) self_probs = &probs->self.emplace_back();
            // Masked self-attention: causal, every key of the call is real (valid_len = T).
            sublayer(layer.norm_self, [&](const xt::xtensor<T, 2>& in) {
                return multi_head_attention(in, in, layer.self_attn, /*causal=*/true, n, &self_options,
                                            self_probs);
            });
            if (layer.cross_attn) {
                xt::xtensor<T, 3>* cross_probs = nullptr;  // [h, T, S]
                if (probs) cross_probs = &probs->cross.emplace_back();
                // Cross-attention: queries from the target stream, keys and values from the
                // memory, no causal mask, padding rows >= valid_len masked.
                sublayer(layer.norm_cross, [&](const xt::xtensor<T, 2>& in) {
                    return multi_head_attention(in, mem, *layer.cross_attn, /*causal=*/false,
                                                mem_valid, nullptr, cross_probs);
                });
            }
            sublayer(layer.norm_ffn, [&](const xt::xtensor<T, 2>& in) { return feed_forward(in, layer); });
        }
        if (pre) x = norm(x, *final_norm_);  // pre-norm: LN_final after the last layer

        // §decoder 3: logits = x lm_head^T (no bias).                         -> [T, V]
        return linear<T>(x, lm_head_, nullptr);
    }

    ModelConfig config_;
    xt::xtensor<T, 2> embed_;    // [V, d]
    xt::xtensor<T, 2> lm_head_;  // [V, d]
    xt::xtensor<T, 2> pos_;      // [N, d], learned or sinusoidal (empty with rope)
    RopeAngles<T> rope_;         // cos, sin [N, dk/2] (rope only)
    std::vector<Layer> layers_;  // L
    std::optional<LayerNormWeights> final_norm_;  // pre-norm only
};

}  // namespace attncheck::reference
