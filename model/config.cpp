// model/config.cpp — ModelConfig: the presets, the limits check, and the mapping between a
// config and the string metadata of a safetensors file (MODEL.md, "File format").
//
// The metadata parser is deliberately strict (canonical decimal integers, no unknown keys):
// a model file is an input we verify, and a typo such as `n_head` or `d_model = "12x"` that
// silently fell back to a default would make every later check meaningless.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "model/limits.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>

namespace attncheck {

namespace {

constexpr const char* kFormatName = "attncheck-decoder-1";
constexpr const char* kFormatName2 = "attncheck-decoder-2";
constexpr double kDefaultRopeTheta = 10000.0;
// The optional keys of MODEL.md "Version 2 additions" (positional = rope is a value, not a key).
constexpr const char* kVersion2Keys[] = {"n_kv_heads", "attn_window", "rope_theta"};

void check_dimension(const char* name, int value, std::int64_t max) {
    if (value <= 0) {
        throw InputError("model config: " + std::string(name) + " = " + std::to_string(value) +
                         ": must be a positive integer");
    }
    if (value > max) {
        throw InputError("model config: " + std::string(name) + " = " + std::to_string(value) +
                         " exceeds the limit " + std::to_string(max));
    }
}

// Strict decimal: digits only, no sign, no leading zero, no exponent, no overflow, > 0.
int parse_positive_int(const std::string& key, const std::string& text) {
    const auto fail = [&](const std::string& why) -> int {
        throw InputError("metadata '" + key + "' = \"" + text + "\": " + why);
    };
    if (text.empty()) fail("empty; expected a positive decimal integer");
    for (char ch : text) {
        if (ch < '0' || ch > '9') fail("expected a positive decimal integer (digits only)");
    }
    if (text[0] == '0') {
        fail(text.size() == 1 ? "must be positive" : "leading zeros are not allowed");
    }
    int value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc::result_out_of_range) fail("does not fit in an int");
    if (ec != std::errc() || ptr != text.data() + text.size()) {
        fail("expected a positive decimal integer");
    }
    return value;
}

// attn_window: "-1" (none) or a non-negative decimal integer, no leading zeros.
int parse_window(const std::string& key, const std::string& text) {
    if (text == "-1") return -1;
    if (text == "0") return 0;
    try {
        return parse_positive_int(key, text);
    } catch (const InputError&) {
        throw InputError("metadata '" + key + "' = \"" + text +
                         "\": expected -1 (no window) or a non-negative decimal integer");
    }
}

// A finite positive decimal float: "1e-5", "0.00001", "1E-05". No sign, inf, nan or hex.
double parse_positive_float(const std::string& key, const std::string& text) {
    const auto fail = [&](const std::string& why) -> double {
        throw InputError("metadata '" + key + "' = \"" + text + "\": " + why);
    };
    if (text.empty()) fail("empty; expected a positive decimal float such as 1e-5");
    for (char ch : text) {
        const bool ok = (ch >= '0' && ch <= '9') || ch == '.' || ch == 'e' || ch == 'E' ||
                        ch == '-' || ch == '+';
        if (!ok) fail("expected a positive decimal float such as 1e-5");
    }
    if (text[0] == '-' || text[0] == '+') fail("expected an unsigned decimal float such as 1e-5");
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value,
                                           std::chars_format::general);
    if (ec == std::errc::result_out_of_range) fail("out of the range of a double");
    if (ec != std::errc() || ptr != text.data() + text.size()) {
        fail("expected a positive decimal float such as 1e-5");
    }
    if (!std::isfinite(value) || value <= 0.0) fail("must be finite and positive");
    return value;
}

bool parse_bool(const std::string& key, const std::string& text) {
    if (text == "true") return true;
    if (text == "false") return false;
    throw InputError("metadata '" + key + "' = \"" + text + "\": expected \"true\" or \"false\"");
}

}  // namespace

