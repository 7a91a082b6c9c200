// tests/model/model_test_util.hpp — helpers for tests that need model or .npy files on disk or
// hand-made (possibly malformed) safetensors bytes. Usable from any test folder:
//   #include "tests/model/model_test_util.hpp"   (the project root is on the include path)
#pragma once

#include "attncheck/model.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace attncheck::testing {

// A fresh path in the temp directory, unique per process and call; removed by its destructor.
class TempPath {
public:
    explicit TempPath(const std::string& suffix) {
        static std::atomic<int> counter{0};
        path_ = (std::filesystem::temp_directory_path() /
                 ("attncheck-test-" + std::to_string(::getpid()) + "-" +
                  std::to_string(counter++) + suffix))
                    .string();
    }
    ~TempPath() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempPath(const TempPath&) = delete;
    TempPath& operator=(const TempPath&) = delete;
    const std::string& str() const { return path_; }
    operator const std::string&() const { return path_; }

private:
    std::string path_;
};

inline std::vector<std::uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// 8-byte little-endian length + header text + data: a safetensors file from its parts, with
// whatever (in)consistency the caller wants. header_len overrides the true length when given.
inline std::vector<std::uint8_t> safetensors_bytes(const std::string& header,
                                                   const std::vector<std::uint8_t>& data,
                                                   std::uint64_t header_len = UINT64_MAX) {
    const std::uint64_t len = header_len == UINT64_MAX ? header.size() : header_len;
    std::vector<std::uint8_t> out;
    for (int i = 0; i < 8; ++i) out.push_back(std::uint8_t((len >> (8 * i)) & 0xff));
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

// The parts of a file as save_model writes it: the header text (with its padding) and the data.
struct SafetensorsParts {
    std::string header;
    std::vector<std::uint8_t> data;
};
inline SafetensorsParts saved_parts(const Model& m) {
    TempPath path(".safetensors");
    save_model(m, path);
    const std::vector<std::uint8_t> bytes = read_bytes(path);
    std::uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | bytes.at(std::size_t(i));
    SafetensorsParts p;
    p.header.assign(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(len));
    p.data.assign(bytes.begin() + 8 + std::ptrdiff_t(len), bytes.end());
    return p;
}

// A small config with every size distinct, so that a swapped dimension shows up as a shape
// mismatch: V = 11, d = 8, h = 2, f = 12, L = 2, N = 7.
inline ModelConfig distinct_sizes_config() {
    return ModelConfig{.vocab_size = 11, .d_model = 8, .n_heads = 2, .d_ff = 12, .n_layers = 2, .max_len = 7};
}

// `base` (its sizes and ln_eps) under every combination of the six categorical options: norm,
// cross_attention, positional, activation, tie_embeddings, embed_scale (96 configs).
inline std::vector<ModelConfig> option_configs(const ModelConfig& base = distinct_sizes_config()) {
    std::vector<ModelConfig> out;
    for (Norm norm : {Norm::post, Norm::pre})
        for (bool cross : {false, true})
            for (Positional pos : {Positional::sinusoidal, Positional::learned})
                for (Activation act : {Activation::relu, Activation::gelu, Activation::gelu_tanh})
                    for (bool tied : {false, true})
                        for (bool scale : {false, true}) {
                            ModelConfig c = base;
                            c.norm = norm;
                            c.cross_attention = cross;
                            c.positional = pos;
                            c.activation = act;
                            c.tie_embeddings = tied;
                            c.embed_scale_sqrt_d = scale;
                            out.push_back(c);
                        }
    return out;
}

}  // namespace attncheck::testing
