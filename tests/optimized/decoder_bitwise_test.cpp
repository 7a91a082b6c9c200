// tests/optimized/decoder_bitwise_test.cpp — the optimized decoder (optimized/decoder.hpp) gives
// the same bits whichever way it runs: on 1, 2 or 3 threads; through the built-in kernel's fast
// paths or the general path of per-head calls; with q, k, v read in place or through the ABI's
// copies; with its keys in the kernel's tiles or in rows; with a version 2 kernel on a paged
// cache or a dense one, and on a model version 1 can run, as with the version 1 kernel.
//
// Dimension legend: V = vocab, d = d_model, h = heads, f = d_ff, N = max_len, T = tokens,
// S = memory rows, B = sequences, M/N/K = the matrix product's rows, outputs, reduction.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/kernels.hpp"
#include "attncheck/model.hpp"
#include "optimized/attention_policy.hpp"
#include "optimized/decoder.hpp"
#include "tests/optimized/decoder_cases.hpp"
#include "tests/optimized/thread_count.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::testing;  // Decoder, small_config() and the rest of decoder_cases.hpp

// Everything a decoder computes for one sequence on `threads` threads: the teacher-forced logits,
// then a session's prefill of the first `prompt` tokens in chunks of `chunk` and steps over the rest.
optimized::Logits logits_on_threads(const Decoder& dec, const std::vector<int>& tokens, const std::optional<Memory>& mem,
                                    int prompt, int chunk, int threads) {
    ThreadCount t(threads);
    optimized::Logits out = dec.forward(tokens, mem);
    Session s(dec, mem);
    const auto p = s.prefill(std::vector<int>(tokens.begin(), tokens.begin() + prompt), chunk);
    out.insert(out.end(), p.begin(), p.end());
    for (std::size_t i = std::size_t(prompt); i < tokens.size(); ++i) {
        const auto r = s.step(tokens[i]);
        out.insert(out.end(), r.begin(), r.end());
    }
    return out;
}

}  // namespace

TEST_CASE("results are bitwise the same on 1 and 2 threads", "[optimized][decoder][threads]") {
    const ModelConfig c{.vocab_size = 300, .d_model = 64, .n_heads = 4, .d_ff = 128, .n_layers = 2, .max_len = 200,
                        .norm = Norm::pre, .cross_attention = true, .activation = Activation::gelu};
    const Model model = init_model(c, 8);
    std::mt19937_64 rng(8);
    const auto tokens = random_tokens(rng, 180, c.vocab_size);
    const auto mem = random_memory(rng, c, 9, 7);
    const Decoder dec(model);
    const auto one = logits_on_threads(dec, tokens, mem, 150, 50, 1);
    const auto two = logits_on_threads(dec, tokens, mem, 150, 50, 2);
    REQUIRE(one.size() == two.size());
    for (std::size_t i = 0; i < one.size(); ++i)
        if (one[i] != two[i]) {
            FAIL("element " << i << ": 1 thread " << one[i] << ", 2 threads " << two[i]);
        }
}

// The built-in kernel behind a different function pointer: declaring nothing, it gets the general
// path (one kernel call per head with kv_len = pos + n, one OpenMP region per product) that every
// kernel without the capability gets.
extern "C" int forwarding_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                                 float* out) {
    return attncheck_optimized_kernel(p, q, k, v, out);
}

