// tests/optimized/decoder_test.cpp — the optimized decoder (optimized/decoder.hpp) against the
// float64 reference; its exact properties are tested in decoder_session_test.cpp (sessions) and
// decoder_bitwise_test.cpp (the same bits every way it runs), its matrix products in gemm_test.cpp.
//
// Accuracy: every decoder result is compared with reference::Decoder<double> (the oracle) with
// reference::Decoder<float> as the float32 baseline, through check_agreement() of
// attncheck/tolerance.hpp (NUMERICS.md), on random models of every MODEL.md configuration
// (norm x cross-attention x positional x activation x embed scale x tied: 96 configurations),
// teacher-forced, step by step, in chunks of several sizes, in a BatchSession and in
// forward_batch.
//
// To add a configuration: extend testing::option_configs() (tests/model/model_test_util.hpp);
// every failure prints the configuration, the seed and the worst element.
//
// Dimension legend: V = vocab, d = d_model, h = heads, f = d_ff, N = max_len, T = tokens,
// S = memory rows, B = sequences, M/N/K = the matrix product's rows, outputs, reduction.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "attncheck/kernels.hpp"
#include "attncheck/model.hpp"
#include "attncheck/tolerance.hpp"
#include "kernels/registry.hpp"
#include "optimized/attention_policy.hpp"
#include "optimized/decoder.hpp"
#include "optimized/gemm.hpp"
#include "reference/decoder.hpp"
#include "reference/error_bound.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/optimized/decoder_cases.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::testing;  // Decoder, small_config() and the rest of decoder_cases.hpp

extern "C" int refusing_kernel(const attncheck_problem*, const float*, const float*, const float*, float*) {
    return ATTNCHECK_UNSUPPORTED;
}

// The built-in kernels a version 2 model is run with: the version 1 kernels (a call per head
// and row where the model needs it) and the version 2 kernels.
const std::vector<std::string> kVersion2ModelKernels = {"optimized", "reference", "optimized_v2", "reference_v2"};

// The oracle and the bound of any correct float32 decoder for one sequence: logits [T, V] each.
struct Expected {
    std::vector<double> oracle;
    std::vector<double> bound;
};
Expected expected(const Model& model, const std::vector<int>& tokens, const std::optional<Memory>& mem) {
    const auto o = reference::Decoder<double>(model).forward(tokens, mem);
    return {std::vector<double>(o.begin(), o.end()), reference::DecoderBound(model).forward(tokens, mem).bound};
}

// Candidate rows [first, first + rows) of logits [*, V] against the same rows of e.
void require_agrees(std::span<const float> candidate, const Expected& e, std::size_t first_row, std::size_t V,
                    const std::string& what) {
    const std::size_t n = candidate.size();
    REQUIRE(first_row * V + n <= e.oracle.size());
    const Agreement a = check_against_bound(candidate.data(), e.oracle.data() + first_row * V,
                                            e.bound.data() + first_row * V, n);
    INFO(what << ": " << a.describe());
    REQUIRE(a.ok);
}

// A random model of configuration c and a random sequence of T = 13 tokens (with S = 5 rows of
// memory, mem_valid of them valid), run every way against the reference: teacher-forced, step by
// step, in chunks of several sizes, and a prefill of 6 tokens then steps (the cache a chunk writes
// is read by steps). With `same_bits`, the steps and every chunking also give the teacher-forced
// bits.
void require_every_path_agrees(const ModelConfig& c, std::uint64_t seed, const optimized::AttentionKernel& kernel,
                               int mem_valid, const std::string& where, bool same_bits) {
    std::mt19937_64 rng(seed);
    const Model model = init_model(c, seed);
    const int T = 13;
    const auto tokens = random_tokens(rng, T, c.vocab_size);
    const auto mem = random_memory(rng, c, 5, mem_valid);
    const Expected e = expected(model, tokens, mem);
    const std::size_t V = std::size_t(c.vocab_size);
    const Decoder dec(model, kernel);

    const auto teacher = dec.forward(tokens, mem);  // Logits
    require_agrees(teacher, e, 0, V, "teacher-forced " + where);

    Session s(dec, mem);
    std::vector<float> stepped;
    for (int t = 0; t < T; ++t) {
        const auto row = s.step(tokens[std::size_t(t)]);
        require_agrees(std::vector<float>(row.begin(), row.end()), e, std::size_t(t), V,
                       "step " + std::to_string(t) + " " + where);
        stepped.insert(stepped.end(), row.begin(), row.end());
    }
    REQUIRE(s.pos() == T);
    if (same_bits) CHECK(std::ranges::equal(stepped, teacher));
    for (int chunk : {0, 1, 2, 5, 12}) {
        s.reset();
        const std::vector<float> chunked = s.prefill(tokens, chunk);
        require_agrees(chunked, e, 0, V, "prefill chunk=" + std::to_string(chunk) + " " + where);
        if (same_bits) CHECK(std::ranges::equal(chunked, teacher));
    }
    s.reset();
    const std::vector<int> head(tokens.begin(), tokens.begin() + 6);
    require_agrees(s.prefill(head, 4), e, 0, V, "prefill 6 then steps " + where);
    for (int t = 6; t < T; ++t) {
        const auto row = s.step(tokens[std::size_t(t)]);
        require_agrees(std::vector<float>(row.begin(), row.end()), e, std::size_t(t), V,
                       "step after prefill " + std::to_string(t) + " " + where);
    }
}

