// cli/logits_command.cpp — `attncheck logits`: the logits [T, V] of one token sequence.
//
// Four ways to get the same numbers, so that they can be compared from the shell:
//   --impl reference --mode teacher      Decoder<double>::forward              (the oracle)
//   --impl reference --mode incremental  Decoder<double>::forward_incremental  (prefix by prefix)
//   --impl optimized --mode teacher      optimized::Decoder::forward           (one parallel pass)
//   --impl optimized --mode incremental  optimized::Session::step per token    (the K/V cache)
// The reference runs in float64 unless --precision float32 asks for the float32 baseline, whose
// error against the oracle is NUMERICS.md's yardstick. Output is always float32.
//
// Dimension legend: T = tokens, V = vocab_size.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "cli/commands.hpp"
#include "cli/inputs.hpp"
#include "optimized/decoder.hpp"
#include "reference/decoder.hpp"

namespace attncheck::cli {
namespace {

struct LogitsOptions {
    std::string model;
    std::string tokens;
    MemoryFlags memory;
    std::string impl = "reference";
    std::string mode = "teacher";
    std::string precision = "float64";
    std::string out;
};

template <class T>
std::vector<float> reference_logits(const Model& m, const std::vector<int>& tokens,
                                    const std::optional<Memory>& memory, bool incremental) {
    const reference::Decoder<T> dec(m);
    const xt::xtensor<T, 2> logits =  // [T, V]
        incremental ? dec.forward_incremental(tokens, memory) : dec.forward(tokens, memory);
    return std::vector<float>(logits.begin(), logits.end());  // float64 -> float32: one rounding
}

// -> logits [T, V], float32, row-major.
std::vector<float> compute_logits(const LogitsOptions& o, const Model& m, const std::vector<int>& tokens,
                                  const std::optional<Memory>& memory) {
    const bool incremental = o.mode == "incremental";
    if (o.impl == "reference")
        return o.precision == "float32" ? reference_logits<float>(m, tokens, memory, incremental)
                                        : reference_logits<double>(m, tokens, memory, incremental);
    if (o.precision != "float64")
        throw InputError("--precision " + o.precision + " applies to --impl reference only "
                         "(the optimized decoder is float32)");
    const optimized::Decoder dec(m);
    if (!incremental) {
        const optimized::Logits logits = dec.forward(tokens, memory);
        return std::vector<float>(logits.begin(), logits.end());
    }
    optimized::Session session(dec, memory);
    const std::size_t V = std::size_t(m.config.vocab_size);
    std::vector<float> logits(tokens.size() * V);  // [T, V]
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        const std::span<const float> row = session.step(tokens[t]);  // [V], valid until next step
        if (row.size() != V)
            throw std::runtime_error("optimized::Session::step returned " + std::to_string(row.size()) +
                                     " logits, expected V = " + std::to_string(V));
        std::copy(row.begin(), row.end(), logits.begin() + std::ptrdiff_t(t * V));
    }
    return logits;
}

// A few lines a person can read: per position the argmax and the first values of the row.
void print_summary(const LogitsOptions& o, const std::vector<int>& tokens, std::size_t V,
                   const std::vector<float>& logits) {
    constexpr std::size_t kShownValues = 4;  // enough to eyeball two runs side by side
    const std::string how = o.impl == "reference" ? "reference " + o.precision : "optimized float32";
    std::cout << "logits [T, V] = [" << tokens.size() << ", " << V << "] float32 (" << how << ", "
              << o.mode << ")\n";
    std::printf("%5s %7s %7s %12s   first values\n", "pos", "token", "argmax", "max logit");
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        const float* row = logits.data() + t * V;
        // Lowest id on ties, as greedy generation picks it.
        const std::size_t best = std::size_t(std::max_element(row, row + V) - row);
        std::printf("%5zu %7d %7zu %12.6f  ", t, tokens[t], best, double(row[best]));
        for (std::size_t v = 0; v < std::min(V, kShownValues); ++v) std::printf(" %10.6f", double(row[v]));
        std::printf("%s\n", V > kShownValues ? " ..." : "");
    }
    std::fflush(stdout);
}

int run_logits(const LogitsOptions& o) {
    const Model m = load_model_flag(o.model);
    const std::vector<int> tokens = tokens_flag("--tokens", o.tokens, m.config);
    const std::optional<Memory> memory = memory_flag(o.memory, m.config);
    const std::vector<float> logits = compute_logits(o, m, tokens, memory);
    const std::size_t V = std::size_t(m.config.vocab_size);
    if (logits.size() != tokens.size() * V)
        throw std::runtime_error("the decoder returned " + std::to_string(logits.size()) +
                                 " logits, expected T * V = " + std::to_string(tokens.size() * V));
    if (o.out.empty()) {
        print_summary(o, tokens, V, logits);
    } else {
        write_npy(o.out, {tokens.size(), V}, logits);
        std::cout << "wrote " << o.out << ": logits [" << tokens.size() << ", " << V << "] float32\n";
    }
    return 0;
}

}  // namespace

Command add_logits_command(CLI::App& app) {
    auto o = std::make_shared<LogitsOptions>();
    CLI::App* sub = add_model_command(
        app, "logits", "Compute the logits [T, V] of a token sequence",
        "--impl reference runs the readable decoder in float64 (the oracle) and casts the result "
        "to float32 on output; --precision float32 runs it in float32 instead (the baseline of "
        "NUMERICS.md). --impl optimized is the float32 OpenMP decoder: --mode teacher is one "
        "parallel pass, --mode incremental feeds one token at a time through a K/V-cache Session. "
        "Reference incremental recomputes each prefix (no cache).\n"
        "Without --out a summary is printed: the shape, then per position its token, the argmax "
        "(lowest id on ties), the max logit and the first values of the row.\n"
        "Example: attncheck logits --model m.safetensors --tokens 1,2,3 --out logits.npy",
        o->model, "--tokens,-t", o->tokens,
        "Token ids, comma-separated, e.g. 1,2,3 (1 .. max_len of them, each in [0, V))");
    o->memory.add_to(*sub);
    add_impl_option(*sub, o->impl, "Decoder: reference (float64 oracle, cast to float32) or optimized (float32)");
    sub->add_option("--mode", o->mode, "teacher (all positions in one pass) or incremental (one token at a time)")
        ->check(CLI::IsMember({"teacher", "incremental"}))
        ->capture_default_str();
    sub->add_option("--precision", o->precision, "Arithmetic of --impl reference: float64 (oracle) or float32 (baseline)")
        ->check(CLI::IsMember({"float64", "float32"}))
        ->capture_default_str();
    sub->add_option("--out,-o", o->out, "Write the logits [T, V] as a float32 .npy here instead of printing a summary")
        ->type_name("FILE.npy");
    return {sub, [o] { return run_logits(*o); }};
}

}  // namespace attncheck::cli
