// tests/optimized/decoder_session_test.cpp — exact properties of the optimized decoder's sessions
// (optimized/decoder.hpp): step() allocates nothing (counted by the global operator new replaced
// below, which only counts while a test asks it to); truncate then re-step equals a fresh session
// fed the same history, in a window's rolling cache and with a version 2 kernel too; passing
// max_len, and other bad inputs, is an InputError; a step makes one kernel call per layer or one
// per head, as its kernel declares; grouped-query heads read their kv head's cache.
//
// Dimension legend: V = vocab, d = d_model, h = heads, f = d_ff, N = max_len, T = tokens,
// S = memory rows, B = sequences, M/N/K = the matrix product's rows, outputs, reduction.
#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "attncheck/kernels.hpp"
#include "attncheck/model.hpp"
#include "kernels/registry.hpp"
#include "optimized/decoder.hpp"
#include "tests/optimized/decoder_cases.hpp"


// ---------------------------------------------------------------------------------------------
// Allocation counting: the replaced global operator new counts while g_counting is set.
// ---------------------------------------------------------------------------------------------
// Our operator new is malloc, so our operator delete is free; g++ 12 cannot see through the
// replacement and warns about the pairing at every inlined delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
// The nothrow forms too, so that every pointer our delete frees came from malloc (ASan checks
// the pairing).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace attncheck;
using namespace attncheck::testing;  // Decoder, small_config() and the rest of decoder_cases.hpp

// A plain attention kernel that allocates nothing (the reference kernel uses xtensor
// temporaries), so that the allocation test measures the decoder alone. Two passes per row:
// the maximum over visible keys, then exp-weights accumulated into out and normalised.
extern "C" int no_alloc_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                               float* out) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    const long Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    for (long bh = 0; bh < long(p->batch) * p->heads; ++bh) {
        const long b = bh / p->heads;
        const long valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        for (long i = 0; i < Tq; ++i) {
            const float* qi = q + (bh * Tq + i) * Dk;
            float* oi = out + (bh * Tq + i) * Dv;
            auto visible = [&](long j) { return j < valid && (!p->causal || j <= p->q_offset + i); };
            auto score = [&](long j) {
                float s = 0;
                for (long c = 0; c < Dk; ++c) s += qi[c] * k[(bh * Tk + j) * Dk + c];
                return s * p->scale;
            };
            float mx = -INFINITY;
            for (long j = 0; j < Tk; ++j)
                if (visible(j)) mx = std::max(mx, score(j));
            for (long c = 0; c < Dv; ++c) oi[c] = 0;
            if (mx == -INFINITY) continue;
            float sum = 0;
            for (long j = 0; j < Tk; ++j) {
                if (!visible(j)) continue;
                const float w = std::exp(score(j) - mx);
                sum += w;
                for (long c = 0; c < Dv; ++c) oi[c] += w * v[(bh * Tk + j) * Dv + c];
            }
            for (long c = 0; c < Dv; ++c) oi[c] /= sum;
        }
    }
    return ATTNCHECK_OK;
}

