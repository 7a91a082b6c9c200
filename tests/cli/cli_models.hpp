// tests/cli/cli_models.hpp — the files the command-line tests work on, made and read through
// `attncheck` itself: models by `init`, memories as .npy, logits read back through `logits --out`.
//
// Dimension legend: T = tokens, V = vocab_size, d = d_model, S = memory rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "run_cli.hpp"

namespace cli_test {

using attncheck::NpyArray;

// A model file made by `attncheck init` with extra flags.
inline std::string init_model_file(const TempDir& dir, const std::string& name,
                                   const std::vector<std::string>& flags) {
    const std::string path = dir.file(name);
    std::vector<std::string> args = {"init", "--out", path};
    args.insert(args.end(), flags.begin(), flags.end());
    run_ok(dir, args);
    return path;
}

// Token ids as --tokens and --prompt take them and generate prints them: "1,2,3".
inline std::string join(const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) {
        if (!s.empty()) s += ',';
        s += std::to_string(id);
    }
    return s;
}

// join() undone, a trailing newline ignored.
inline std::vector<int> parse_ids(std::string line) {
    std::vector<int> ids;
    while (!line.empty() && (line.back() == '\n')) line.pop_back();
    std::stringstream ss(line);
    std::string item;
    while (std::getline(ss, item, ',')) ids.push_back(std::stoi(item));
    return ids;
}

// Logits [T, V] through `attncheck logits ... --out`, checked for shape and finiteness.
inline NpyArray logits_npy(const TempDir& dir, const std::string& model, const std::vector<int>& tokens,
                           std::size_t V, const std::vector<std::string>& flags) {
    const std::string out = dir.file("logits.npy");
    std::vector<std::string> args = {"logits", "--model", model, "--tokens", join(tokens), "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    run_ok(dir, args);
    NpyArray a = attncheck::read_npy(out);
    REQUIRE(a.shape == std::vector<std::size_t>{tokens.size(), V});
    REQUIRE(a.data.size() == tokens.size() * V);
    for (std::size_t i = 0; i < a.data.size(); ++i) {
        INFO("logit [" << i / V << ", " << i % V << "] of " << model);
        REQUIRE(std::isfinite(a.data[i]));
    }
    return a;
}

// A memory m [S, d] with values in [-1, 1], deterministic in seed.
inline std::string write_memory(const TempDir& dir, const std::string& name, std::size_t S, std::size_t d,
                                std::uint32_t seed) {
    std::vector<float> m(S * d);
    std::uint32_t x = seed * 2654435761u + 1;
    for (float& v : m) {
        x = x * 1664525u + 1013904223u;  // LCG: any fixed stream of values will do
        v = float(double(x >> 8) / double(1u << 24) * 2.0 - 1.0);
    }
    const std::string path = dir.file(name);
    attncheck::write_npy(path, {S, d}, m);
    return path;
}

}  // namespace cli_test