const char* to_string(Norm n) { return n == Norm::post ? "post" : "pre"; }
const char* to_string(Positional p) {
    switch (p) {
        case Positional::sinusoidal: return "sinusoidal";
        case Positional::learned: return "learned";
        case Positional::rope: return "rope";
    }
    return "?";
}
const char* to_string(Activation a) {
    switch (a) {
        case Activation::relu: return "relu";
        case Activation::gelu: return "gelu";
        case Activation::gelu_tanh: return "gelu_tanh";
    }
    return "?";
}

void ModelConfig::validate() const {
    check_dimension("vocab_size", vocab_size, limits::kMaxDimension);
    check_dimension("d_model", d_model, limits::kMaxDimension);
    check_dimension("n_heads", n_heads, limits::kMaxDimension);
    check_dimension("d_ff", d_ff, limits::kMaxDimension);
    check_dimension("n_layers", n_layers, limits::kMaxLayers);
    check_dimension("max_len", max_len, limits::kMaxDimension);
    if (d_model % n_heads != 0) {
        throw InputError("model config: d_model = " + std::to_string(d_model) +
                         " is not divisible by n_heads = " + std::to_string(n_heads));
    }
    if (!std::isfinite(ln_eps) || !(ln_eps > 0.0)) {
        throw InputError("model config: ln_eps = " + std::to_string(ln_eps) +
                         ": must be finite and positive");
    }
    if (n_kv_heads < 0 || (n_kv_heads > 0 && n_heads % n_kv_heads != 0)) {
        throw InputError("model config: n_kv_heads = " + std::to_string(n_kv_heads) +
                         ": must be a positive integer dividing n_heads = " +
                         std::to_string(n_heads));
    }
    if (attn_window < -1) {
        throw InputError("model config: attn_window = " + std::to_string(attn_window) +
                         ": must be -1 (no window) or a non-negative integer");
    }
    if (positional == Positional::rope && head_dim() % 2 != 0) {
        throw InputError("model config: positional = rope needs an even head width, but dk = "
                         "d_model / n_heads = " + std::to_string(head_dim()));
    }
    if (!std::isfinite(rope_theta) || !(rope_theta > 0.0)) {
        throw InputError("model config: rope_theta = " + std::to_string(rope_theta) +
                         ": must be finite and positive");
    }
    if (positional != Positional::rope && rope_theta != kDefaultRopeTheta) {
        throw InputError("model config: rope_theta = " + std::to_string(rope_theta) +
                         " is set but positional = " + to_string(positional) + " (not rope)");
    }
    // Each dimension is <= 2^20, so every product below fits in 64 bits.
    const std::uint64_t pos_table = std::uint64_t(max_len) * std::uint64_t(d_model);
    if (pos_table > limits::kMaxParameters) {
        throw InputError("model config: max_len * d_model = " + std::to_string(pos_table) +
                         " exceeds the limit " + std::to_string(limits::kMaxParameters));
    }
    std::uint64_t params = 0;
    for (const TensorSpec& t : expected_tensors(*this)) {
        std::uint64_t n = 1;
        for (std::size_t s : t.shape) n *= s;
        params += n;
    }
    if (params > limits::kMaxParameters) {
        throw InputError("model config: " + std::to_string(params) +
                         " parameters exceed the limit " +
                         std::to_string(limits::kMaxParameters));
    }
}

