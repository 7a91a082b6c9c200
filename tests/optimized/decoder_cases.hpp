// tests/optimized/decoder_cases.hpp — what the tests of the optimized decoder share
// (decoder_test.cpp, decoder_session_test.cpp, decoder_bitwise_test.cpp): the built-in kernels by
// registry name, a small model configuration of odd sizes and the version 2 configurations built
// on it, a configuration in words, random tokens and random memory.
//
// Dimension legend: V = vocab, d = d_model, h = heads, f = d_ff, N = max_len, T = tokens,
// S = memory rows.
#pragma once

#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "kernels/registry.hpp"
#include "optimized/decoder.hpp"

namespace attncheck::testing {

// The decoder and its sessions, as the decoder's tests name them.
using optimized::BatchSession;
using optimized::Decoder;
using optimized::Session;

// A built-in kernel's registry entry: the kernel with what it declares to the decoder.
inline const KernelEntry& builtin(const std::string& name) {
    const KernelEntry* e = find_kernel(name, KernelRole::builtin);
    REQUIRE(e);
    return *e;
}

inline std::string describe(const ModelConfig& c) {
    std::ostringstream s;
    s << "d=" << c.d_model << " h=" << c.n_heads << " f=" << c.d_ff << " L=" << c.n_layers << " V=" << c.vocab_size
      << " N=" << c.max_len << " norm=" << to_string(c.norm) << " cross=" << c.cross_attention
      << " positional=" << to_string(c.positional) << " activation=" << to_string(c.activation)
      << " embed_scale=" << (c.embed_scale_sqrt_d ? "sqrt_d_model" : "1") << " tied=" << c.tie_embeddings;
    return s.str();
}

// Odd sizes on purpose: d = 24 is not a multiple of the 32-column panel, dk = 8, f = 40 and
// V = 37 leave ragged last panels.
inline ModelConfig small_config() {
    return {.vocab_size = 37, .d_model = 24, .n_heads = 3, .d_ff = 40, .n_layers = 2, .max_len = 24};
}

inline std::vector<int> random_tokens(std::mt19937_64& rng, int n, int V) {
    std::uniform_int_distribution<int> u(0, V - 1);
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = u(rng);
    return t;
}

// Memory m [S, d] with valid_len drawn from {0, 1 .. S}: 0 is the all-padding edge case.
inline std::optional<Memory> random_memory(std::mt19937_64& rng, const ModelConfig& c, int S, int valid) {
    if (!c.cross_attention) return std::nullopt;
    Memory m;
    m.rows = S;
    m.valid_len = valid;
    std::normal_distribution<float> n(0.0f, 1.0f);
    m.data.resize(std::size_t(S) * std::size_t(c.d_model));
    for (float& x : m.data) x = n(rng);
    return m;
}

// ---------------------------------------------------------------------------------------------
// MODEL.md "Version 2 additions": grouped-query heads, the sliding window (a rolling cache), rope
// ---------------------------------------------------------------------------------------------

// d = 24 over 6 heads of dk = 4 (even: rope), N = 24: each version 2 feature alone and together.
inline std::vector<ModelConfig> v2_configs() {
    std::vector<ModelConfig> out;
    ModelConfig base = small_config();
    base.n_heads = 6;
    for (int kv : {0, 2, 3, 1})
        for (int window : {-1, 0, 3, 30})  // 30 >= N - 1: hides nothing
            for (bool rope : {false, true}) {
                ModelConfig c = base;
                c.n_kv_heads = kv;
                c.attn_window = window;
                if (rope) c.positional = Positional::rope;
                if (!c.is_version2()) continue;
                const int i = int(out.size());
                c.norm = i % 2 ? Norm::pre : Norm::post;
                c.cross_attention = i % 3 == 0;
                c.tie_embeddings = i % 4 < 2;
                c.activation = i % 5 == 0 ? Activation::gelu : Activation::relu;
                out.push_back(c);
            }
    return out;
}

inline std::string describe_v2(const ModelConfig& c) {
    return describe(c) + " n_kv_heads=" + std::to_string(c.n_kv_heads) + " attn_window=" +
           std::to_string(c.attn_window);
}

}  // namespace attncheck::testing
