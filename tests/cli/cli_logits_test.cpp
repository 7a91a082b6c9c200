// tests/cli/cli_logits_test.cpp — `attncheck logits`: the summary it prints, and its logits in
// every --impl and --mode against each other and against the float64 oracle's error bound.
//
// Dimension legend: T = tokens, V = vocab_size, d = d_model, S = memory rows.
#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "attncheck/tolerance.hpp"
#include "reference/error_bound.hpp"
#include "cli_models.hpp"

using namespace cli_test;

namespace {

// Reference teacher-forced and incremental logits are both float64 results rounded once to
// float32; the float64 computations differ only in the order of a few sums (a prefix instead of
// the whole sequence), far below a float32 ulp, so after rounding they differ by at most one
// float32 ulp of an element. Two ulps of the output's scale leaves room for an element near a
// rounding boundary and for a small element whose ulp is finer than the scale's.
constexpr double kReferenceModesUlps = 2.0;

bool close_in_ulps(const std::vector<float>& a, const std::vector<float>& b, double ulps, std::string& why) {
    double scale = 0;
    for (float v : a) scale = std::max(scale, std::abs(double(v)));
    const double bound = ulps * attncheck::kEps32 * scale;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double diff = std::abs(double(a[i]) - double(b[i]));
        if (!(diff <= bound)) {
            std::ostringstream s;
            s.precision(9);
            s << "element [" << i << "]: " << a[i] << " vs " << b[i] << ", |diff| " << diff << " > bound " << bound;
            why = s.str();
            return false;
        }
    }
    return true;
}

}  // namespace

TEST_CASE("logits without --out prints the shape and each position's argmax", "[cli][logits]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "5"});
    const std::vector<int> tokens = {4, 8, 15, 16};
    const NpyArray logits = logits_npy(dir, model, tokens, 32, {});
    const Result r = run_ok(dir, {"logits", "--model", model, "--tokens", join(tokens)});
    INFO(r.out);
    CHECK(r.out.find("[4, 32]") != std::string::npos);
    // One line per position: "pos token argmax max ...", with the argmax of the .npy's row.
    std::stringstream lines(r.out);
    std::string line;
    std::size_t seen = 0;
    while (std::getline(lines, line)) {
        std::stringstream s(line);
        std::size_t pos = 0;
        int token = 0;
        std::size_t argmax = 0;
        if (!(s >> pos >> token >> argmax)) continue;
        REQUIRE(pos == seen);
        CHECK(token == tokens[pos]);
        const float* row = logits.data.data() + pos * 32;
        CHECK(argmax == std::size_t(std::max_element(row, row + 32) - row));
        ++seen;
    }
    CHECK(seen == tokens.size());
}

TEST_CASE("reference teacher-forced and incremental logits agree", "[cli][logits]") {
    TempDir dir;
    struct Variant {
        std::string name;
        std::vector<std::string> flags;
        bool cross;
    };
    const std::vector<Variant> variants = {
        {"post-norm", {"--seed", "1"}, false},
        {"pre-norm learned gelu untied", {"--seed", "2", "--norm", "pre", "--positional", "learned",
                                          "--activation", "gelu", "--tie-embeddings", "false"}, false},
        {"cross-attention", {"--seed", "3", "--cross-attention", "--n-heads", "4"}, true},
    };
    const std::vector<int> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
    for (const Variant& v : variants) {
        INFO(v.name);
        const std::string model = init_model_file(dir, "m.safetensors", v.flags);
        std::vector<std::string> mem;
        if (v.cross) mem = {"--memory", write_memory(dir, "mem.npy", 5, 16, 7), "--memory-valid-len", "3"};
        std::vector<std::string> teacher = mem, incremental = mem;
        teacher.insert(teacher.end(), {"--mode", "teacher"});
        incremental.insert(incremental.end(), {"--mode", "incremental"});
        const NpyArray a = logits_npy(dir, model, tokens, 32, teacher);
        const NpyArray b = logits_npy(dir, model, tokens, 32, incremental);
        std::string why;
        CHECK(close_in_ulps(a.data, b.data, kReferenceModesUlps, why));
        INFO(why);
        // Not vacuous: the logits depend on the position (a decoder that ignored the prefix
        // would give the same row for the two 1s).
        CHECK(!std::equal(a.data.begin() + 1 * 32, a.data.begin() + 2 * 32, a.data.begin() + 3 * 32));
    }
}

TEST_CASE("optimized logits agree with the float64 oracle in both modes", "[cli][logits][optimized]") {
    TempDir dir;
    for (const bool cross : {false, true}) {
        INFO((cross ? "cross-attention" : "self-attention only"));
        const std::string model = init_model_file(
            dir, "m.safetensors",
            cross ? std::vector<std::string>{"--seed", "8", "--cross-attention", "--norm", "pre"}
                  : std::vector<std::string>{"--seed", "9", "--activation", "gelu_tanh"});
        std::vector<std::string> mem;
        std::optional<attncheck::Memory> memory;
        if (cross) {
            mem = {"--memory", write_memory(dir, "mem.npy", 6, 16, 1), "--memory-valid-len", "4"};
            memory = attncheck::Memory{6, 4, attncheck::read_npy(mem[1]).data};
        }
        const std::vector<int> tokens = {0, 31, 7, 7, 12, 30, 2};
        const auto with = [&](std::vector<std::string> flags) {
            flags.insert(flags.end(), mem.begin(), mem.end());
            return logits_npy(dir, model, tokens, 32, flags).data;
        };
        const std::vector<float> oracle32 = with({"--impl", "reference"});
        const std::vector<double> oracle(oracle32.begin(), oracle32.end());  // float64 rounded once
        // The bound of any correct float32 decoder, plus the half ulp the oracle lost when the
        // command wrote it as float32.
        std::vector<double> bound =
            attncheck::reference::DecoderBound(attncheck::load_model(model)).forward(tokens, memory).bound;
        for (std::size_t i = 0; i < bound.size(); ++i) bound[i] += 0x1p-24 * std::abs(oracle[i]);
        for (const std::string mode : {"teacher", "incremental"}) {
            INFO("optimized " << mode);
            const std::vector<float> candidate = with({"--impl", "optimized", "--mode", mode});
            const attncheck::Agreement agree = attncheck::check_against_bound(candidate, oracle, bound);
            INFO(agree.describe());
            CHECK(agree.ok);
        }
    }
}
