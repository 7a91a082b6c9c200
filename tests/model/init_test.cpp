// Tests of init_model: determinism, independence of the per-tensor streams, and the scales
// that make the random model numerically meaningful.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "tests/model/model_test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

using namespace attncheck;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.shape == b.shape && a.data.size() == b.data.size() &&
           std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

struct Stats {
    double mean = 0, std = 0, min = 1e30, max = -1e30;
};
Stats stats(const std::vector<float>& v) {
    Stats s;
    for (float x : v) {
        s.mean += x;
        s.min = std::min<double>(s.min, x);
        s.max = std::max<double>(s.max, x);
    }
    s.mean /= double(v.size());
    for (float x : v) s.std += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(s.std / double(v.size()));
    return s;
}

}  // namespace

TEST_CASE("init: same seed gives identical bytes, a different seed different ones", "[init]") {
    ModelConfig c = testing::distinct_sizes_config();
    c.cross_attention = true;
    c.positional = Positional::learned;
    c.tie_embeddings = false;
    c.norm = Norm::pre;
    const Model a = init_model(c, 123), b = init_model(c, 123), other = init_model(c, 124);
    CHECK_NOTHROW(a.validate());
    for (const TensorSpec& spec : expected_tensors(c)) {
        INFO("tensor " << spec.name);
        CHECK(same_bytes(a.at(spec.name), b.at(spec.name)));
        CHECK_FALSE(same_bytes(a.at(spec.name), other.at(spec.name)));
    }
    // The saved files are byte-identical too.
    testing::TempPath pa(".safetensors"), pb(".safetensors");
    save_model(a, pa);
    save_model(b, pb);
    CHECK(testing::read_bytes(pa) == testing::read_bytes(pb));
}

TEST_CASE("init: every tensor has its own stream", "[init]") {
    // Adding cross-attention or layers must not change the tensors that both models have.
    ModelConfig small = testing::distinct_sizes_config();
    ModelConfig big = small;
    big.cross_attention = true;
    big.n_layers = 3;
    const Model a = init_model(small, 9), b = init_model(big, 9);
    for (const TensorSpec& spec : expected_tensors(small)) {
        INFO("tensor " << spec.name);
        CHECK(same_bytes(a.at(spec.name), b.at(spec.name)));
    }
    // Tensors of equal shape are not copies of each other.
    CHECK_FALSE(same_bytes(a.at("layers.0.self_attn.q.weight"), a.at("layers.0.self_attn.k.weight")));
    CHECK_FALSE(same_bytes(a.at("layers.0.self_attn.q.weight"), a.at("layers.1.self_attn.q.weight")));
}

TEST_CASE("init: scales follow the documented choices", "[init]") {
    ModelConfig c = preset_config("small");  // d = 128, f = 512: enough samples for statistics
    c.tie_embeddings = false;
    c.positional = Positional::learned;
    const Model m = init_model(c, 2024);
    const double d = c.d_model, f = c.d_ff;

    const Stats q = stats(m.at("layers.0.self_attn.q.weight").data);
    CHECK(q.max <= 1 / std::sqrt(d));
    CHECK(q.min >= -1 / std::sqrt(d));
    CHECK(q.std == Approx(1 / std::sqrt(3 * d)).epsilon(0.05));
    CHECK(std::abs(q.mean) < 0.01);
    const Stats fc2 = stats(m.at("layers.1.ffn.fc2.weight").data);  // fan-in f
    CHECK(fc2.std == Approx(1 / std::sqrt(3 * f)).epsilon(0.05));
    const Stats fc2b = stats(m.at("layers.1.ffn.fc2.bias").data);
    CHECK(fc2b.max <= 1 / std::sqrt(f));
    CHECK(fc2b.min >= -1 / std::sqrt(f));

    // embed * sqrt(d) has unit std (embed_scale = sqrt_d_model).
    CHECK(stats(m.at("embed.weight").data).std * std::sqrt(d) == Approx(1.0).epsilon(0.05));
    ModelConfig unscaled = c;
    unscaled.embed_scale_sqrt_d = false;
    CHECK(stats(init_model(unscaled, 2024).at("embed.weight").data).std == Approx(1.0).epsilon(0.05));
    CHECK(stats(m.at("pos.weight").data).std == Approx(0.5).epsilon(0.05));

    // LayerNorm: weight near 1, bias near 0, but neither exactly.
    const Stats w = stats(m.at("layers.0.norm_self.weight").data);
    const Stats b = stats(m.at("layers.0.norm_self.bias").data);
    CHECK(w.min >= 0.9);
    CHECK(w.max <= 1.1);
    CHECK(w.std > 0.03);
    CHECK(b.min >= -0.1);
    CHECK(b.max <= 0.1);
    CHECK(b.std > 0.03);
}

TEST_CASE("init: refuses an invalid config", "[init]") {
    ModelConfig c = testing::distinct_sizes_config();
    c.n_heads = 3;
    CHECK_THROWS_AS(init_model(c, 1), InputError);
}