// small_config() with 6 query heads over kv_heads, rope, and a window of `window` keys.
ModelConfig windowed_gqa_config(int kv_heads, int window) {
    ModelConfig c = small_config();
    c.n_heads = 6;
    c.n_kv_heads = kv_heads;
    c.attn_window = window;
    c.positional = Positional::rope;
    return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Exact properties of the session
// ---------------------------------------------------------------------------------------------

TEST_CASE("Session::step allocates nothing", "[optimized][session][alloc]") {
    ModelConfig c = small_config();
    c.cross_attention = GENERATE(false, true);
    c.norm = GENERATE(Norm::post, Norm::pre);
    const Model model = init_model(c, 5);
    std::mt19937_64 rng(5);
    const auto mem = random_memory(rng, c, 4, 2);
    const Decoder dec(model, {.fn = no_alloc_kernel});
    Session s(dec, mem);
    s.step(1);  // first call: OpenMP's thread pool and any lazy runtime state
    g_allocations = 0;
    g_counting = true;
    long steps = 0;
    for (int t = 0; t < 10; ++t, ++steps) s.step(t % c.vocab_size);
    g_counting = false;
    INFO(describe(c) << ": " << g_allocations.load() << " allocations in " << steps << " steps");
    REQUIRE(g_allocations.load() == 0);
}

TEST_CASE("Session::step with the built-in optimized kernel allocates nothing", "[optimized][session][alloc]") {
    const ModelConfig c = small_config();
    const Decoder dec(init_model(c, 6));
    Session s(dec);
    s.step(1);
    g_allocations = 0;
    g_counting = true;
    for (int t = 0; t < 10; ++t) s.step(t);
    g_counting = false;
    REQUIRE(g_allocations.load() == 0);
}

TEST_CASE("truncate then re-step equals a fresh session", "[optimized][session]") {
    ModelConfig c = small_config();
    c.cross_attention = GENERATE(false, true);
    const Model model = init_model(c, 11);
    std::mt19937_64 rng(11);
    const auto mem = random_memory(rng, c, 4, 4);
    const Decoder dec(model);
    const auto history = random_tokens(rng, 5, c.vocab_size);
    const auto detour = random_tokens(rng, 6, c.vocab_size);
    const auto after = random_tokens(rng, 4, c.vocab_size);

    Session a(dec, mem);
    a.prefill(history);
    for (int t : detour) a.step(t);
    REQUIRE(a.pos() == 11);
    a.truncate(5);
    REQUIRE(a.pos() == 5);
    Session b(dec, mem);
    b.prefill(history);
    for (int t : after) {
        const auto ra = a.step(t);
        const std::vector<float> va(ra.begin(), ra.end());
        const auto rb = b.step(t);
        REQUIRE(va == std::vector<float>(rb.begin(), rb.end()));
    }
    REQUIRE_THROWS_AS(a.truncate(a.pos() + 1), InputError);
    REQUIRE_THROWS_AS(a.truncate(-1), InputError);
}

TEST_CASE("passing max_len is an InputError", "[optimized][session]") {
    const ModelConfig c = small_config();  // N = 24
    const Decoder dec(init_model(c, 3));
    Session s(dec);
    std::vector<int> full(std::size_t(c.max_len), 1);
    REQUIRE_NOTHROW(s.prefill(full, 7));
    REQUIRE(s.pos() == c.max_len);
    REQUIRE_THROWS_AS(s.step(1), InputError);
    s.truncate(c.max_len - 2);
    REQUIRE_THROWS_AS(s.prefill({1, 2, 3}), InputError);
    REQUIRE(s.pos() == c.max_len - 2);  // a refused call changes nothing
    REQUIRE_NOTHROW(s.step(2));
    REQUIRE_NOTHROW(s.step(2));
    REQUIRE_THROWS_AS(s.step(2), InputError);
    REQUIRE_THROWS_AS(dec.generate({1, 2}, c.max_len - 1), InputError);
    REQUIRE_NOTHROW(dec.generate({1, 2}, c.max_len - 2));
    std::vector<int> too_long(std::size_t(c.max_len + 1), 0);
    REQUIRE_THROWS_AS(dec.forward(too_long), InputError);
    BatchSession bs(dec, 2);
    bs.prefill(0, full);
    REQUIRE_THROWS_AS(bs.step({1, 1}), InputError);
    REQUIRE_THROWS_AS(bs.prefill(1, too_long), InputError);
    // Other bad inputs, each a clear InputError.
    REQUIRE_THROWS_AS(s.step(c.vocab_size), InputError);
    REQUIRE_THROWS_AS(s.step(-1), InputError);
    REQUIRE_THROWS_AS(bs.step({1}), InputError);
    REQUIRE_THROWS_AS(bs.prefill(2, {1}), InputError);
    REQUIRE_THROWS_AS(dec.forward({}), InputError);
    Memory m;
    m.rows = 2;
    m.valid_len = 2;
    m.data.assign(std::size_t(2 * c.d_model), 0.0f);
    REQUIRE_THROWS_AS(dec.forward({1}, m), InputError);  // memory for a model without cross-attention
}


// The built-in kernel, counting its calls.
std::atomic<int> g_kernel_calls{0};
extern "C" int counting_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                               float* out) {
    g_kernel_calls.fetch_add(1);
    return attncheck_optimized_kernel(p, q, k, v, out);
}

// Kernel calls in the second step of a session (the first one warms the cache).
static int calls_in_a_step(const Decoder& dec) {
    Session s(dec);
    s.step(1);
    g_kernel_calls = 0;
    s.step(2);
    return g_kernel_calls.load();
}

TEST_CASE("a kernel that reads only visible keys gets one call per layer in a step, others one per head",
          "[optimized][session]") {
    const ModelConfig c = small_config();  // 3 heads, 2 layers, no cross-attention
    const Model model = init_model(c, 3);
    CHECK(calls_in_a_step(Decoder(model, {.fn = counting_kernel, .reads_only_visible_keys = true})) == c.n_layers);
    CHECK(calls_in_a_step(Decoder(model, {.fn = counting_kernel, .reads_only_visible_keys = false})) ==
          c.n_layers * c.n_heads);
    // A function given alone declares nothing, whatever it points to: the built-in kernel itself
    // too. The default is the built-in kernel with the capability declared.
    CHECK(calls_in_a_step(Decoder(model, {.fn = counting_kernel})) == c.n_layers * c.n_heads);
    CHECK_FALSE(Decoder(model, {.fn = attncheck_optimized_kernel}).attention_kernel().reads_only_visible_keys);
    CHECK(Decoder(model).attention_kernel().fn == attncheck_optimized_kernel);
    CHECK(Decoder(model).attention_kernel().reads_only_visible_keys);
}