TEST_CASE("the built-in kernel's fast paths equal the general path bitwise", "[optimized][session][threads]") {
    // With attncheck_optimized_kernel a chunk or a step makes one call for all heads over the
    // whole cache layer (kv_len = N, causal with q_offset = pos): it must give exactly the bits
    // of the general path's per-head calls (kv_len = pos + n), for any thread count (on 2 and
    // 3 threads the kernel splits a step's 3 heads over their key chunks, on 1 it does not).
    ModelConfig c = small_config();
    c.cross_attention = GENERATE(false, true);
    c.norm = GENERATE(Norm::post, Norm::pre);
    c.activation = Activation::gelu;  // the GEMV's separate activation epilogue
    c.max_len = 600;  // a step's call covers 2 of the kernel's 512-key chunks: its split path
    const Model model = init_model(c, 12);
    std::mt19937_64 rng(12);
    const auto tokens = random_tokens(rng, 120, c.vocab_size);
    const auto mem = c.cross_attention ? random_memory(rng, c, 6, 5) : std::nullopt;
    auto run = [&](optimized::AttentionKernel kernel, int threads) {
        ThreadCount t(threads);
        const Decoder dec(model, kernel);
        Session s(dec, mem);
        // Chunks of 70 rows: two query blocks, the kernel's pre-packed path.
        std::vector<float> out = s.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 100), 70);
        for (int i = 100; i < 120; ++i) {
            const auto r = s.step(tokens[std::size_t(i)]);
            out.insert(out.end(), r.begin(), r.end());
        }
        return out;
    };
    const auto general = run({.fn = forwarding_kernel, .reads_only_visible_keys = false}, 2);
    // The default kernel, and a foreign function that declares the capability, take the fast path.
    const optimized::AttentionKernel declared{.fn = forwarding_kernel, .reads_only_visible_keys = true};
    for (const optimized::AttentionKernel& kernel : {optimized::kBuiltinAttentionKernel, declared})
    for (int threads : {1, 2, 3}) {
        const auto fast = run(kernel, threads);
        REQUIRE(fast.size() == general.size());
        for (std::size_t i = 0; i < fast.size(); ++i)
            if (fast[i] != general[i]) {
                FAIL(describe(c) << ", " << threads << " threads: logit " << i % std::size_t(c.vocab_size)
                                 << " of row " << i / std::size_t(c.vocab_size) << ": fast path " << fast[i]
                                 << ", general path " << general[i]);
            }
    }
}
TEST_CASE("a teacher-forced forward reads the built-in kernel's q, k, v in place: the bits of its calls through "
          "the ABI's copies",
          "[optimized][decoder][threads]") {
    // Multi-head self-attention of sequences of one length goes to the built-in kernel as views
    // of the [T, 3d] projection rows, its output written into the [T, d] rows (in_place);
    // grouped-query heads, windows and padded batches go through the [B, H, T, dk] copies. The
    // declared forwarding kernel always gets the copies. Rows of 150 make three query blocks.
    std::vector<ModelConfig> configs;
    for (const Norm norm : {Norm::post, Norm::pre})
        for (const bool cross : {false, true})
            for (const Positional pos : {Positional::learned, Positional::rope}) {
                ModelConfig c = small_config();
                c.norm = norm;
                c.cross_attention = cross;
                c.positional = pos;
                c.max_len = 160;
                configs.push_back(c);
            }
    for (ModelConfig c : v2_configs()) {
        c.max_len = 160;
        configs.push_back(c);
    }
    const optimized::AttentionKernel declared{.fn = forwarding_kernel, .reads_only_visible_keys = true};
    for (const ModelConfig& c : configs) {
        INFO(describe_v2(c));
        const Model model = init_model(c, 31);
        std::mt19937_64 rng(31);
        const Decoder builtin(model), copies(model, declared);
        const std::vector<std::vector<int>> one = {random_tokens(rng, 150, c.vocab_size)};
        const std::vector<std::vector<int>> equal = {random_tokens(rng, 90, c.vocab_size),
                                                     random_tokens(rng, 90, c.vocab_size)};
        const std::vector<std::vector<int>> unequal = {equal[0], random_tokens(rng, 40, c.vocab_size)};
        const bool mha = optimized::self_attention_shape(c).v1();
        for (const auto& [tokens, in_place] :
             {std::pair{one, mha}, std::pair{equal, mha}, std::pair{unequal, false}}) {
            INFO(tokens.size() << " sequences of " << tokens[0].size() << " and " << tokens.back().size()
                               << " rows");
            std::vector<std::optional<Memory>> mems;
            for (std::size_t b = 0; b < tokens.size(); ++b) mems.push_back(random_memory(rng, c, 6, 4 + int(b)));
            optimized::MemoryCache mem;
            CHECK(optimized::TeacherAttention(builtin.packed(), optimized::kernel_of(builtin), mem, tokens)
                      .in_place == in_place);
            CHECK_FALSE(
                optimized::TeacherAttention(copies.packed(), optimized::kernel_of(copies), mem, tokens).in_place);
            for (const int threads : {1, 2}) {
                ThreadCount t(threads);
                const auto got = builtin.forward_batch(tokens, mems);
                const auto want = copies.forward_batch(tokens, mems);
                REQUIRE(got.size() == want.size());
                for (std::size_t b = 0; b < got.size(); ++b) {
                    INFO("sequence " << b << ", " << threads << " threads");
                    CHECK(got[b] == want[b]);
                }
            }
        }
    }
}

