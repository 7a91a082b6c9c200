// attncheck/model.hpp — the decoder's configuration and weights, as docs/spec/MODEL.md
// defines them, and the functions that make, load and save them.
//
// Dimension legend: V = vocab_size, d = d_model, h = n_heads, dk = d / h, f = d_ff,
// L = n_layers, N = max_len, T = target length of one call, S = memory length.
//
// A Model is plain data: the config plus a map from tensor name to a float32 tensor. Both
// decoders read it; neither owns the file format. expected_tensors() is the one list of which
// tensors a config needs and with which shapes: loading, saving, initialising and validating
// all go through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attncheck {

enum class Norm { post, pre };
enum class Positional { sinusoidal, learned, rope };
enum class Activation { relu, gelu, gelu_tanh };

struct ModelConfig {
    int vocab_size = 32;   // V
    int d_model = 16;      // d
    int n_heads = 2;       // h, d % h == 0
    int d_ff = 32;         // f
    int n_layers = 2;      // L
    int max_len = 32;      // N
    Norm norm = Norm::post;
    bool cross_attention = false;
    Positional positional = Positional::sinusoidal;
    Activation activation = Activation::relu;
    bool embed_scale_sqrt_d = true;  // embed_scale = sqrt_d_model (true) or 1 (false)
    bool tie_embeddings = true;
    double ln_eps = 1e-5;
    // MODEL.md "Version 2 additions". At their defaults the config is a version 1 model.
    int n_kv_heads = 0;         // grouped-query self-attention; 0: the key is absent (= n_heads)
    int attn_window = -1;       // sliding window of self-attention, -1: none
    double rope_theta = 10000;  // base of the rotary angles (positional = rope only)

    int head_dim() const { return d_model / n_heads; }  // dk
    int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
    // Query heads per kv head: query head j reads kv head j / group_size().
    int group_size() const { return n_heads / kv_heads(); }
    bool has_window() const { return attn_window >= 0; }
    // Any version 2 feature in use: the file says format = attncheck-decoder-2.
    bool is_version2() const {
        return n_kv_heads != 0 || attn_window != -1 || positional == Positional::rope;
    }

    // Throws InputError naming the field when a value is out of range (non-positive sizes,
    // d % h != 0, ln_eps not positive and finite, sizes whose product overflows our limits,
    // n_kv_heads not dividing n_heads, attn_window < -1, rope with an odd dk, rope_theta not
    // positive and finite).
    void validate() const;
    bool operator==(const ModelConfig&) const = default;
};

// The presets of the command line: tiny, small, base (version 1) and llama-tiny (version 2:
// pre-norm, GQA, rope). Throws InputError for an unknown name.
ModelConfig preset_config(const std::string& name);

// Metadata (string -> string, as stored in safetensors' __metadata__) <-> config.
// config_from_metadata throws InputError naming the key for a missing or malformed value, and
// for a version 2 key in a file whose format is attncheck-decoder-1 (or the reverse).
std::map<std::string, std::string> config_to_metadata(const ModelConfig& c);
ModelConfig config_from_metadata(const std::map<std::string, std::string>& meta);

// Names used in metadata and on the command line.
const char* to_string(Norm);
const char* to_string(Positional);
const char* to_string(Activation);

struct Tensor {
    std::vector<std::size_t> shape;  // row-major
    std::vector<float> data;         // product(shape) elements
    std::size_t numel() const { return data.size(); }
};

struct TensorSpec {
    std::string name;
    std::vector<std::size_t> shape;
};

// Every tensor a model of this config has, in the canonical order of MODEL.md's table.
std::vector<TensorSpec> expected_tensors(const ModelConfig& c);

struct Model {
    ModelConfig config;
    std::map<std::string, Tensor> tensors;

    // The tensor by name; throws InputError naming it when absent.
    const Tensor& at(const std::string& name) const;
    // lm_head.weight, or embed.weight when tied.
    const Tensor& lm_head() const;
    // Throws InputError when the tensor set or a shape does not match expected_tensors(config),
    // or a value is not finite.
    void validate() const;
};

// Random weights, deterministic in (config, seed) on every platform and thread count:
// each tensor draws from its own stream seeded by (seed, tensor name).
Model init_model(const ModelConfig& c, std::uint64_t seed);

// safetensors (8-byte little-endian header length, JSON header, raw data), config in
// __metadata__. load_model validates completely and throws InputError naming the problem
// (file, tensor, field, expected and found) for every malformed file; it never reads out of
// bounds and never allocates more than the file's size implies.
Model load_model(const std::string& path);
void save_model(const Model& m, const std::string& path);
// Same as load_model but from bytes in memory (used by the file loader and the fuzz harness).
Model parse_model(const std::uint8_t* data, std::size_t size, const std::string& what = "model");

// NumPy .npy arrays (float32, C order). read_npy accepts '<f4' (and '<f8', converted) with
// fortran_order False, versions 1.0/2.0/3.0; anything else is an InputError naming the problem.
struct NpyArray {
    std::vector<std::size_t> shape;
    std::vector<float> data;
};
NpyArray read_npy(const std::string& path);
NpyArray parse_npy(const std::uint8_t* data, std::size_t size, const std::string& what = "npy");
void write_npy(const std::string& path, const std::vector<std::size_t>& shape,
               const std::vector<float>& data);

// Cross-attention memory (the encoder output): m [S, d], of which rows >= valid_len are padding.
struct Memory {
    int rows = 0;             // S >= 1
    int valid_len = 0;        // 0 .. S
    std::vector<float> data;  // [S, d]
};
// Throws InputError when memory is given to a model without cross-attention, missing for one
// with it, of the wrong width, empty, non-finite, or valid_len is outside [0, S].
void check_memory(const ModelConfig& c, const std::optional<Memory>& memory);

// "1,2,3" -> {1,2,3}. Throws InputError for an empty list, a non-numeric or negative entry,
// or a value that does not fit an int32. Range against the vocabulary is checked by
// check_tokens().
std::vector<int> parse_token_list(const std::string& text);
// Throws InputError when a token is outside [0, V) or the sequence is empty or longer than N.
void check_tokens(const ModelConfig& c, const std::vector<int>& tokens);

}  // namespace attncheck