TEST_CASE("the decoder takes a kernel's capability from its registry entry, not from its pointer",
          "[optimized][session]") {
    const ModelConfig c = small_config();  // 3 heads, 2 layers, no cross-attention
    const Model model = init_model(c, 3);
    // The registry's built-in entry gives the default decoder's kernel exactly.
    const optimized::AttentionKernel builtin_kernel = attention_kernel_of(builtin("optimized"));
    CHECK(builtin_kernel.fn == optimized::kBuiltinAttentionKernel.fn);
    CHECK(builtin_kernel.reads_only_visible_keys);
    CHECK_FALSE(attention_kernel_of(builtin("reference")).reads_only_visible_keys);
    // A forwarding wrapper around the built-in kernel, declared through an entry: the fast path
    // (one call per layer in a step), where the same function without the declaration gets one
    // call per head.
    const KernelEntry wrapper{.name = "counting",
                              .fn = counting_kernel,
                              .description = "the built-in kernel, counting its calls",
                              .role = KernelRole::builtin,
                              .declaration = "",
                              .bug = "",
                              .reads_only_visible_keys = true};
    CHECK(calls_in_a_step(Decoder(model, attention_kernel_of(wrapper))) == c.n_layers);
    KernelEntry undeclared = wrapper;
    undeclared.reads_only_visible_keys = false;
    CHECK(calls_in_a_step(Decoder(model, attention_kernel_of(undeclared))) == c.n_layers * c.n_heads);
}

// ---------------------------------------------------------------------------------------------
// Version 2 models: grouped-query heads, the sliding window (a rolling cache)
// ---------------------------------------------------------------------------------------------

namespace {

// Records the k pointer of every call, then runs the built-in kernel.
std::vector<const float*> g_k_pointers;
extern "C" int recording_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    g_k_pointers.push_back(k);
    return attncheck_optimized_kernel(p, q, k, v, out);
}

}  // namespace

TEST_CASE("grouped-query heads read their kv head's cache, never a copy", "[optimized][session][v2]") {
    ModelConfig c = small_config();
    c.n_heads = 6;
    c.n_kv_heads = 2;
    c.n_layers = 1;
    c.attn_window = GENERATE(-1, 3);
    const Decoder dec(init_model(c, 5), {.fn = recording_kernel});
    Session s(dec);
    s.prefill({1, 2, 3, 4, 5, 6});
    g_k_pointers.clear();
    s.step(7);
    // One call per query head; heads 0-2 share kv head 0's keys, heads 3-5 kv head 1's.
    REQUIRE(g_k_pointers.size() == 6);
    CHECK(g_k_pointers[0] == g_k_pointers[1]);
    CHECK(g_k_pointers[1] == g_k_pointers[2]);
    CHECK(g_k_pointers[3] == g_k_pointers[4]);
    CHECK(g_k_pointers[4] == g_k_pointers[5]);
    CHECK(g_k_pointers[0] != g_k_pointers[3]);
}

TEST_CASE("a window's rolling cache: step allocates nothing, truncate within it equals a fresh session, "
          "beyond it is refused",
          "[optimized][session][v2]") {
    const ModelConfig c = windowed_gqa_config(3, 4);
    const Model model = init_model(c, 17);
    const Decoder dec(model, {.fn = no_alloc_kernel});
    std::mt19937_64 rng(17);
    const auto history = random_tokens(rng, 9, c.vocab_size);
    const auto after = random_tokens(rng, 6, c.vocab_size);

    Session a(dec);
    a.prefill(history, 3);
    g_allocations = 0;
    g_counting = true;
    a.step(1);
    a.step(2);
    g_counting = false;
    CHECK(g_allocations == 0);
    REQUIRE(a.pos() == 11);
    // Positions 6 .. 10 are held (5 slots): the row at 10 sees keys 6 .. 10, at 9 keys 5 .. 9.
    CHECK_THROWS_WITH(a.truncate(9), Catch::Matchers::Contains("rolling cache"));
    a.truncate(10);
    Session b(dec);
    b.prefill(history, 3);
    b.step(1);
    for (int t : after) {
        const auto ra = a.step(t);
        const std::vector<float> va(ra.begin(), ra.end());
        const auto rb = b.step(t);
        REQUIRE(va == std::vector<float>(rb.begin(), rb.end()));
    }
    a.reset();
    CHECK_NOTHROW(a.prefill(history));
}

TEST_CASE("a version 2 kernel keeps every key: truncate to any position equals a fresh session, even under a "
          "window",
          "[optimized][session][v2][paged]") {
    const ModelConfig c = windowed_gqa_config(2, 3);
    const Model model = init_model(c, 99);
    std::mt19937_64 rng(5);
    const std::vector<int> tokens = random_tokens(rng, 20, c.vocab_size);
    const Decoder dec(model, {.fn_v2 = attncheck_optimized_kernel_v2, .block_size = 4});
    Session s(dec);
    s.prefill(tokens);
    s.truncate(2);  // keys from position 0: long gone from a rolling cache of w + 1 = 4 keys
    const std::vector<int> rest(tokens.begin() + 2, tokens.end());
    const std::vector<float> again = s.prefill(rest, 3);
    Session fresh(dec);
    const std::vector<float> all = fresh.prefill(tokens);
    REQUIRE(again == std::vector<float>(all.begin() + std::ptrdiff_t(2 * c.vocab_size), all.end()));
}

