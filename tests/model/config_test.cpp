// Tests of ModelConfig: presets, limits, and the strict metadata <-> config mapping.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "model/limits.hpp"
#include "tests/model/model_test_util.hpp"

#include <catch2/catch.hpp>

using namespace attncheck;
using Catch::Matchers::Contains;

TEST_CASE("presets have exactly the documented sizes and options", "[config]") {
    struct Want { const char* name; int d, h, f, L, V, N; };
    for (const Want& w : {Want{"tiny", 16, 2, 32, 2, 32, 32}, Want{"small", 128, 4, 512, 2, 512, 256},
                          Want{"base", 512, 8, 2048, 6, 8192, 2048}}) {
        INFO("preset " << w.name);
        const ModelConfig c = preset_config(w.name);
        CHECK(c.d_model == w.d);
        CHECK(c.n_heads == w.h);
        CHECK(c.d_ff == w.f);
        CHECK(c.n_layers == w.L);
        CHECK(c.vocab_size == w.V);
        CHECK(c.max_len == w.N);
        CHECK(c.norm == Norm::post);
        CHECK(c.positional == Positional::sinusoidal);
        CHECK(c.activation == Activation::relu);
        CHECK(c.tie_embeddings);
        CHECK(c.embed_scale_sqrt_d);
        CHECK_FALSE(c.cross_attention);
        CHECK(c.ln_eps == 1e-5);
        CHECK_NOTHROW(c.validate());
    }
    CHECK_THROWS_WITH(preset_config("huge"), Contains("unknown preset 'huge'"));
}

TEST_CASE("validate names the bad field", "[config]") {
    const ModelConfig ok = preset_config("tiny");
    ModelConfig c = ok;
    c.d_model = 0;
    CHECK_THROWS_WITH(c.validate(), Contains("d_model = 0"));
    c = ok;
    c.vocab_size = -3;
    CHECK_THROWS_WITH(c.validate(), Contains("vocab_size = -3"));
    c = ok;
    c.n_heads = 3;
    CHECK_THROWS_WITH(c.validate(), Contains("not divisible by n_heads = 3"));
    c = ok;
    c.ln_eps = 0.0;
    CHECK_THROWS_WITH(c.validate(), Contains("ln_eps"));
    c = ok;
    c.ln_eps = std::nan("");
    CHECK_THROWS_WITH(c.validate(), Contains("ln_eps"));
    c = ok;
    c.max_len = int(limits::kMaxDimension) + 1;
    CHECK_THROWS_WITH(c.validate(), Contains("max_len") && Contains("exceeds the limit"));
    c = ok;
    c.n_layers = int(limits::kMaxLayers) + 1;
    CHECK_THROWS_WITH(c.validate(), Contains("n_layers") && Contains("exceeds the limit"));
    // Each dimension within its cap, but the weights together would be ~ 2^40 floats.
    c = ok;
    c.d_model = 1 << 20;
    c.d_ff = 1 << 20;
    c.max_len = 16;
    CHECK_THROWS_WITH(c.validate(), Contains("parameters exceed the limit"));
    c = ok;
    c.d_model = 1 << 16;
    c.n_heads = 1;
    c.max_len = 1 << 20;  // the N x d positional table alone would be 2^36 floats
    CHECK_THROWS_WITH(c.validate(), Contains("max_len * d_model"));
}

// Every combination of the categorical options.
static std::vector<ModelConfig> all_option_configs() {
    std::vector<ModelConfig> out = testing::option_configs();
    for (ModelConfig& c : out) c.ln_eps = 3.0e-6;  // a non-default eps, to round-trip too
    return out;
}

