// optimized/weights.cpp — packing a model's weights for the optimized decoder (weights.hpp).
#include "optimized/weights.hpp"

#include <cmath>
#include <cstddef>
#include <string>

#include "model/positions.hpp"

namespace attncheck::optimized {

namespace {

Norm32 load_norm(const Model& m, const std::string& prefix) {
    return {m.at(prefix + "weight").data, m.at(prefix + "bias").data};
}

LayerWeights pack_layer(const Model& m, int i) {
    const ModelConfig& c = m.config;
    const int d = c.d_model, f = c.d_ff, kv = c.kv_heads() * c.head_dim();
    auto w = [&](const std::string& name) { return m.at(name).data.data(); };
    const std::string p = "layers." + std::to_string(i) + ".";
    LayerWeights L;
    const std::string sa = p + "self_attn.";
    L.qkv = pack_weights({{w(sa + "q.weight"), d, w(sa + "q.bias")},
                          {w(sa + "k.weight"), kv, w(sa + "k.bias")},
                          {w(sa + "v.weight"), kv, w(sa + "v.bias")}}, d);
    L.o = pack_weights(w(sa + "o.weight"), d, d, w(sa + "o.bias"));
    L.norm_self = load_norm(m, p + "norm_self.");
    if (c.cross_attention) {
        const std::string ca = p + "cross_attn.";
        L.cross_q = pack_weights(w(ca + "q.weight"), d, d, w(ca + "q.bias"));
        L.cross_kv = pack_weights({{w(ca + "k.weight"), d, w(ca + "k.bias")},
                                   {w(ca + "v.weight"), d, w(ca + "v.bias")}}, d);
        L.cross_o = pack_weights(w(ca + "o.weight"), d, d, w(ca + "o.bias"));
        L.norm_cross = load_norm(m, p + "norm_cross.");
    }
    L.fc1 = pack_weights(w(p + "ffn.fc1.weight"), f, d, w(p + "ffn.fc1.bias"));
    L.fc2 = pack_weights(w(p + "ffn.fc2.weight"), d, f, w(p + "ffn.fc2.bias"));
    L.norm_ffn = load_norm(m, p + "norm_ffn.");
    return L;
}

}  // namespace

std::unique_ptr<PackedWeights> pack_model(const Model& m) {
    m.validate();
    const ModelConfig& c = m.config;
    const int d = c.d_model;
    auto pw = std::make_unique<PackedWeights>();
    pw->config = c;
    pw->embed = m.at("embed.weight").data;
    pw->qkv_width = d + 2 * c.kv_heads() * c.head_dim();
    if (c.positional == Positional::learned) {
        pw->pos = m.at("pos.weight").data;
    } else if (c.positional == Positional::rope) {
        const RopeTable t = rope_table(std::size_t(c.max_len), std::size_t(c.head_dim()), c.rope_theta);
        pw->rope_cos.assign(t.cos.begin(), t.cos.end());  // each rounded to float once
        pw->rope_sin.assign(t.sin.begin(), t.sin.end());
    } else {
        const std::vector<double> table = sinusoidal_positions(std::size_t(c.max_len), std::size_t(d));
        pw->pos.assign(table.size(), 0.0f);
        for (std::size_t i = 0; i < table.size(); ++i) pw->pos[i] = float(table[i]);
    }
    pw->embed_scale = c.embed_scale_sqrt_d ? std::sqrt(float(d)) : 1.0f;
    pw->attn_scale = float(1.0 / std::sqrt(double(c.head_dim())));
    pw->act = c.activation == Activation::relu   ? Activation32::relu
              : c.activation == Activation::gelu ? Activation32::gelu
                                                 : Activation32::gelu_tanh;
    for (int i = 0; i < c.n_layers; ++i) pw->layers.push_back(pack_layer(m, i));
    if (c.norm == Norm::pre) pw->final_norm = load_norm(m, "final_norm.");
    pw->lm_head = pack_weights(m.lm_head().data.data(), c.vocab_size, d, nullptr);
    return pw;
}

void embed_row(const PackedWeights& P, int token, int position, float* x) {
    const std::size_t d = std::size_t(P.config.d_model);
    const float* e = P.embed.data() + std::size_t(token) * d;
    if (P.pos.empty()) {  // rope: the positions enter in the self-attention
        for (std::size_t c = 0; c < d; ++c) x[c] = e[c] * P.embed_scale;
        return;
    }
    const float* p = P.pos.data() + std::size_t(position) * d;
    for (std::size_t c = 0; c < d; ++c) x[c] = e[c] * P.embed_scale + p[c];
}

}  // namespace attncheck::optimized
