// tests/optimized/decoder_test.cpp — the optimized decoder (optimized/decoder.hpp); its matrix
// products are tested in gemm_test.cpp.
//
// Accuracy: every decoder result is compared with reference::Decoder<double> (the oracle) with
// reference::Decoder<float> as the float32 baseline, through check_agreement() of
// attncheck/tolerance.hpp (NUMERICS.md), on random models of every MODEL.md configuration
// (norm x cross-attention x positional x activation x embed scale x tied: 96 configurations),
// teacher-forced, step by step, in chunks of several sizes, in a BatchSession and in
// forward_batch.
//
// Exact properties (bitwise): results do not depend on the thread count; truncate then re-step
// equals a fresh session fed the same history; step() allocates nothing (counted by the global
// operator new replaced below, which only counts while a test asks it to).
//
// To add a configuration: extend testing::option_configs() (tests/model/model_test_util.hpp);
// every failure prints the configuration, the seed and the worst element.
//
// Dimension legend: V = vocab, d = d_model, h = heads, f = d_ff, N = max_len, T = tokens,
// S = memory rows, B = sequences, M/N/K = the matrix product's rows, outputs, reduction.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <optional>
#include <random>
#include <span>
#include <sstream>
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
#include "tests/optimized/thread_count.hpp"

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
using optimized::Activation32;
using optimized::BatchSession;
using optimized::Decoder;
using optimized::Session;

using testing::ThreadCount;

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

extern "C" int refusing_kernel(const attncheck_problem*, const float*, const float*, const float*, float*) {
    return ATTNCHECK_UNSUPPORTED;
}

// The built-in kernels a version 2 model is run with: the version 1 kernels (a call per head
// and row where the model needs it) and the version 2 kernels.
const std::vector<std::string> kVersion2ModelKernels = {"optimized", "reference", "optimized_v2", "reference_v2"};

// A built-in kernel's registry entry: the kernel with what it declares to the decoder.
const KernelEntry& builtin(const std::string& name) {
    const KernelEntry* e = find_kernel(name, KernelRole::builtin);
    REQUIRE(e);
    return *e;
}

std::string describe(const ModelConfig& c) {
    std::ostringstream s;
    s << "d=" << c.d_model << " h=" << c.n_heads << " f=" << c.d_ff << " L=" << c.n_layers << " V=" << c.vocab_size
      << " N=" << c.max_len << " norm=" << to_string(c.norm) << " cross=" << c.cross_attention
      << " positional=" << to_string(c.positional) << " activation=" << to_string(c.activation)
      << " embed_scale=" << (c.embed_scale_sqrt_d ? "sqrt_d_model" : "1") << " tied=" << c.tie_embeddings;
    return s.str();
}

// Odd sizes on purpose: d = 24 is not a multiple of the 32-column panel, dk = 8, f = 40 and
// V = 37 leave ragged last panels.
ModelConfig small_config() {
    return {.vocab_size = 37, .d_model = 24, .n_heads = 3, .d_ff = 40, .n_layers = 2, .max_len = 24};
}

std::vector<int> random_tokens(std::mt19937_64& rng, int n, int V) {
    std::uniform_int_distribution<int> u(0, V - 1);
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = u(rng);
    return t;
}

// Memory m [S, d] with valid_len drawn from {0, 1 .. S}: 0 is the all-padding edge case.
std::optional<Memory> random_memory(std::mt19937_64& rng, const ModelConfig& c, int S, int valid) {
    if (!c.cross_attention) return std::nullopt;
    Memory m;
    m.rows = S;
    m.valid_len = valid;
    std::normal_distribution<float> n(0.0f, 1.0f);
    m.data.resize(std::size_t(S) * std::size_t(c.d_model));
    for (float& x : m.data) x = n(rng);
    return m;
}

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

namespace {

// d = 24 over 6 heads of dk = 4 (even: rope), N = 24: each version 2 feature alone and together.
std::vector<ModelConfig> v2_configs() {
    std::vector<ModelConfig> out;
    ModelConfig base = small_config();
    base.n_heads = 6;
    for (int kv : {0, 2, 3, 1})
        for (int window : {-1, 0, 3, 30})  // 30 >= N - 1: hides nothing
            for (bool rope : {false, true}) {
                ModelConfig c = base;
                c.n_kv_heads = kv;
                c.attn_window = window;
                if (rope) c.positional = Positional::rope;
                if (!c.is_version2()) continue;
                const int i = int(out.size());
                c.norm = i % 2 ? Norm::pre : Norm::post;
                c.cross_attention = i % 3 == 0;
                c.tie_embeddings = i % 4 < 2;
                c.activation = i % 5 == 0 ? Activation::gelu : Activation::relu;
                out.push_back(c);
            }
    return out;
}

std::string describe_v2(const ModelConfig& c) {
    return describe(c) + " n_kv_heads=" + std::to_string(c.n_kv_heads) + " attn_window=" +
           std::to_string(c.attn_window);
}

}  // namespace

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

TEST_CASE("a decoder around a version 2 kernel: a null kernel, both versions, or a negative block size is an "
          "InputError",
          "[optimized][decoder][v2]") {
    const Model model = init_model(small_config(), 1);
    CHECK_THROWS_AS(Decoder(model, optimized::AttentionKernel{}), InputError);
    CHECK_THROWS_AS(Decoder(model, {.fn = attncheck_optimized_kernel, .fn_v2 = attncheck_optimized_kernel_v2}),
                    InputError);
    CHECK_THROWS_AS(Decoder(model, {.fn_v2 = attncheck_optimized_kernel_v2, .block_size = -1}), InputError);
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
