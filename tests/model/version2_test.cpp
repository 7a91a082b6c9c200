// Tests of MODEL.md "Version 2 additions" in the model library: n_kv_heads, attn_window,
// positional = rope and rope_theta, in the config, the metadata, the tensor set and files.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "tests/model/model_test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attncheck;
using Catch::Matchers::Contains;

namespace {

// d 24, 6 query heads of width 4 over 3 kv heads, a window of 5, rope with a non-default base.
ModelConfig gqa_window_rope() {
    ModelConfig c = preset_config("tiny");
    c.d_model = 24;
    c.n_heads = 6;
    c.n_kv_heads = 3;
    c.attn_window = 5;
    c.positional = Positional::rope;
    c.rope_theta = 500.0;
    return c;
}

std::map<std::string, std::string> v2_meta_with(const std::string& key, const std::string& value) {
    auto meta = config_to_metadata(gqa_window_rope());
    meta[key] = value;
    return meta;
}

}  // namespace

TEST_CASE("v2: a config without version 2 features is written as version 1", "[config][v2]") {
    const ModelConfig c = preset_config("tiny");
    CHECK_FALSE(c.is_version2());
    const auto meta = config_to_metadata(c);
    CHECK(meta.at("format") == "attncheck-decoder-1");
    CHECK_FALSE(meta.count("n_kv_heads"));
    CHECK_FALSE(meta.count("attn_window"));
    CHECK_FALSE(meta.count("rope_theta"));
    CHECK(c.kv_heads() == c.n_heads);
    CHECK(c.group_size() == 1);
}

TEST_CASE("v2: each feature alone makes a version 2 file that reads back equal", "[config][v2]") {
    std::vector<ModelConfig> configs;
    ModelConfig c = preset_config("tiny");
    c.n_heads = 4;
    c.n_kv_heads = 2;
    configs.push_back(c);
    c = preset_config("tiny");
    c.n_kv_heads = c.n_heads;  // written explicitly: still version 2, and reads back as given
    configs.push_back(c);
    for (int w : {0, 1, 31, 1000}) {
        c = preset_config("tiny");
        c.attn_window = w;
        configs.push_back(c);
    }
    c = preset_config("tiny");
    c.positional = Positional::rope;
    configs.push_back(c);
    c.rope_theta = 0.1 + 0.2;  // not short in decimal: must read back bit for bit
    configs.push_back(c);
    configs.push_back(gqa_window_rope());
    for (const ModelConfig& cfg : configs) {
        INFO("n_kv_heads " << cfg.n_kv_heads << " window " << cfg.attn_window << " positional "
                           << to_string(cfg.positional) << " theta " << cfg.rope_theta);
        CHECK(cfg.is_version2());
        const auto meta = config_to_metadata(cfg);
        CHECK(meta.at("format") == "attncheck-decoder-2");
        CHECK(config_from_metadata(meta) == cfg);
    }
}

TEST_CASE("v2: the grouped-query tensor shapes", "[config][v2]") {
    ModelConfig c = gqa_window_rope();
    c.cross_attention = true;
    std::map<std::string, std::vector<std::size_t>> shapes;
    for (const TensorSpec& t : expected_tensors(c)) shapes[t.name] = t.shape;
    // dk = 4, 3 kv heads: k and v of self-attention are [12, 24]; q, o and cross stay [24, 24].
    CHECK(shapes.at("layers.0.self_attn.k.weight") == std::vector<std::size_t>{12, 24});
    CHECK(shapes.at("layers.1.self_attn.v.weight") == std::vector<std::size_t>{12, 24});
    CHECK(shapes.at("layers.0.self_attn.k.bias") == std::vector<std::size_t>{12});
    CHECK(shapes.at("layers.0.self_attn.v.bias") == std::vector<std::size_t>{12});
    CHECK(shapes.at("layers.0.self_attn.q.weight") == std::vector<std::size_t>{24, 24});
    CHECK(shapes.at("layers.0.self_attn.o.weight") == std::vector<std::size_t>{24, 24});
    CHECK(shapes.at("layers.0.cross_attn.k.weight") == std::vector<std::size_t>{24, 24});
    CHECK(shapes.at("layers.0.cross_attn.v.bias") == std::vector<std::size_t>{24});
    CHECK_FALSE(shapes.count("pos.weight"));  // rope has no table
}