TEST_CASE("metadata round trip covers every option", "[config]") {
    for (const ModelConfig& c : all_option_configs()) {
        const auto meta = config_to_metadata(c);
        CHECK(meta.at("format") == "attncheck-decoder-1");
        CHECK(meta.size() == 14);
        CHECK(config_from_metadata(meta) == c);
    }
    ModelConfig odd_eps = preset_config("tiny");
    odd_eps.ln_eps = 0.1 + 0.2;  // not short in decimal: must still read back bit for bit
    CHECK(config_from_metadata(config_to_metadata(odd_eps)).ln_eps == odd_eps.ln_eps);
}

namespace {
std::map<std::string, std::string> with(const std::string& key, const std::string& value) {
    auto meta = config_to_metadata(preset_config("tiny"));
    meta[key] = value;
    return meta;
}
}  // namespace

TEST_CASE("metadata integers are strict positive decimals", "[config][metadata]") {
    for (const char* bad : {"12x", "-3", "0", "1e3", "99999999999", "", " 16", "16 ", "+16",
                            "0x10", "007", "16.0"}) {
        INFO("d_model = \"" << bad << "\"");
        CHECK_THROWS_WITH(config_from_metadata(with("d_model", bad)),
                          Contains("'d_model'") && Contains(std::string("\"") + bad + "\""));
    }
    CHECK_THROWS_WITH(config_from_metadata(with("max_len", "4294967296")),
                      Contains("does not fit"));
    // A well-formed integer that breaks a config rule is refused by validate().
    CHECK_THROWS_WITH(config_from_metadata(with("n_heads", "3")), Contains("not divisible"));
    CHECK_THROWS_WITH(config_from_metadata(with("vocab_size", "2000000")),
                      Contains("vocab_size") && Contains("exceeds the limit"));
}

TEST_CASE("metadata ln_eps is a finite positive decimal float", "[config][metadata]") {
    for (const char* good : {"1e-5", "0.00001", "1E-05", "1e+0", ".5", "2."}) {
        INFO("ln_eps = " << good);
        CHECK_NOTHROW(config_from_metadata(with("ln_eps", good)));
    }
    for (const char* bad : {"inf", "nan", "-1e-5", "0", "0.0", "1e-5x", "0x1p-3", "", "e-5",
                            "1e999", "+1e-5", "1e-5 "}) {
        INFO("ln_eps = \"" << bad << "\"");
        CHECK_THROWS_WITH(config_from_metadata(with("ln_eps", bad)), Contains("'ln_eps'"));
    }
}

TEST_CASE("metadata enumerations refuse unknown values", "[config][metadata]") {
    CHECK_THROWS_WITH(config_from_metadata(with("format", "attncheck-decoder-2")),
                      Contains("'format'") && Contains("attncheck-decoder-2"));
    CHECK_THROWS_WITH(config_from_metadata(with("norm", "mid")), Contains("'norm' = \"mid\""));
    CHECK_THROWS_WITH(config_from_metadata(with("cross_attention", "True")),
                      Contains("'cross_attention'"));
    CHECK_THROWS_WITH(config_from_metadata(with("positional", "rope")), Contains("'positional'"));
    CHECK_THROWS_WITH(config_from_metadata(with("activation", "silu")),
                      Contains("'activation' = \"silu\""));
    CHECK_THROWS_WITH(config_from_metadata(with("embed_scale", "2")), Contains("'embed_scale'"));
    CHECK_THROWS_WITH(config_from_metadata(with("tie_embeddings", "yes")),
                      Contains("'tie_embeddings'"));
}

TEST_CASE("metadata with a missing or unknown key is refused", "[config][metadata]") {
    for (const auto& [key, value] : config_to_metadata(preset_config("tiny"))) {
        (void)value;
        auto meta = config_to_metadata(preset_config("tiny"));
        meta.erase(key);
        INFO("without " << key);
        CHECK_THROWS_WITH(config_from_metadata(meta), Contains("missing key '" + key + "'"));
    }
    // A typo must not silently fall back to a default.
    CHECK_THROWS_WITH(config_from_metadata(with("n_head", "2")), Contains("unknown key 'n_head'"));
}
