// optimized/weights.hpp — the decoder's weights as its matrix products read them: PackedWeights,
// made once at load time by pack_model(), and embed_row(), the lookup that starts every row.
//
// Dimension legend: V = vocab, d = d_model, f = d_ff, L = layers, N = max_len.
#pragma once

#include <memory>
#include <vector>

#include "attncheck/model.hpp"
#include "optimized/gemm.hpp"

namespace attncheck::optimized {

struct Norm32 {
    std::vector<float> weight, bias;  // [d]
};

struct LayerWeights {
    PackedMatrix qkv;  // [d + 2 hkv dk, d]: Wq, Wk, Wv stacked (bias bq, bk, bv); hkv = n_kv_heads
    PackedMatrix o;    // [d, d]
    Norm32 norm_self;
    PackedMatrix cross_q;   // [d, d]
    PackedMatrix cross_kv;  // [2d, d]: Wk, Wv of the cross-attention
    PackedMatrix cross_o;   // [d, d]
    Norm32 norm_cross;
    PackedMatrix fc1;  // [f, d]
    PackedMatrix fc2;  // [d, f]
    Norm32 norm_ffn;
};

struct PackedWeights {
    ModelConfig config;
    std::vector<float> embed;  // [V, d]
    std::vector<float> pos;    // [N, d], learned or sinusoidal (empty with rope)
    std::vector<float> rope_cos, rope_sin;  // [N, dk/2], the rotary angles (rope only)
    int qkv_width = 0;         // columns of a qkv row: d (q) + hkv dk (k) + hkv dk (v)
    float embed_scale = 1.0f;
    float attn_scale = 1.0f;   // 1/sqrt(dk)
    Activation32 act = Activation32::relu;
    std::vector<LayerWeights> layers;  // L
    Norm32 final_norm;                 // pre-norm only
    PackedMatrix lm_head;              // [V, d]
};

// Validates the model (InputError) and packs every weight: Q, K and V into one [d + 2 hkv dk, d]
// matrix, the cross-attention's K and V into one [2d, d], the sinusoidal table or the rotary
// angles' cos and sin rounded to float.
std::unique_ptr<PackedWeights> pack_model(const Model& m);

// x[c] = embed[token, c] * embed_scale + pos[position, c], MODEL.md §decoder 1 (no pos term
// with rope).                                                                     x [d]
void embed_row(const PackedWeights& P, int token, int position, float* x);

}  // namespace attncheck::optimized
