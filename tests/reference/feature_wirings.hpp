// tests/reference/feature_wirings.hpp — the wirings with the features of MODEL.md that version 1's
// 48 do not have (grouped-query heads, the sliding window, rope, cross-attention), alone and
// combined, and the memory a cross-attention sequence reads. Shared by the tests of the float64
// gradient (tests/reference/decoder_grad_test.cpp, against finite differences) and of the float32
// training step (tests/optimized/train_step_test.cpp, against that gradient), so that both check
// the same list.
//
// To add a wiring: add a line to feature_wirings() (a name, the features, the memory's valid_len
// per sequence when it has cross-attention).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/model.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::testing {

// A memory [rows, d] of values in [-1, 1) whose rows >= valid_len (padding) hold 40: padding that
// leaked into a softmax or a gradient would move the loss by far more than any tolerance.
inline Memory memory_of(std::mt19937_64& rng, const ModelConfig& c, int rows, int valid_len) {
    Memory m;
    m.rows = rows;
    m.valid_len = valid_len;
    for (int r = 0; r < rows; ++r)
        for (int col = 0; col < c.d_model; ++col)
            m.data.push_back(r < valid_len ? float(double(rng() % 2048) / 1024.0 - 1.0) : 40.0f);
    return m;
}

// The features set on a small config (V = 7, d = 8, f = 12, L = 2, N = 8, gelu, untied, sqrt(d)
// embedding scale, learned positions unless rope).
struct Features {
    int n_heads = 2, n_kv_heads = 0, window = -1;
    bool rope = false, cross = false;
    double rope_theta = 10000;
};

struct Wiring {
    std::string name;
    ModelConfig config;
    reference::TrainMask mask = reference::TrainMask::causal;
    std::vector<int> valid = {3, 4};  // the memories' valid_len, per sequence (cross-attention only)
};

inline Wiring wiring(const std::string& name, Norm norm, const Features& f,
                     reference::TrainMask mask = reference::TrainMask::causal, std::vector<int> valid = {3, 4}) {
    ModelConfig c;
    c.vocab_size = 7;
    c.d_model = 8;
    c.n_heads = f.n_heads;  // d = 8: dk = 4 with 2 heads, 2 with 4 (even, as rope needs)
    c.d_ff = 12;
    c.n_layers = 2;
    c.max_len = 8;
    c.norm = norm;
    c.activation = Activation::gelu;
    c.tie_embeddings = false;
    c.positional = f.rope ? Positional::rope : Positional::learned;
    c.embed_scale_sqrt_d = true;
    c.n_kv_heads = f.n_kv_heads;
    c.attn_window = f.window;
    c.rope_theta = f.rope_theta;
    c.cross_attention = f.cross;
    return {name, c, mask, std::move(valid)};
}

// Each feature alone, in post and pre norm, then combined. The windows are narrower than the
// sequences (T >= 5) so that they cut; window 0 leaves each row only itself. rope_theta = 100
// turns the later pairs by more than the default would at T <= 7. A memory of valid_len 0 is
// fully padded: its rows' cross-attention outputs only its bias.
inline std::vector<Wiring> feature_wirings() {
    using reference::TrainMask;
    const Norm post = Norm::post, pre = Norm::pre;
    return {
        wiring("gqa h4 kv2 post", post, {.n_heads = 4, .n_kv_heads = 2}),
        wiring("gqa h4 kv1 pre (multi-query)", pre, {.n_heads = 4, .n_kv_heads = 1}),
        wiring("window 1 post", post, {.window = 1}),
        wiring("window 0 pre", pre, {.window = 0}),
        wiring("window 2 pre, mask none", pre, {.window = 2}, TrainMask::none),
        wiring("rope post", post, {.rope = true}),
        wiring("rope theta 100 pre", pre, {.rope = true, .rope_theta = 100}),
        wiring("gqa + rope + window pre", pre, {.n_heads = 4, .n_kv_heads = 2, .window = 2, .rope = true, .rope_theta = 100}),
        wiring("gqa + rope + window post, mask none", post, {.n_heads = 4, .n_kv_heads = 2, .window = 1, .rope = true},
               TrainMask::none),
        wiring("cross post, memories valid 3 and 0", post, {.cross = true}, TrainMask::causal, {3, 0}),
        wiring("cross pre, memories valid 3 and 0", pre, {.cross = true}, TrainMask::causal, {3, 0}),
        wiring("cross + gqa + rope + window pre, memories valid 2 and 4", pre,
               {.n_heads = 4, .n_kv_heads = 2, .window = 1, .rope = true, .cross = true}, TrainMask::causal, {2, 4}),
    };
}

}  // namespace attncheck::testing