TEST_CASE("version 2 results are bitwise the same on 1 and 2 threads", "[optimized][decoder][threads][v2]") {
    ModelConfig c{.vocab_size = 300, .d_model = 64, .n_heads = 8, .d_ff = 128, .n_layers = 2, .max_len = 200,
                  .norm = Norm::pre, .activation = Activation::gelu};
    c.n_kv_heads = 2;
    c.positional = Positional::rope;
    c.attn_window = GENERATE(-1, 40);
    const Model model = init_model(c, 9);
    std::mt19937_64 rng(9);
    const auto tokens = random_tokens(rng, 120, c.vocab_size);
    const Decoder dec(model);
    const auto one = logits_on_threads(dec, tokens, std::nullopt, 100, 30, 1);
    const auto two = logits_on_threads(dec, tokens, std::nullopt, 100, 30, 2);
    REQUIRE(one == two);
}

TEST_CASE("a version 2 kernel: the paged cache gives the dense cache's bits, and MHA the version 1 kernel's",
          "[optimized][decoder][v2][paged]") {
    // attncheck_optimized_kernel_v2 shares the v1 kernel's tiles and arithmetic, at absolute key
    // positions: the decoder around it gives the same bits whatever the block size (0: dense),
    // and on a model version 1 can run, the bits of the decoder around the v1 kernel, in every
    // way of running (teacher-forced, steps, chunks, a batch of sequences at different positions).
    const std::uint64_t seed = 4242;
    std::vector<ModelConfig> configs = v2_configs();
    configs.insert(configs.begin(), small_config());
    ModelConfig cross = small_config();
    cross.cross_attention = true;
    configs.insert(configs.begin() + 1, cross);
    int index = 0;
    for (const ModelConfig& c : configs) {
        if (index++ % 2 != 0 && c.is_version2()) continue;  // half of the version 2 features
        std::mt19937_64 rng(seed + std::uint64_t(index));
        const Model model = init_model(c, seed + std::uint64_t(index));
        const int T = 17, B = 3;
        std::vector<std::vector<int>> tokens;
        std::vector<std::optional<Memory>> mems;
        for (int b = 0; b < B; ++b) {
            tokens.push_back(random_tokens(rng, T - 2 * b, c.vocab_size));
            mems.push_back(random_memory(rng, c, 4 + b, 2 + b));
        }
        const std::vector<std::optional<Memory>> batch_mems =
            c.cross_attention ? mems : std::vector<std::optional<Memory>>{};
        // Everything one decoder computes: teacher-forced batch, one session in chunks of 5, a
        // batch session (prefills of different lengths, then steps).
        const auto run_all = [&](const optimized::AttentionKernel& k) {
            const Decoder dec(model, k);
            std::vector<std::vector<float>> out;
            for (const auto& l : dec.forward_batch(tokens, batch_mems)) out.emplace_back(l.begin(), l.end());
            Session s(dec, c.cross_attention ? mems[0] : std::nullopt);
            out.push_back(s.prefill(tokens[0], 5));
            BatchSession bs(dec, B, batch_mems);
            for (int b = 0; b < B; ++b)
                out.push_back(bs.prefill(b, std::vector<int>(tokens[std::size_t(b)].begin(),
                                                              tokens[std::size_t(b)].begin() + 3 + b)));
            for (int step = 0; step < 8; ++step) {
                std::vector<int> next;
                for (int b = 0; b < B; ++b) next.push_back(tokens[std::size_t(b)][std::size_t(3 + b + step)]);
                const auto rows = bs.step(next);
                out.emplace_back(rows.begin(), rows.end());
            }
            return out;
        };
        INFO(describe_v2(c));
        const auto dense = run_all({.fn_v2 = attncheck_optimized_kernel_v2, .block_size = 0});
        for (const int bs : {1, 4, 7, 64}) {
            INFO("block_size " << bs);
            CHECK(run_all({.fn_v2 = attncheck_optimized_kernel_v2, .block_size = bs}) == dense);
        }
        if (!c.is_version2()) CHECK(run_all(optimized::kBuiltinAttentionKernel) == dense);
    }
}

