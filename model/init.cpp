// model/init.cpp — random weights that are identical on every platform, compiler and thread
// count for a given (config, seed), at scales that give a numerically meaningful model.
//
// Why not <random>: std::uniform_real_distribution and std::normal_distribution are
// implementation-defined, so libstdc++ and libc++ give different weights for the same seed.
// We use splitmix64 (Steele et al., 2014; passes BigCrush) and turn its top 24 bits into a
// float exactly, then scale with one IEEE multiply: every step is exactly specified.
// Each tensor has its own stream seeded by (seed, tensor name), so adding a tensor (say,
// cross-attention) does not change the others, and tensors could be filled in parallel.
//
// Scales (all uniform, since a normal needs log/cos whose last bit varies between libms):
// - linear weight [out, in] and bias [out]: U(-1/sqrt(in), 1/sqrt(in)), PyTorch's nn.Linear
//   default; keeps activations O(1) through each projection.
// - embed.weight: std 1/sqrt(d) with embed_scale = sqrt_d_model (so embed * sqrt(d) has unit
//   std per component, like the sinusoidal table), std 1 with embed_scale = 1. Tied to the LM
//   head, this gives logits of std ~1 after the final LayerNorm.
// - pos.weight (learned): std 0.5, comparable to the sinusoidal table's rms 1/sqrt(2), so a
//   position bug (an off-by-one cache position, pos[p] read for the wrong p) moves the logits
//   by far more than any tolerance, exactly as it would with sinusoidal positions.
// - LayerNorm weight 1 + U(-0.1, 0.1), bias U(-0.1, 0.1): not exactly 1 and 0, so a decoder
//   that swaps them, ignores one, or applies the wrong norm is visibly wrong.
#include "attncheck/model.hpp"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

namespace attncheck {

namespace {

// splitmix64's output function: a bijective 64-bit mixer.
constexpr std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// FNV-1a over the tensor name, then mixed with the seed.
std::uint64_t stream_seed(std::uint64_t seed, const std::string& name) {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ULL;
    return mix64(seed ^ mix64(h));
}

class SplitMix64 {
public:
    explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ULL); }
    // Uniform in [-1, 1): 2^24 equally spaced values, each exactly a float.
    float symmetric() {
        const float u = float(next() >> 40) * 0x1p-24f;  // [0, 1), exact
        return 2.0f * u - 1.0f;                          // exact in float
    }

private:
    std::uint64_t state_;
};

void fill_uniform(Tensor& t, std::uint64_t seed, const std::string& name, float center,
                  float half_width) {
    SplitMix64 rng(stream_seed(seed, name));
    for (float& x : t.data) x = center + half_width * rng.symmetric();
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Model init_model(const ModelConfig& c, std::uint64_t seed) {
    c.validate();
    // A uniform U(-a, a) has std a / sqrt(3).
    const float sqrt3 = std::sqrt(3.0f);
    const float inv_sqrt_d = 1.0f / std::sqrt(float(c.d_model));
    const std::vector<TensorSpec> specs = expected_tensors(c);
    std::map<std::string, std::size_t> fan_in_of;  // weight name -> in (its last dimension)
    for (const TensorSpec& s : specs) {
        if (s.shape.size() == 2) fan_in_of[s.name] = s.shape[1];
    }
    Model m;
    m.config = c;
    for (const TensorSpec& spec : specs) {
        Tensor t;
        t.shape = spec.shape;
        std::size_t n = 1;
        for (std::size_t s : spec.shape) n *= s;
        t.data.resize(n);
        const std::string& name = spec.name;
        const bool is_norm = name == "final_norm.weight" || name == "final_norm.bias" ||
                             name.find(".norm_") != std::string::npos;
        if (name == "embed.weight") {
            const float std_dev = c.embed_scale_sqrt_d ? inv_sqrt_d : 1.0f;
            fill_uniform(t, seed, name, 0.0f, std_dev * sqrt3);
        } else if (name == "pos.weight") {
            fill_uniform(t, seed, name, 0.0f, 0.5f * sqrt3);
        } else if (is_norm) {
            fill_uniform(t, seed, name, ends_with(name, ".weight") ? 1.0f : 0.0f, 0.1f);
        } else {
            // A linear layer (lm_head.weight included): fan-in is the weight's last dim, and
            // a bias uses its weight's fan-in.
            const std::string weight =
                ends_with(name, ".bias") ? name.substr(0, name.size() - 4) + "weight" : name;
            const std::size_t fan_in = fan_in_of.at(weight);
            fill_uniform(t, seed, name, 0.0f, 1.0f / std::sqrt(float(fan_in)));
        }
        m.tensors.emplace(name, std::move(t));
    }
    return m;
}

}  // namespace attncheck
