// reference/decoder_grad_internal.hpp — what the two files of the decoder's float64 backward
// share (private: only reference/decoder_grad.cpp, the decoder, and
// reference/decoder_grad_attention.cpp, its attentions, include it).
//
// Dimension legend: T = tokens of the sequence, S = memory rows, d = d_model, h = n_heads,
// hkv = kv heads of self-attention (n_kv_heads, h without grouped-query heads), g = h / hkv,
// dk = d / h, f = d_ff, V = vocab_size, w = attn_window.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/positions.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::reference::grad_detail {

using Vec = std::vector<double>;

struct Dims {
    std::size_t T, d, h, hkv, dk, f, V;
};

// ---- linear: y = x W^T + b (MODEL.md §Shapes), in decoder_grad.cpp ---------------------------

//   x [n, in], W [out, in], b [out] -> y [n, out]
Vec linear_forward(const Vec& x, const Vec& W, const Vec* b, std::size_t n, std::size_t in, std::size_t out);
// Given dy [n, out]: dx += dy W [n, in] (when dx is given), dW += dy^T x [out, in], db += the
// column sums of dy [out] (when db is given).
void linear_backward(const Vec& dy, const Vec& x, const Vec& W, Vec* dx, Vec& dW, Vec* db, std::size_t n,
                     std::size_t in, std::size_t out);

// ---- attention, in decoder_grad_attention.cpp ---------------------------------------------------

// Which keys query row i sees: t < valid_len (padding), t <= i when causal, t >= i - window when
// window >= 0. One rule for every mask of MODEL.md, so that forward, backward and the planted bug
// that forgets it cannot disagree on what "masked" means.
struct KeyRule {
    bool causal = true;
    int window = -1;
    std::size_t valid_len = 0;
    bool sees(std::size_t i, std::size_t t) const {
        return t < valid_len && (!causal || t <= i) && (window < 0 || t + std::size_t(window) >= i);
    }
};

// What a self-attention adds to MODEL.md §layer steps 1-3. With TrainMask::none the causal part
// of `keys` is off and the window's left edge stays (see decoder_grad.hpp).
struct SelfAttentionOptions {
    KeyRule keys;                     // valid_len = T
    const RopeTable* rope = nullptr;  // [T, dk/2], row t at position t; null: no rotation
};

struct AttentionCache {
    Vec a;        // [T, d] the query stream's input (the sublayer's input)
    Vec src;      // [Tk, d] the key/value stream's input: a itself (self), the memory (cross)
    Vec Q;        // [T, d], rotated with rope
    Vec K, V;     // [Tk, hkv*dk] each (K rotated with rope); hkv = h in cross-attention
    Vec P;        // [h, T, Tk] the probabilities (exactly 0 where masked; a row that sees no key is all 0)
    Vec O;        // [T, d] the heads' outputs, concatenated
    std::size_t Tk = 0, hkv = 0;
};

// Self-attention with grouped-query heads, the window and rope.   a [T, d] -> y [T, d]
// prefix "layers.l.self_attn."
Vec self_attention_forward(const Vec& a, const Params& p, const std::string& prefix, const Dims& s,
                           const SelfAttentionOptions& o, AttentionCache& c);
// Given dy [T, d]: the weights' gradients into g, the input's into da (+=, through Q, K and V).
// rope: the forward's table (null without rotary positions).
void self_attention_backward(const Vec& dy, const AttentionCache& c, const Params& p, Params& g,
                             const std::string& prefix, const Dims& s, const RopeTable* rope, GradBug bug, Vec& da);

// Cross-attention: queries from a [T, d], keys and values from memory [S, d], rows >= valid_len
// padding, no causal mask, hkv = h, no rotation.                     -> y [T, d]
// prefix "layers.l.cross_attn."
Vec cross_attention_forward(const Vec& a, const Vec& memory, std::size_t S, std::size_t valid_len, const Params& p,
                            const std::string& prefix, const Dims& s, AttentionCache& c);
// Given dy [T, d]: the weights' gradients into g, a's into da (+=, through Q only: the memory
// is an input of the decoder, not a parameter, and gets no gradient).
void cross_attention_backward(const Vec& dy, const AttentionCache& c, const Params& p, Params& g,
                              const std::string& prefix, const Dims& s, GradBug bug, Vec& da);

}  // namespace attncheck::reference::grad_detail
