// tests/reference/variants.hpp — every model configuration the decoder tests run, and random
// inputs for them.
//
// MODEL.md has six independent switches (norm, cross_attention, activation, tie_embeddings,
// positional, embed_scale): 2*2*3*2*2*2 = 96 combinations. A test that loops over
// variant(0 .. kNumVariants-1) covers every one of them, so a bug that shows only in, say,
// pre-norm + gelu_tanh + untied heads cannot hide. The sizes alternate between an even width
// (d = 8, h = 2) and an odd one (d = 9, h = 3) so that the sinusoidal table's odd last column
// and a head width that is not a power of two are exercised too.
//
// Dimension legend: V = vocab, d = d_model, h = heads, f = d_ff, L = layers, N = max_len,
// T = tokens, S = memory rows.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attncheck/model.hpp"

namespace attncheck::test {

inline constexpr int kNumVariants = 2 * 2 * 3 * 2 * 2 * 2;

// The index-th combination of the six switches (mixed-radix digits of index).
inline ModelConfig variant(int index) {
    ModelConfig c;
    int i = index;
    c.norm = (i % 2) ? Norm::pre : Norm::post;                   i /= 2;
    c.cross_attention = (i % 2) != 0;                            i /= 2;
    c.activation = std::vector<Activation>{Activation::relu, Activation::gelu,
                                           Activation::gelu_tanh}[std::size_t(i % 3)];
    i /= 3;
    c.tie_embeddings = (i % 2) != 0;                             i /= 2;
    c.positional = (i % 2) ? Positional::learned : Positional::sinusoidal;  i /= 2;
    c.embed_scale_sqrt_d = (i % 2) != 0;
    const bool odd_width = (index % 5) % 2 == 1;  // not aligned with any switch's digit
    c.vocab_size = 13;
    c.d_model = odd_width ? 9 : 8;
    c.n_heads = odd_width ? 3 : 2;
    c.d_ff = 16;
    c.n_layers = 2;
    c.max_len = 12;
    c.ln_eps = 1e-5;
    return c;
}

// MODEL.md "Version 2 additions" on top of the switches: n_kv_heads in {absent, 1, 2, 4 (given
// explicitly)}, attn_window in {-1, 0, 1, 3}, positional rope or the variant's own. d = 16 over
// 4 heads (dk = 4, even, as rope needs); index digits pick the three, and a spread of the 96
// switch combinations under them.
inline constexpr int kNumVariantsV2 = 4 * 4 * 2;
inline ModelConfig variant_v2(int index) {
    ModelConfig c = variant((index * 37) % kNumVariants);
    c.d_model = 16;
    c.n_heads = 4;
    c.n_kv_heads = std::vector<int>{0, 1, 2, 4}[std::size_t(index % 4)];
    c.attn_window = std::vector<int>{-1, 0, 1, 3}[std::size_t((index / 4) % 4)];
    if ((index / 16) % 2 == 1) c.positional = Positional::rope;
    if (c.positional == Positional::rope) c.rope_theta = (index % 3 == 0) ? 10000.0 : 50.0;
    return c;
}

// One line naming every switch, for INFO().
inline std::string describe(const ModelConfig& c) {
    std::ostringstream s;
    s << "norm=" << to_string(c.norm) << " cross=" << c.cross_attention
      << " act=" << to_string(c.activation) << " tied=" << c.tie_embeddings
      << " pos=" << to_string(c.positional) << " scale_sqrt_d=" << c.embed_scale_sqrt_d
      << " V=" << c.vocab_size << " d=" << c.d_model << " h=" << c.n_heads << " f=" << c.d_ff
      << " L=" << c.n_layers << " N=" << c.max_len;
    if (c.is_version2())
        s << " n_kv_heads=" << c.n_kv_heads << " attn_window=" << c.attn_window << " rope_theta=" << c.rope_theta;
    return s.str();
}

inline std::vector<int> random_tokens(const ModelConfig& c, std::mt19937_64& rng, int n) {
    std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = tok(rng);
    return t;
}

// A memory [S, d] of N(0, 1) values with valid_len real rows (the rest is padding), or nullopt
// for a model without cross-attention.
inline std::optional<Memory> random_memory(const ModelConfig& c, std::mt19937_64& rng, int rows,
                                           int valid_len) {
    if (!c.cross_attention) return std::nullopt;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Memory m;
    m.rows = rows;
    m.valid_len = valid_len;
    m.data.resize(std::size_t(rows) * std::size_t(c.d_model));
    for (float& x : m.data) x = normal(rng);
    return m;
}

// Seeds: one per test case, printed by INFO so that a failure can be replayed.
inline std::uint64_t case_seed(std::uint64_t test_id, int index) {
    return test_id * 1000003u + std::uint64_t(index);
}

// One variant as a test case: its config, init_model(config, seed) and a random stream seeded
// alike, with seed = case_seed(test_id, index); describe() is the line for INFO().
struct VariantCase {
    int index;
    ModelConfig config;
    std::uint64_t seed;
    Model model;
    std::mt19937_64 rng;

    VariantCase(std::uint64_t test_id, int variant_index)
        : VariantCase(test_id, variant_index, variant(variant_index)) {}
    // A case of another config list (variant_v2): the seed depends on (test_id, index) only.
    VariantCase(std::uint64_t test_id, int variant_index, const ModelConfig& c)
        : index(variant_index),
          config(c),
          seed(case_seed(test_id, variant_index)),
          model(init_model(config, seed)),
          rng(seed) {}

    std::string describe() const {
        return "variant " + std::to_string(index) + " (" + test::describe(config) + "), seed " + std::to_string(seed);
    }
    std::vector<int> tokens(int n) { return random_tokens(config, rng, n); }
    std::optional<Memory> memory(int rows, int valid_len) { return random_memory(config, rng, rows, valid_len); }
};

}  // namespace attncheck::test
