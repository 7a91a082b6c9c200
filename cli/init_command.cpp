// cli/init_command.cpp — `attncheck init`: a model file with random weights.
//
// The config starts from a preset and every field can be overridden by its own flag, so a test
// can ask for exactly the variant it needs (pre-norm, learned positions, cross-attention, ...)
// without writing a file by hand. The weights come from init_model(config, seed), deterministic
// on every platform: the same flags give the same file.
#include <charconv>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "cli/commands.hpp"

namespace attncheck::cli {
namespace {

struct InitOptions {
    std::string out;
    std::string preset = "tiny";
    std::string seed_text = "0";
    // Overrides: set only when the flag was given (the preset decides otherwise).
    std::optional<int> vocab_size, d_model, n_heads, d_ff, n_layers, max_len;
    std::string norm, cross_attention, positional, activation, embed_scale, tie_embeddings;
    std::optional<double> ln_eps;
    std::optional<int> n_kv_heads, attn_window;
    std::optional<double> rope_theta;
};

std::uint64_t parse_seed(const std::string& text) {
    std::uint64_t seed = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, seed);
    if (text.empty() || ec != std::errc() || ptr != end)
        throw InputError("--seed '" + text + "': expected an integer in 0 .. 2^64-1 (18446744073709551615)");
    return seed;
}

bool parse_bool(const std::string& flag, const std::string& v) {
    if (v == "true") return true;
    if (v == "false") return false;
    throw InputError(flag + " = '" + v + "': expected true or false");
}

// A true|false option: the flag alone means true; an explicit value must follow with = or a space.
// Kept as text so that make_config() applies it only when given.
void add_bool_option(CLI::App& sub, const std::string& name, std::string& value, const std::string& help) {
    sub.add_option(name, value, help)->expected(0, 1)->default_str("true")->check(CLI::IsMember({"true", "false"}));
}

ModelConfig make_config(const InitOptions& o) {
    ModelConfig c = preset_config(o.preset);
    if (o.vocab_size) c.vocab_size = *o.vocab_size;
    if (o.d_model) c.d_model = *o.d_model;
    if (o.n_heads) c.n_heads = *o.n_heads;
    if (o.d_ff) c.d_ff = *o.d_ff;
    if (o.n_layers) c.n_layers = *o.n_layers;
    if (o.max_len) c.max_len = *o.max_len;
    if (!o.norm.empty()) c.norm = o.norm == "pre" ? Norm::pre : Norm::post;
    if (!o.cross_attention.empty()) c.cross_attention = parse_bool("--cross-attention", o.cross_attention);
    if (!o.positional.empty())
        c.positional = o.positional == "learned" ? Positional::learned
                       : o.positional == "rope"  ? Positional::rope
                                                 : Positional::sinusoidal;
    if (!o.activation.empty())
        c.activation = o.activation == "gelu"        ? Activation::gelu
                       : o.activation == "gelu_tanh" ? Activation::gelu_tanh
                                                     : Activation::relu;
    if (!o.embed_scale.empty()) c.embed_scale_sqrt_d = o.embed_scale == "sqrt_d_model";
    if (!o.tie_embeddings.empty()) c.tie_embeddings = parse_bool("--tie-embeddings", o.tie_embeddings);
    if (o.ln_eps) c.ln_eps = *o.ln_eps;
    if (o.n_kv_heads) c.n_kv_heads = *o.n_kv_heads;
    if (o.attn_window) c.attn_window = *o.attn_window;
    if (o.rope_theta) c.rope_theta = *o.rope_theta;
    return c;
}

int run_init(const InitOptions& o) {
    const ModelConfig c = make_config(o);
    c.validate();
    const std::uint64_t seed = parse_seed(o.seed_text);
    const Model m = init_model(c, seed);
    save_model(m, o.out);
    std::size_t params = 0;
    for (const auto& [name, t] : m.tensors) params += t.numel();
    std::cout << "wrote " << o.out << ": preset " << o.preset << ", seed " << seed << "\n"
              << "  vocab_size " << c.vocab_size << ", d_model " << c.d_model << ", n_heads "
              << c.n_heads << ", d_ff " << c.d_ff << ", n_layers " << c.n_layers << ", max_len "
              << c.max_len << "\n"
              << "  norm " << to_string(c.norm) << ", cross_attention "
              << (c.cross_attention ? "true" : "false") << ", positional " << to_string(c.positional)
              << ", activation " << to_string(c.activation) << ", embed_scale "
              << (c.embed_scale_sqrt_d ? "sqrt_d_model" : "1") << ", tie_embeddings "
              << (c.tie_embeddings ? "true" : "false") << ", ln_eps " << c.ln_eps << "\n";
    if (c.is_version2())
        std::cout << "  n_kv_heads " << c.kv_heads() << ", attn_window " << c.attn_window
                  << (c.positional == Positional::rope ? ", rope_theta " + std::to_string(c.rope_theta) : "")
                  << " (format attncheck-decoder-2)\n";
    std::cout
              << "  " << m.tensors.size() << " tensors, " << params << " parameters\n";
    return 0;
}

}  // namespace