ModelConfig preset_config(const std::string& name) {
    // Every preset: post-LN, sinusoidal, ReLU, tied, embed_scale = sqrt_d_model, no
    // cross-attention, ln_eps 1e-5 (the struct's defaults) — the original Transformer.
    ModelConfig c;
    if (name == "tiny") {
        c.d_model = 16; c.n_heads = 2; c.d_ff = 32; c.n_layers = 2; c.vocab_size = 32;
        c.max_len = 32;
    } else if (name == "small") {
        c.d_model = 128; c.n_heads = 4; c.d_ff = 512; c.n_layers = 2; c.vocab_size = 512;
        c.max_len = 256;
    } else if (name == "base") {
        c.d_model = 512; c.n_heads = 8; c.d_ff = 2048; c.n_layers = 6; c.vocab_size = 8192;
        c.max_len = 2048;
    } else if (name == "llama-tiny") {
        // A Llama-shaped toy: pre-norm, grouped-query attention (2 query heads per kv head),
        // rotary positions, GELU (the nearest of our activations to SwiGLU), an untied head,
        // no embedding scale, no window (Llama has none).
        c.d_model = 32; c.n_heads = 4; c.n_kv_heads = 2; c.d_ff = 64; c.n_layers = 2;
        c.vocab_size = 64; c.max_len = 64;
        c.norm = Norm::pre;
        c.positional = Positional::rope;
        c.rope_theta = kDefaultRopeTheta;
        c.activation = Activation::gelu;
        c.embed_scale_sqrt_d = false;
        c.tie_embeddings = false;
        return c;
    } else {
        throw InputError("unknown preset '" + name +
                         "' (expected tiny, small, base or llama-tiny)");
    }
    c.norm = Norm::post;
    c.cross_attention = false;
    c.positional = Positional::sinusoidal;
    c.activation = Activation::relu;
    c.embed_scale_sqrt_d = true;
    c.tie_embeddings = true;
    c.ln_eps = 1e-5;
    return c;
}

std::map<std::string, std::string> config_to_metadata(const ModelConfig& c) {
    // Shortest representation that reads back to the same double, so save/load is exact.
    char eps[64];
    const auto res = std::to_chars(eps, eps + sizeof eps, c.ln_eps);
    std::map<std::string, std::string> meta = {
        {"format", c.is_version2() ? kFormatName2 : kFormatName},
        {"vocab_size", std::to_string(c.vocab_size)},
        {"d_model", std::to_string(c.d_model)},
        {"n_heads", std::to_string(c.n_heads)},
        {"d_ff", std::to_string(c.d_ff)},
        {"n_layers", std::to_string(c.n_layers)},
        {"max_len", std::to_string(c.max_len)},
        {"norm", to_string(c.norm)},
        {"cross_attention", c.cross_attention ? "true" : "false"},
        {"positional", to_string(c.positional)},
        {"activation", to_string(c.activation)},
        {"embed_scale", c.embed_scale_sqrt_d ? "sqrt_d_model" : "1"},
        {"tie_embeddings", c.tie_embeddings ? "true" : "false"},
        {"ln_eps", std::string(eps, res.ptr)},
    };
    if (c.n_kv_heads != 0) meta["n_kv_heads"] = std::to_string(c.n_kv_heads);
    if (c.attn_window != -1) meta["attn_window"] = std::to_string(c.attn_window);
    if (c.positional == Positional::rope) {
        char theta[64];
        const auto r = std::to_chars(theta, theta + sizeof theta, c.rope_theta);
        meta["rope_theta"] = std::string(theta, r.ptr);
    }
    return meta;
}