TEST_CASE("a session keeps its keys in the built-in kernel's tiles only where every call reads them so",
          "[optimized][session]") {
    // The tiled cache (CacheView::k_tiled) is only readable by the built-in version 1 kernel
    // through one call for all heads: a kernel under test, a version 2 kernel and the
    // self-attention of version 2 (per-head and per-row calls on rows of the cache) get rows.
    const ModelConfig c = small_config();
    const Model model = init_model(c, 5);
    const optimized::AttentionKernel declared{.fn = forwarding_kernel, .reads_only_visible_keys = true};
    CHECK(optimized::tiled_key_cache(c, optimized::kernel_of(Decoder(model))));
    CHECK_FALSE(optimized::tiled_key_cache(c, optimized::kernel_of(Decoder(model, declared))));
    CHECK_FALSE(optimized::tiled_key_cache(
        c, optimized::kernel_of(Decoder(model, {.fn_v2 = attncheck_optimized_kernel_v2}))));
    for (const ModelConfig& v2 : v2_configs()) {
        INFO(describe_v2(v2));
        const bool v1_shape = optimized::self_attention_shape(v2).v1();
        CHECK(optimized::tiled_key_cache(v2, optimized::kernel_of(Decoder(init_model(v2, 5)))) == v1_shape);
    }
    // Rows of the cache: max_len rounded up to whole tiles with tiled keys.
    ModelConfig odd = c;
    odd.max_len = 70;
    CHECK(optimized::cache_rows(odd, true) == 128);
    CHECK(optimized::cache_rows(odd, false) == 70);
}

TEST_CASE("a BatchSession's tiled keys give the bits of its keys in rows", "[optimized][batch][threads]") {
    // With the built-in kernel a BatchSession keeps its keys tiled (tiled_key_cache), its prefill
    // and its steps calling the kernel on the tiles; a kernel that forwards to the same built-in
    // kernel through the ABI gets rows. Sequences at different positions (kv_valid_len), max_len
    // not a multiple of a tile, and a reset that leaves stale keys in the lanes past each position.
    ModelConfig c = small_config();
    c.cross_attention = GENERATE(false, true);
    c.max_len = 100;
    const Model model = init_model(c, 21);
    std::mt19937_64 rng(21);
    const int B = 3;
    std::vector<std::vector<int>> prompts;
    std::vector<std::optional<Memory>> mems;
    for (int b = 0; b < B; ++b) {
        prompts.push_back(random_tokens(rng, 20 + 17 * b, c.vocab_size));
        mems.push_back(c.cross_attention ? random_memory(rng, c, 3 + b, b + 1) : std::nullopt);
    }
    if (!c.cross_attention) mems.clear();
    const auto steps = random_tokens(rng, 3 * 12, c.vocab_size);
    auto run = [&](optimized::AttentionKernel kernel, int threads) {
        ThreadCount t(threads);
        const Decoder dec(model, kernel);
        BatchSession bs(dec, B, mems);
        std::vector<float> out;
        for (int round = 0; round < 2; ++round) {  // the second after a reset, over stale keys
            for (int b = 0; b < B; ++b) {
                const auto p = bs.prefill(b, prompts[std::size_t((b + round) % B)]);
                out.insert(out.end(), p.begin(), p.end());
            }
            for (int s = 0; s < 12; ++s) {
                const std::vector<int> next(steps.begin() + 3 * s, steps.begin() + 3 * s + 3);
                const auto r = bs.step(next);
                out.insert(out.end(), r.begin(), r.end());
            }
            bs.reset();
        }
        return out;
    };
    const optimized::AttentionKernel rows{.fn = forwarding_kernel, .reads_only_visible_keys = true};
    REQUIRE(optimized::tiled_key_cache(c, optimized::kernel_of(Decoder(model))));
    REQUIRE_FALSE(optimized::tiled_key_cache(c, optimized::kernel_of(Decoder(model, rows))));
    for (const int threads : {1, 2}) {
        INFO(describe(c) << ", " << threads << " threads");
        const auto want = run(rows, threads);
        const auto got = run(optimized::kBuiltinAttentionKernel, threads);
        REQUIRE(got.size() == want.size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
        CHECK(differ == 0);
    }
}
