// tests/cli/cli_init_test.cpp — `attncheck init`: the presets, every override flag, and a file
// determined by its seed (each file read back by load_model and by `attncheck logits`).
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "cli_models.hpp"

using namespace cli_test;

TEST_CASE("init writes each preset and logits reads it back as finite [T, V]", "[cli][init][logits]") {
    TempDir dir;
    for (const std::string preset : {"tiny", "small", "base", "llama-tiny"}) {
        INFO("preset " << preset);
        const std::string model = init_model_file(dir, preset + ".safetensors", {"--preset", preset, "--seed", "3"});
        const attncheck::Model m = attncheck::load_model(model);
        REQUIRE(m.config == attncheck::preset_config(preset));
        const std::vector<int> tokens = {1, 2, 3, 0, 5};
        logits_npy(dir, model, tokens, std::size_t(m.config.vocab_size), {});
    }
}

TEST_CASE("init applies every override flag to the file's config", "[cli][init]") {
    TempDir dir;
    const std::string model = init_model_file(
        dir, "custom.safetensors",
        {"--preset", "tiny", "--vocab-size", "20", "--d-model", "12", "--n-heads", "3", "--d-ff", "10",
         "--n-layers", "3", "--max-len", "9", "--norm", "pre", "--cross-attention", "--positional", "learned",
         "--activation", "gelu_tanh", "--embed-scale", "1", "--tie-embeddings", "false", "--ln-eps", "1e-6"});
    using namespace attncheck;
    const ModelConfig want{.vocab_size = 20, .d_model = 12, .n_heads = 3, .d_ff = 10, .n_layers = 3, .max_len = 9,
                           .norm = Norm::pre, .cross_attention = true, .positional = Positional::learned,
                           .activation = Activation::gelu_tanh, .embed_scale_sqrt_d = false,
                           .tie_embeddings = false, .ln_eps = 1e-6};
    const attncheck::Model m = attncheck::load_model(model);
    CHECK(m.config == want);
    CHECK(m.tensors.count("lm_head.weight") == 1);
    CHECK(m.tensors.count("pos.weight") == 1);
    CHECK(m.tensors.count("final_norm.weight") == 1);

    // Each spelling of a boolean flag.
    const auto cross_of = [&](const std::vector<std::string>& flags) {
        return attncheck::load_model(init_model_file(dir, "b.safetensors", flags)).config.cross_attention;
    };
    CHECK(cross_of({"--cross-attention"}));
    CHECK(cross_of({"--cross-attention", "true"}));
    CHECK(cross_of({"--cross-attention=true"}));
    CHECK_FALSE(cross_of({"--cross-attention", "false"}));
    CHECK_FALSE(cross_of({"--cross-attention=false"}));
    CHECK_FALSE(cross_of({}));  // the tiny preset has none
}

TEST_CASE("init writes version 2 models: the llama-tiny preset and the version 2 flags", "[cli][init]") {
    TempDir dir;
    using namespace attncheck;
    const Model llama = load_model(init_model_file(dir, "llama.safetensors", {"--preset", "llama-tiny"}));
    CHECK(llama.config == preset_config("llama-tiny"));
    CHECK(llama.config.n_kv_heads == 2);
    CHECK(llama.config.n_heads == 4);
    CHECK(llama.config.positional == Positional::rope);
    CHECK(llama.config.norm == Norm::pre);
    CHECK(llama.at("layers.0.self_attn.k.weight").shape == std::vector<std::size_t>{16, 32});
    CHECK(llama.tensors.count("pos.weight") == 0);

    const Model custom = load_model(init_model_file(
        dir, "v2.safetensors",
        {"--preset", "tiny", "--n-heads", "4", "--n-kv-heads", "1", "--attn-window", "3", "--positional", "rope",
         "--rope-theta", "500"}));
    ModelConfig want = preset_config("tiny");
    want.n_heads = 4;
    want.n_kv_heads = 1;
    want.attn_window = 3;
    want.positional = Positional::rope;
    want.rope_theta = 500.0;
    CHECK(custom.config == want);
    CHECK(custom.at("layers.1.self_attn.v.weight").shape == std::vector<std::size_t>{4, 16});
}

TEST_CASE("init is deterministic in its seed", "[cli][init]") {
    TempDir dir;
    const std::string a = slurp(init_model_file(dir, "a.safetensors", {"--seed", "11"}));
    const std::string b = slurp(init_model_file(dir, "b.safetensors", {"--seed", "11"}));
    const std::string c = slurp(init_model_file(dir, "c.safetensors", {"--seed", "12"}));
    CHECK(a == b);
    CHECK(a != c);
}