TEST_CASE("v2: validate names the bad key", "[config][v2]") {
    const ModelConfig ok = gqa_window_rope();
    CHECK_NOTHROW(ok.validate());
    ModelConfig c = ok;
    c.n_kv_heads = 4;  // does not divide 6
    CHECK_THROWS_WITH(c.validate(), Contains("n_kv_heads = 4") && Contains("dividing n_heads = 6"));
    c = ok;
    c.n_kv_heads = -2;
    CHECK_THROWS_WITH(c.validate(), Contains("n_kv_heads = -2"));
    c = ok;
    c.attn_window = -2;
    CHECK_THROWS_WITH(c.validate(), Contains("attn_window = -2"));
    c = ok;
    c.d_model = 18;  // dk = 3
    c.n_kv_heads = 0;
    CHECK_THROWS_WITH(c.validate(), Contains("rope") && Contains("dk") && Contains("3"));
    for (double theta : {0.0, -1.0, double(std::nan("")), double(INFINITY)}) {
        c = ok;
        c.rope_theta = theta;
        CHECK_THROWS_WITH(c.validate(), Contains("rope_theta"));
    }
    c = preset_config("tiny");
    c.rope_theta = 500.0;  // a base without rope
    CHECK_THROWS_WITH(c.validate(), Contains("rope_theta") && Contains("not rope"));
}

TEST_CASE("v2: version 2 keys need format attncheck-decoder-2, and the reverse", "[config][v2]") {
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"n_kv_heads", "1"}, {"attn_window", "3"}}) {
        auto meta = config_to_metadata(preset_config("tiny"));
        meta[key] = value;
        INFO(key);
        CHECK_THROWS_WITH(config_from_metadata(meta),
                          Contains("'" + key + "'") && Contains("attncheck-decoder-2"));
        meta["format"] = "attncheck-decoder-2";
        CHECK_NOTHROW(config_from_metadata(meta));
    }
    auto meta = config_to_metadata(gqa_window_rope());
    meta["format"] = "attncheck-decoder-1";
    CHECK_THROWS_WITH(config_from_metadata(meta), Contains("version 2 key"));
    meta = config_to_metadata(preset_config("tiny"));
    meta["positional"] = "rope";
    CHECK_THROWS_WITH(config_from_metadata(meta),
                      Contains("'positional'") && Contains("attncheck-decoder-2"));
    // The reverse: format 2 with nothing of version 2 in it.
    meta = config_to_metadata(preset_config("tiny"));
    meta["format"] = "attncheck-decoder-2";
    CHECK_THROWS_WITH(config_from_metadata(meta), Contains("'format'") && Contains("no version 2 key"));
    // rope_theta without rope.
    meta = config_to_metadata(gqa_window_rope());
    meta["positional"] = "sinusoidal";
    CHECK_THROWS_WITH(config_from_metadata(meta), Contains("'rope_theta'") && Contains("rope"));
}

TEST_CASE("v2: bad metadata values are refused naming the key", "[config][v2]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"n_kv_heads", "0"},    {"n_kv_heads", "-1"},  {"n_kv_heads", "2x"},  {"n_kv_heads", "4"},
        {"n_kv_heads", "12"},   {"attn_window", "-2"}, {"attn_window", "01"}, {"attn_window", ""},
        {"attn_window", "1.5"}, {"attn_window", "-0"}, {"rope_theta", "0"},   {"rope_theta", "-1"},
        {"rope_theta", "inf"},  {"rope_theta", "nan"}, {"rope_theta", ""},    {"rope_theta", "1e999"}};
    for (const auto& [key, value] : cases) {
        INFO(key << " = \"" << value << "\"");
        CHECK_THROWS_WITH(config_from_metadata(v2_meta_with(key, value)), Contains(key));
    }
    // rope with an odd head width: d 18 over 6 heads is dk 3.
    auto meta = v2_meta_with("d_model", "18");
    CHECK_THROWS_WITH(config_from_metadata(meta), Contains("rope") && Contains("dk"));
}

TEST_CASE("v2: a version 2 model file round-trips and a mis-shaped kv tensor is refused", "[v2]") {
    const Model m = init_model(gqa_window_rope(), 7);
    testing::TempPath path(".safetensors");
    save_model(m, path);
    const Model back = load_model(path);
    CHECK(back.config == m.config);
    REQUIRE(back.tensors.size() == m.tensors.size());
    for (const auto& [name, t] : m.tensors) {
        INFO(name);
        CHECK(back.at(name).shape == t.shape);
        CHECK(back.at(name).data == t.data);
    }
    // The same tensors under a config that says every head has its own k and v.
    Model wrong = m;
    wrong.config.n_kv_heads = 0;
    CHECK_THROWS_WITH(wrong.validate(),
                      Contains("layers.0.self_attn.k.weight") && Contains("[12, 24]") &&
                          Contains("expected [24, 24]"));
}
