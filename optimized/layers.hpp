// optimized/layers.hpp — the decoder's layer stack: run_layers() over M rows of the target
// stream, its row scratch (RowBuffers) and LayerNorm.
//
// Everything here is row-wise except attention, which run_layers() leaves to a policy that
// knows where the rows sit (attention_policy.hpp): the same stack serves a teacher-forced
// batch, a chunk of one sequence at a cache position and a step of a batch of sequences.
//
// Dimension legend: d = d_model, f = d_ff, L = layers, M = rows of a call.
#pragma once

#include <cstddef>
#include <memory>

#include "attncheck/model.hpp"
#include "optimized/gemm.hpp"
#include "optimized/weights.hpp"

namespace attncheck::optimized {

// LayerNorm of MODEL.md (biased variance), rows of x [m, d] -> y [m, d]; y may alias x.
// Statistics in double (see layers.cpp), the same bits wherever a row is computed.
void layer_norm(const float* x, int m, int d, const Norm32& n, double eps, float* y);

// Row scratch of the layer stack for up to `rows` rows. Not initialized: a call's M rows of
// each buffer are written before they are read (a forward of `base` at T = 512 would otherwise
// zero 10 MB per call, ~1% of it on 2 threads).
struct RowBuffers {
    int rows = 0;
    std::unique_ptr<float[]> h;    // [M, d]  LN(x) (pre-norm) or the sublayer output before LN (post)
    std::unique_ptr<float[]> qkv;  // [M, 3d]: q, k, v of a row (narrower with grouped-query heads)
    std::unique_ptr<float[]> q;    // [M, d]  cross-attention queries
    std::unique_ptr<float[]> att;  // [M, d]  attention output, heads concatenated
    std::unique_ptr<float[]> hid;  // [M, f]
    void resize(const ModelConfig& c, int m) {
        if (m <= rows) return;
        rows = m;
        const std::size_t M = std::size_t(m), d = std::size_t(c.d_model);
        h = std::make_unique_for_overwrite<float[]>(M * d);
        qkv = std::make_unique_for_overwrite<float[]>(M * 3 * d);
        q = std::make_unique_for_overwrite<float[]>(M * d);
        att = std::make_unique_for_overwrite<float[]>(M * d);
        hid = std::make_unique_for_overwrite<float[]>(M * std::size_t(c.d_ff));
    }
};

// The L layers and the final norm over x [M, d] in place (MODEL.md §One decoder layer).
//   post: x = LN(x + F(x))     pre: x = x + F(LN(x))
// Attn provides self(l, qkv [M, d + 2 hkv dk], att [M, d]) and cross(l, q [M, d], att [M, d]).
template <class Attn>
void run_layers(const PackedWeights& P, int M, float* x, RowBuffers& B, Attn& attn) {
    const ModelConfig& c = P.config;
    const int d = c.d_model, f = c.d_ff;
    const bool pre = c.norm == Norm::pre;
    float* h = B.h.get();
    // One sublayer: in = pre ? LN(x) : x; y = F(in) ; x = pre ? x + y : LN(x + y). F ends with a
    // linear layer `out` whose input body(in) returns [M, out_k] and whose residual is fused into
    // its epilogue.
    auto sublayer = [&](const Norm32& ln, auto&& body, const PackedMatrix& out, int out_k) {
        const float* in = x;
        if (pre) {
            layer_norm(x, M, d, ln, c.ln_eps, h);
            in = h;
        }
        const float* o_in = body(in);
        if (pre) {
            linear(out, o_in, M, out_k, x, d, Activation32::none, x, d);  // x += F
        } else {
            linear(out, o_in, M, out_k, h, d, Activation32::none, x, d);  // h = x + F
            layer_norm(h, M, d, ln, c.ln_eps, x);
        }
    };
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& W = P.layers[std::size_t(l)];
        sublayer(
            W.norm_self,
            [&](const float* in) -> const float* {
                linear(W.qkv, in, M, d, B.qkv.get(), P.qkv_width);
                attn.self(l, B.qkv.get(), B.att.get());
                return B.att.get();
            },
            W.o, d);
        if (c.cross_attention)
            sublayer(
                W.norm_cross,
                [&](const float* in) -> const float* {
                    linear(W.cross_q, in, M, d, B.q.get(), d);
                    attn.cross(l, B.q.get(), B.att.get());
                    return B.att.get();
                },
                W.cross_o, d);
        sublayer(
            W.norm_ffn,
            [&](const float* in) -> const float* {
                linear(W.fc1, in, M, d, B.hid.get(), f, P.act);
                return B.hid.get();
            },
            W.fc2, f);
    }
    if (pre) layer_norm(x, M, d, P.final_norm, c.ln_eps, x);
}

}  // namespace attncheck::optimized