Command add_init_command(CLI::App& app) {
    auto o = std::make_shared<InitOptions>();
    CLI::App* sub = app.add_subcommand(
        "init", "Write a model file (.safetensors) with deterministic random weights");
    sub->footer(
        "The config is the preset's, with each flag given overriding one field (MODEL.md's "
        "metadata keys). Presets: tiny (V 32, d 16, h 2, f 32, L 2, N 32), small (V 512, d 128, "
        "h 4, f 512, L 2, N 256), base (V 8192, d 512, h 8, f 2048, L 6, N 2048); all post-norm, "
        "sinusoidal, relu, embed_scale sqrt_d_model, tied, no cross-attention, ln_eps 1e-5; "
        "llama-tiny (V 64, d 32, h 4, n_kv_heads 2, f 64, L 2, N 64): pre-norm, rope (theta "
        "10000), gelu, embed_scale 1, untied, no window.\n"
        "Example: attncheck init --out m.safetensors --preset tiny --norm pre --cross-attention");
    sub->add_option("--out,-o", o->out, "Model file to write")->required()->type_name("FILE");
    sub->add_option("--preset", o->preset, "Starting config")
        ->check(CLI::IsMember({"tiny", "small", "base", "llama-tiny"}))
        ->capture_default_str();
    // Parsed by parse_seed(): CLI11 2.1 wraps "-1" to 2^64-1 and saturates 2^64, silently.
    sub->add_option("--seed", o->seed_text, "Seed of the random weights, 0 .. 2^64-1 (same seed, same file)")
        ->type_name("UINT64")
        ->capture_default_str();
    sub->add_option("--vocab-size", o->vocab_size, "V: vocabulary size")->type_name("INT");
    sub->add_option("--d-model", o->d_model, "d: model width")->type_name("INT");
    sub->add_option("--n-heads", o->n_heads, "h: attention heads (d % h == 0)")->type_name("INT");
    sub->add_option("--d-ff", o->d_ff, "f: feed-forward width")->type_name("INT");
    sub->add_option("--n-layers", o->n_layers, "L: decoder layers")->type_name("INT");
    sub->add_option("--max-len", o->max_len, "N: maximum sequence length")->type_name("INT");
    sub->add_option("--norm", o->norm, "LayerNorm placement: post (x = LN(x + F(x))) or pre (x = x + F(LN(x)))")
        ->check(CLI::IsMember({"post", "pre"}));
    add_bool_option(*sub, "--cross-attention", o->cross_attention,
                    "Add cross-attention over a memory (true|false; the flag alone means true)");
    sub->add_option("--positional", o->positional, "Positions: sinusoidal, learned or rope (rotary)")
        ->check(CLI::IsMember({"sinusoidal", "learned", "rope"}));
    sub->add_option("--activation", o->activation, "Feed-forward activation: relu, gelu (erf) or gelu_tanh")
        ->check(CLI::IsMember({"relu", "gelu", "gelu_tanh"}));
    sub->add_option("--embed-scale", o->embed_scale, "Embedding scale: sqrt_d_model or 1")
        ->check(CLI::IsMember({"sqrt_d_model", "1"}));
    add_bool_option(*sub, "--tie-embeddings", o->tie_embeddings,
                    "lm_head = embed.weight (true|false; the flag alone means true)");
    sub->add_option("--ln-eps", o->ln_eps, "LayerNorm epsilon (positive, finite)")->type_name("FLOAT");
    sub->add_option("--n-kv-heads", o->n_kv_heads,
                    "Key/value heads of self-attention, dividing n_heads (grouped-query attention)")
        ->type_name("INT");
    sub->add_option("--attn-window", o->attn_window,
                    "Sliding window of self-attention: each row sees at most w+1 keys (-1: none)")
        ->type_name("INT");
    sub->add_option("--rope-theta", o->rope_theta, "Base of the rotary angles (positional rope only)")
        ->type_name("FLOAT");
    return {sub, [o] { return run_init(*o); }};
}

}  // namespace attncheck::cli