// A random model of configuration c and B = 3 random sequences, each with its memory (a different
// S each: padding), prompts of 4, 1 and 7 tokens then 6 steps (every step at different positions):
// a BatchSession's prefills and steps, and forward_batch, of all three and of two of different
// lengths (the short one must not see the padding), against the reference per sequence.
void require_batch_agrees(const ModelConfig& c, std::uint64_t seed, const optimized::AttentionKernel& kernel,
                          const std::string& where) {
    std::mt19937_64 rng(seed);
    const Model model = init_model(c, seed);
    const Decoder dec(model, kernel);
    const std::size_t V = std::size_t(c.vocab_size);
    const int B = 3;
    const int prompt[B] = {4, 1, 7}, steps = 6;
    std::vector<std::vector<int>> tokens;
    std::vector<std::optional<Memory>> mems;
    std::vector<Expected> want;
    for (int b = 0; b < B; ++b) {
        tokens.push_back(random_tokens(rng, prompt[b] + steps, c.vocab_size));
        mems.push_back(random_memory(rng, c, 3 + b, b + 1));
        want.push_back(expected(model, tokens.back(), mems.back()));
    }
    const std::vector<std::optional<Memory>> batch_mems = c.cross_attention ? mems : std::vector<std::optional<Memory>>{};
    BatchSession bs(dec, B, batch_mems);
    for (int b = 0; b < B; ++b) {
        const std::vector<int> p(tokens[std::size_t(b)].begin(), tokens[std::size_t(b)].begin() + prompt[b]);
        require_agrees(bs.prefill(b, p), want[std::size_t(b)], 0, V, "batch prefill b=" + std::to_string(b) + " " + where);
        REQUIRE(bs.pos(b) == prompt[b]);
    }
    for (int s = 0; s < steps; ++s) {
        std::vector<int> next;
        for (int b = 0; b < B; ++b) next.push_back(tokens[std::size_t(b)][std::size_t(prompt[b] + s)]);
        const auto rows = bs.step(next);
        REQUIRE(rows.size() == std::size_t(B) * V);
        for (int b = 0; b < B; ++b)
            require_agrees(std::vector<float>(rows.begin() + std::ptrdiff_t(std::size_t(b) * V),
                                              rows.begin() + std::ptrdiff_t(std::size_t(b + 1) * V)),
                           want[std::size_t(b)], std::size_t(prompt[b] + s), V,
                           "batch step " + std::to_string(s) + " b=" + std::to_string(b) + " " + where);
    }
    const auto all = dec.forward_batch(tokens, batch_mems);
    REQUIRE(all.size() == std::size_t(B));
    for (int b = 0; b < B; ++b)
        require_agrees(all[std::size_t(b)], want[std::size_t(b)], 0, V, "forward_batch b=" + std::to_string(b) + " " + where);
    std::vector<std::vector<int>> ragged = {tokens[0], {tokens[1].begin(), tokens[1].begin() + 2}};
    std::vector<std::optional<Memory>> ragged_mem;
    if (c.cross_attention) ragged_mem = {mems[0], mems[1]};
    const auto r = dec.forward_batch(ragged, ragged_mem);
    const Expected short_want = expected(model, ragged[1], mems[1]);
    require_agrees(r[1], short_want, 0, V, "forward_batch ragged " + where);
    require_agrees(r[0], want[0], 0, V, "forward_batch ragged long " + where);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The decoder against the float64 reference, every configuration
// ---------------------------------------------------------------------------------------------

TEST_CASE("teacher-forced, step-by-step and chunked logits agree with the float64 reference in every configuration",
          "[optimized][decoder]") {
    const KernelEntry& kernel = builtin(GENERATE(as<std::string>{}, "optimized", "reference"));
    const std::uint64_t seed = 1234;
    int index = 0;
    for (const ModelConfig& c : testing::option_configs(small_config())) {
        const std::uint64_t case_seed = seed + std::uint64_t(index++);
        require_every_path_agrees(c, case_seed, attention_kernel_of(kernel), index % 6,  // valid_len 0 .. S
                                  describe(c) + " seed=" + std::to_string(case_seed) + " kernel=" + kernel.name, false);
    }
}

TEST_CASE("a wider model (several panels, GEMM row blocks) agrees with the reference", "[optimized][decoder]") {
    ModelConfig c{.vocab_size = 300, .d_model = 96, .n_heads = 4, .d_ff = 200, .n_layers = 2, .max_len = 160};
    for (Norm norm : {Norm::post, Norm::pre}) {
        c.norm = norm;
        c.cross_attention = norm == Norm::pre;
        const std::uint64_t seed = 77;
        std::mt19937_64 rng(seed);
        const Model model = init_model(c, seed);
        const auto tokens = random_tokens(rng, 150, c.vocab_size);
        const auto mem = random_memory(rng, c, 20, 17);
        const Expected e = expected(model, tokens, mem);
        const Decoder dec(model);
        require_agrees(dec.forward(tokens, mem), e, 0, std::size_t(c.vocab_size), "teacher-forced " + describe(c));
        Session s(dec, mem);
        require_agrees(s.prefill(tokens, 64), e, 0, std::size_t(c.vocab_size), "chunked " + describe(c));
    }
}

TEST_CASE("BatchSession and forward_batch agree with the reference per sequence", "[optimized][decoder][batch]") {
    const KernelEntry& kernel = builtin(GENERATE(as<std::string>{}, "optimized", "reference"));
    const std::uint64_t seed = 555;
    int index = 0;
    for (const ModelConfig& c : testing::option_configs(small_config())) {
        if (index++ % 5 != 0) continue;  // a spread of configurations: batches cost B references each
        const std::uint64_t case_seed = seed + std::uint64_t(index);
        require_batch_agrees(c, case_seed, attention_kernel_of(kernel), describe(c) + " seed=" + std::to_string(case_seed));
    }
}

TEST_CASE("generate() with the cache equals the reference's recompute-everything generation", "[optimized][decoder]") {
    const std::uint64_t seed = 31337;
    int index = 0;
    for (const ModelConfig& c : testing::option_configs(small_config())) {
        if (index++ % 7 != 0) continue;
        std::mt19937_64 rng(seed + std::uint64_t(index));
        const Model model = init_model(c, seed + std::uint64_t(index));
        const auto prompt = random_tokens(rng, 3, c.vocab_size);
        const auto mem = random_memory(rng, c, 4, 3);
        const int max_new = c.max_len - 3;  // up to the last position
        const auto want = reference::Decoder<double>(model).generate(prompt, max_new, mem);
        const auto got = Decoder(model).generate(prompt, max_new, mem);
        INFO(describe(c) << " seed=" << seed + std::uint64_t(index));
        REQUIRE(got == want);
    }
}

TEST_CASE("forward writes every logit: Logits are not zeroed, so nothing stale may show", "[optimized][decoder]") {
    // The heap block a forward's logits take is, as likely as not, one just freed: here one of
    // the same size filled with NaN. Every element must have been overwritten.
    const ModelConfig c{.vocab_size = 301, .d_model = 32, .n_heads = 2, .d_ff = 64, .n_layers = 1, .max_len = 64};
    const Model model = init_model(c, 11);
    std::mt19937_64 rng(11);
    const Decoder dec(model);
    for (const int T : {1, 5, 37}) {
        const auto tokens = random_tokens(rng, T, c.vocab_size);
        for (int round = 0; round < 3; ++round) {
            {
                optimized::Logits stale(std::size_t(T) * std::size_t(c.vocab_size));
                std::fill(stale.begin(), stale.end(), std::numeric_limits<float>::quiet_NaN());
                asm volatile("" : : "r"(stale.data()) : "memory");  // the fill is not dropped
            }
            const auto logits = dec.forward(tokens);
            REQUIRE(logits.size() == std::size_t(T) * std::size_t(c.vocab_size));
            const auto nan = std::find_if(logits.begin(), logits.end(), [](float v) { return std::isnan(v); });
            INFO("T=" << T << " round " << round << ": first NaN at flat index " << (nan - logits.begin()));
            CHECK(nan == logits.end());
        }
    }
    // forward_batch's rows of each sequence, copied out of the padded batch, too.
    const std::vector<std::vector<int>> batch = {random_tokens(rng, 9, c.vocab_size), random_tokens(rng, 4, c.vocab_size)};
    const auto rows = dec.forward_batch(batch);
    REQUIRE(rows.size() == 2);
    for (std::size_t b = 0; b < 2; ++b) {
        REQUIRE(rows[b].size() == batch[b].size() * std::size_t(c.vocab_size));
        CHECK(std::none_of(rows[b].begin(), rows[b].end(), [](float v) { return std::isnan(v); }));
    }
}

TEST_CASE("a kernel that refuses raises KernelError naming the problem", "[optimized][decoder]") {
    const ModelConfig c = small_config();
    const Decoder dec(init_model(c, 4), {.fn = refusing_kernel});
    try {
        dec.forward({1, 2, 3});
        FAIL("no KernelError");
    } catch (const optimized::KernelError& e) {
        const std::string what = e.what();
        INFO(what);
        REQUIRE(what.find("q_len=3") != std::string::npos);
        REQUIRE(what.find("kv_len=3") != std::string::npos);
    }
    Session s(dec);
    REQUIRE_THROWS_AS(s.step(1), optimized::KernelError);
    REQUIRE_THROWS_AS(Decoder(init_model(c, 4), {.fn = nullptr}), InputError);
}

// ---------------------------------------------------------------------------------------------
// MODEL.md "Version 2 additions": grouped-query heads, the sliding window (a rolling cache), rope
// ---------------------------------------------------------------------------------------------

TEST_CASE("version 2 models: teacher-forced, step-by-step and chunked logits agree with the reference, and "
          "with a window (or a version 2 kernel: keys at their absolute positions) are the same bits",
          "[optimized][decoder][v2]") {
    const KernelEntry& kernel = builtin(GENERATE(from_range(kVersion2ModelKernels)));
    const std::uint64_t seed = 2024;
    int index = 0;
    for (const ModelConfig& c : v2_configs()) {
        const std::uint64_t case_seed = seed + std::uint64_t(index++);
        // A window shorter than the sequence: every row is its own kernel problem in every path.
        const bool windowed = (c.has_window() && c.attn_window < c.max_len - 1) || kernel.fn_v2;
        require_every_path_agrees(c, case_seed, attention_kernel_of(kernel), index % 6,
                                  describe_v2(c) + " kernel=" + kernel.name, windowed);
    }
}

TEST_CASE("version 2 models: BatchSession and forward_batch agree with the reference per sequence",
          "[optimized][decoder][batch][v2]") {
    const KernelEntry& kernel = builtin(GENERATE(from_range(kVersion2ModelKernels)));
    const std::uint64_t seed = 777;
    int index = 0;
    for (const ModelConfig& c : v2_configs()) {
        if (index++ % 3 != 0) continue;
        require_batch_agrees(c, seed + std::uint64_t(index), attention_kernel_of(kernel), describe_v2(c));
    }
}

TEST_CASE("a decoder around a version 2 kernel: a null kernel, both versions, or a negative block size is an "
          "InputError",
          "[optimized][decoder][v2]") {
    const Model model = init_model(small_config(), 1);
    CHECK_THROWS_AS(Decoder(model, optimized::AttentionKernel{}), InputError);
    CHECK_THROWS_AS(Decoder(model, {.fn = attncheck_optimized_kernel, .fn_v2 = attncheck_optimized_kernel_v2}),
                    InputError);
    CHECK_THROWS_AS(Decoder(model, {.fn_v2 = attncheck_optimized_kernel_v2, .block_size = -1}), InputError);
}