ModelConfig config_from_metadata(const std::map<std::string, std::string>& meta) {
    static const char* const kKeys[] = {
        "format", "vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len", "norm",
        "cross_attention", "positional", "activation", "embed_scale", "tie_embeddings",
        "ln_eps", "n_kv_heads", "attn_window", "rope_theta"};
    std::string known;
    for (const char* k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k);
    for (const auto& [key, value] : meta) {
        bool ok = false;
        for (const char* k : kKeys) ok = ok || key == k;
        if (!ok) {
            throw InputError("metadata has unknown key '" + key + "' (known keys: " + known + ")");
        }
    }
    const auto get = [&](const char* key) -> const std::string& {
        const auto it = meta.find(key);
        if (it == meta.end()) throw InputError(std::string("metadata is missing key '") + key + "'");
        return it->second;
    };
    const auto bad = [&](const char* key, const std::string& expected) -> InputError {
        return InputError(std::string("metadata '") + key + "' = \"" + get(key) +
                          "\": expected " + expected);
    };

    const std::string& format = get("format");
    if (format != kFormatName && format != kFormatName2) {
        throw bad("format", std::string("\"") + kFormatName + "\" or \"" + kFormatName2 + "\"");
    }
    const bool version2 = format == kFormatName2;
    if (!version2) {
        for (const char* key : kVersion2Keys) {
            if (meta.count(key)) {
                throw InputError(std::string("metadata '") + key + "' is a version 2 key, but "
                                 "format = \"" + kFormatName + "\" (it needs \"" +
                                 kFormatName2 + "\")");
            }
        }
    }
    ModelConfig c;
    c.vocab_size = parse_positive_int("vocab_size", get("vocab_size"));
    c.d_model = parse_positive_int("d_model", get("d_model"));
    c.n_heads = parse_positive_int("n_heads", get("n_heads"));
    c.d_ff = parse_positive_int("d_ff", get("d_ff"));
    c.n_layers = parse_positive_int("n_layers", get("n_layers"));
    c.max_len = parse_positive_int("max_len", get("max_len"));

    const std::string& norm = get("norm");
    if (norm == "post") c.norm = Norm::post;
    else if (norm == "pre") c.norm = Norm::pre;
    else throw bad("norm", "\"post\" or \"pre\"");

    c.cross_attention = parse_bool("cross_attention", get("cross_attention"));

    const std::string& pos = get("positional");
    if (pos == "sinusoidal") c.positional = Positional::sinusoidal;
    else if (pos == "learned") c.positional = Positional::learned;
    else if (pos == "rope" && version2) c.positional = Positional::rope;
    else if (pos == "rope") {
        throw InputError(std::string("metadata 'positional' = \"rope\" is a version 2 value, "
                                     "but format = \"") + kFormatName + "\" (it needs \"" +
                         kFormatName2 + "\")");
    } else throw bad("positional", "\"sinusoidal\", \"learned\" or \"rope\"");

    const std::string& act = get("activation");
    if (act == "relu") c.activation = Activation::relu;
    else if (act == "gelu") c.activation = Activation::gelu;
    else if (act == "gelu_tanh") c.activation = Activation::gelu_tanh;
    else throw bad("activation", "\"relu\", \"gelu\" or \"gelu_tanh\"");

    const std::string& scale = get("embed_scale");
    if (scale == "sqrt_d_model") c.embed_scale_sqrt_d = true;
    else if (scale == "1") c.embed_scale_sqrt_d = false;
    else throw bad("embed_scale", "\"sqrt_d_model\" or \"1\"");

    c.tie_embeddings = parse_bool("tie_embeddings", get("tie_embeddings"));
    c.ln_eps = parse_positive_float("ln_eps", get("ln_eps"));

    if (meta.count("n_kv_heads")) c.n_kv_heads = parse_positive_int("n_kv_heads", get("n_kv_heads"));
    if (meta.count("attn_window")) c.attn_window = parse_window("attn_window", get("attn_window"));
    if (meta.count("rope_theta")) {
        if (c.positional != Positional::rope) {
            throw InputError("metadata 'rope_theta' is given but positional = \"" +
                             std::string(to_string(c.positional)) + "\" (it needs \"rope\")");
        }
        c.rope_theta = parse_positive_float("rope_theta", get("rope_theta"));
    }
    if (version2 && !c.is_version2()) {
        throw InputError(std::string("metadata 'format' = \"") + kFormatName2 +
                         "\" but no version 2 key (n_kv_heads, attn_window, positional = rope) "
                         "is used: a version 1 model says \"" + kFormatName + "\"");
    }
    // A well-formed value that breaks a rule (n_kv_heads not dividing n_heads, rope with an odd
    // dk) is refused by validate(), which names the key.
    c.validate();
    return c;
}

}  // namespace attncheck
