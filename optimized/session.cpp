// optimized/session.cpp — incremental evaluation with a K/V cache: Session (one sequence, in
// chunks or one token at a time) and BatchSession (B sequences, one token each per step).
//
// Both run the layer stack of layers.hpp with ChunkAttention (a chunk of one sequence at its
// cache position) or BatchStepAttention (one row per sequence) of attention_policy.hpp. All
// step buffers are sized at construction, so step() allocates nothing.
//
// Dimension legend: V = vocab, d = d_model, H = heads, dk = d/H, L = layers, N = max_len,
// S = memory rows, B = sequences, n = rows of a chunk.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "attncheck/error.hpp"
#include "optimized/attention_policy.hpp"
#include "optimized/decoder.hpp"
#include "optimized/gemm.hpp"
#include "optimized/layers.hpp"
#include "optimized/weights.hpp"

namespace attncheck::optimized {

namespace {

void check_token(const ModelConfig& c, int token, const char* what) {
    if (token < 0 || token >= c.vocab_size)
        throw InputError(std::string(what) + ": token " + std::to_string(token) + " is outside [0, " +
                         std::to_string(c.vocab_size) + ")");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------------------------

struct Session::State {
    const Decoder* decoder;
    int pos = 0;
    // With a window's rolling cache: the lowest position whose keys are still held (a later
    // position has taken the slot of every one below it). 0 without a window.
    int oldest_kept = 0;
    int ring = 0;                         // w+1 slots of the rolling cache, 0: none
    // [L, hkv, R, dk], R = cache_rows(); the keys tiled with the built-in kernel (tiled_key_cache);
    // empty with a v2 kernel
    std::vector<float> k_cache, v_cache;
    bool k_tiled = false;
    PagedCache pool;                      // a version 2 kernel's cache instead
    // The positions pos .. pos+n-1 were just written.
    void advance(int n) {
        pos += n;
        if (ring) oldest_kept = std::max(oldest_kept, pos - ring);
    }
    MemoryCache mem;                      // [L, 1, H, S, dk]
    // Step scratch, sized at construction so that step() allocates nothing.
    RowBuffers step_rows;
    std::vector<float> x;       // [1, d]
    std::vector<float> logits;  // [V]
    // Prefill scratch, grown on demand.
    RowBuffers chunk_rows;
    std::vector<float> chunk_x, chunk_logits, qh, oh;

    // n rows at positions pos .. pos+n-1, with [H, n, dk] scratch qhp, ohp (null when n = 1).
    ChunkAttention attention(int n, float* qhp, float* ohp) {
        const PackedWeights& P = decoder->packed();
        const KernelRef kernel = kernel_of(*decoder);
        return ChunkAttention{.P = P, .kernel = kernel,
                              .cache = kernel.fn_v2 ? sequence_cache(pool, 0)
                                                    : sequence_cache(P.config, k_cache.data(), v_cache.data(), 1, 0, k_tiled),
                              .mem = mem.sequence(0), .pos = pos, .n = n, .qh = qhp, .oh = ohp};
    }
};

Session::Session(const Decoder& decoder, const std::optional<Memory>& memory) : s_(std::make_unique<State>()) {
    const ModelConfig& c = decoder.config();
    s_->decoder = &decoder;
    std::vector<std::optional<Memory>> mems;
    if (memory) mems.push_back(memory);
    s_->mem.build(decoder.packed(), checked_memories(c, mems, 1));
    const AttentionKernel& kernel = decoder.attention_kernel();
    if (kernel.fn_v2) {
        s_->pool.build(c, 1, kernel.block_size);  // every position keeps its keys: no rolling cache
    } else {
        s_->k_tiled = tiled_key_cache(c, kernel_of(decoder));
        const std::size_t cache = std::size_t(c.n_layers) * std::size_t(c.kv_heads()) *
                                  std::size_t(cache_rows(c, s_->k_tiled)) * std::size_t(c.head_dim());
        s_->k_cache.assign(cache, 0.0f);
        s_->v_cache.assign(cache, 0.0f);
        const int window = self_attention_shape(c).window;
        s_->ring = window >= 0 ? window + 1 : 0;
    }
    s_->step_rows.resize(c, 1);
    s_->x.assign(std::size_t(c.d_model), 0.0f);
    s_->logits.assign(std::size_t(c.vocab_size), 0.0f);
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;

int Session::pos() const { return s_->pos; }

std::vector<float> Session::prefill(const std::vector<int>& tokens, int chunk) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    if (tokens.empty()) throw InputError("prefill: the token list is empty");
    if (chunk < 0) throw InputError("prefill: chunk = " + std::to_string(chunk) + " (must be >= 0)");
    for (int t : tokens) check_token(c, t, "prefill");
    if (std::int64_t(s.pos) + std::int64_t(tokens.size()) > c.max_len)
        throw InputError("prefill: " + std::to_string(tokens.size()) + " tokens at position " +
                         std::to_string(s.pos) + " would pass max_len " + std::to_string(c.max_len));
    const int total = int(tokens.size());
    const int step = chunk == 0 ? total : std::min(chunk, total);
    const std::size_t d = std::size_t(c.d_model), V = std::size_t(c.vocab_size);
    s.chunk_rows.resize(c, step);
    s.chunk_x.resize(std::size_t(step) * d);
    s.chunk_logits.resize(std::size_t(step) * V);
    s.qh.resize(std::size_t(step) * d);
    s.oh.resize(std::size_t(step) * d);
    std::vector<float> out(std::size_t(total) * V);  // [n, V]
    for (int t0 = 0; t0 < total; t0 += step) {
        const int n = std::min(step, total - t0);
        for (int t = 0; t < n; ++t) embed_row(P, tokens[std::size_t(t0 + t)], s.pos + t, s.chunk_x.data() + std::size_t(t) * d);
        ChunkAttention a = s.attention(n, s.qh.data(), s.oh.data());
        run_layers(P, n, s.chunk_x.data(), s.chunk_rows, a);
        linear(P.lm_head, s.chunk_x.data(), n, int(d), out.data() + std::size_t(t0) * V, int(V));
        s.advance(n);
    }
    return out;
}

std::span<const float> Session::step(int token) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    check_token(c, token, "step");
    if (s.pos >= c.max_len)
        throw InputError("step: position " + std::to_string(s.pos) + " would pass max_len " + std::to_string(c.max_len));
    embed_row(P, token, s.pos, s.x.data());
    ChunkAttention a = s.attention(1, nullptr, nullptr);
    run_layers(P, 1, s.x.data(), s.step_rows, a);
    linear(P.lm_head, s.x.data(), 1, c.d_model, s.logits.data(), c.vocab_size);
    s.advance(1);
    return {s.logits.data(), s.logits.size()};
}

void Session::reset() {
    s_->pos = 0;
    s_->oldest_kept = 0;
}

void Session::truncate(int new_pos) {
    State& s = *s_;
    if (new_pos < 0 || new_pos > s.pos)
        throw InputError("truncate: position " + std::to_string(new_pos) + " is outside [0, " + std::to_string(s.pos) + "]");
    // The next row, at new_pos, sees keys from max(0, new_pos - w): the rolling cache must still
    // hold them.
    const int w = s.ring - 1;
    if (s.ring && new_pos > 0 && std::max(0, new_pos - w) < s.oldest_kept)
        throw InputError("truncate: position " + std::to_string(new_pos) + " needs the keys from position " +
                         std::to_string(std::max(0, new_pos - w)) + ", but the rolling cache of attn_window + 1 = " +
                         std::to_string(s.ring) + " keys holds only positions from " +
                         std::to_string(s.oldest_kept) + " (go back to " + std::to_string(s.oldest_kept + w) +
                         " or later, or reset)");
    s.pos = new_pos;
}

// ---------------------------------------------------------------------------------------------
// BatchSession
// ---------------------------------------------------------------------------------------------

struct BatchSession::State {
    const Decoder* decoder;
    int B = 0;
    std::vector<int> pos;            // [B]
    std::vector<int32_t> valid;      // [B] pos + 1 during a step
    // [L, B, hkv, R, dk], R = cache_rows(); the keys tiled with the built-in kernel (tiled_key_cache);
    // empty with a v2 kernel
    std::vector<float> k_cache, v_cache;
    bool k_tiled = false;
    PagedCache pool;                      // a version 2 kernel's cache instead
    MemoryCache mem;                 // [L, B, H, S, dk]
    RowBuffers step_rows;            // B rows
    std::vector<float> x, qh;        // [B, d]
    std::vector<float> logits;       // [B, V]
    std::vector<float> chunk_x, qh_chunk, oh_chunk;
    RowBuffers chunk_rows;
};

BatchSession::BatchSession(const Decoder& decoder, int batch, const std::vector<std::optional<Memory>>& memories)
    : s_(std::make_unique<State>()) {
    const ModelConfig& c = decoder.config();
    if (batch < 1) throw InputError("BatchSession: batch = " + std::to_string(batch) + " (must be >= 1)");
    State& s = *s_;
    s.decoder = &decoder;
    s.B = batch;
    s.mem.build(decoder.packed(), checked_memories(c, memories, std::size_t(batch)));
    s.pos.assign(std::size_t(batch), 0);
    s.valid.assign(std::size_t(batch), 0);
    const AttentionKernel& kernel = decoder.attention_kernel();
    if (kernel.fn_v2) {
        s.pool.build(c, batch, kernel.block_size);
    } else {
        s.k_tiled = tiled_key_cache(c, kernel_of(decoder));
        const std::size_t cache = std::size_t(c.n_layers) * std::size_t(batch) * std::size_t(c.kv_heads()) *
                                  std::size_t(cache_rows(c, s.k_tiled)) * std::size_t(c.head_dim());
        s.k_cache.assign(cache, 0.0f);  // zero: rows past a position are padding the kernel may touch
        s.v_cache.assign(cache, 0.0f);
    }
    s.step_rows.resize(c, batch);
    s.x.assign(std::size_t(batch) * std::size_t(c.d_model), 0.0f);
    s.qh.assign(s.x.size(), 0.0f);
    s.logits.assign(std::size_t(batch) * std::size_t(c.vocab_size), 0.0f);
}
BatchSession::~BatchSession() = default;
int BatchSession::batch() const { return s_->B; }
int BatchSession::pos(int b) const {
    if (b < 0 || b >= s_->B) throw InputError("BatchSession: sequence " + std::to_string(b) + " is outside [0, " + std::to_string(s_->B) + ")");
    return s_->pos[std::size_t(b)];
}

std::vector<float> BatchSession::prefill(int b, const std::vector<int>& tokens) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    const int p0 = pos(b);  // checks b
    if (tokens.empty()) throw InputError("BatchSession::prefill: the token list is empty");
    for (int t : tokens) check_token(c, t, "BatchSession::prefill");
    if (std::int64_t(p0) + std::int64_t(tokens.size()) > c.max_len)
        throw InputError("BatchSession::prefill: " + std::to_string(tokens.size()) + " tokens at position " +
                         std::to_string(p0) + " of sequence " + std::to_string(b) + " would pass max_len " +
                         std::to_string(c.max_len));
    const int n = int(tokens.size());
    const std::size_t d = std::size_t(c.d_model), V = std::size_t(c.vocab_size);
    s.chunk_rows.resize(c, n);
    s.chunk_x.resize(std::size_t(n) * d);
    s.qh_chunk.resize(std::size_t(n) * d);
    s.oh_chunk.resize(std::size_t(n) * d);
    for (int t = 0; t < n; ++t) embed_row(P, tokens[std::size_t(t)], p0 + t, s.chunk_x.data() + std::size_t(t) * d);
    const KernelRef kernel = kernel_of(*s.decoder);
    ChunkAttention a{.P = P, .kernel = kernel,
                     .cache = kernel.fn_v2 ? sequence_cache(s.pool, b)
                                           : sequence_cache(c, s.k_cache.data(), s.v_cache.data(), s.B, b, s.k_tiled),
                     .mem = s.mem.sequence(b), .pos = p0, .n = n, .qh = s.qh_chunk.data(), .oh = s.oh_chunk.data()};
    run_layers(P, n, s.chunk_x.data(), s.chunk_rows, a);
    std::vector<float> out(std::size_t(n) * V);
    linear(P.lm_head, s.chunk_x.data(), n, int(d), out.data(), int(V));
    s.pos[std::size_t(b)] += n;
    return out;
}

std::span<const float> BatchSession::step(const std::vector<int>& tokens) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    if (int(tokens.size()) != s.B)
        throw InputError("BatchSession::step: " + std::to_string(tokens.size()) + " tokens for " + std::to_string(s.B) + " sequences");
    for (int b = 0; b < s.B; ++b) {
        check_token(c, tokens[std::size_t(b)], "BatchSession::step");
        if (s.pos[std::size_t(b)] >= c.max_len)
            throw InputError("BatchSession::step: sequence " + std::to_string(b) + " at position " +
                             std::to_string(s.pos[std::size_t(b)]) + " would pass max_len " + std::to_string(c.max_len));
    }
    const std::size_t d = std::size_t(c.d_model);
    for (int b = 0; b < s.B; ++b) {
        embed_row(P, tokens[std::size_t(b)], s.pos[std::size_t(b)], s.x.data() + std::size_t(b) * d);
        s.valid[std::size_t(b)] = s.pos[std::size_t(b)] + 1;
    }
    BatchStepAttention a{.P = P, .kernel = kernel_of(*s.decoder), .k_cache = s.k_cache.data(),
                         .v_cache = s.v_cache.data(), .mem = s.mem, .valid = s.valid.data(),
                         .pos = s.pos.data(), .B = s.B, .qh = s.qh.data(), .pool = &s.pool, .k_tiled = s.k_tiled};
    run_layers(P, s.B, s.x.data(), s.step_rows, a);
    linear(P.lm_head, s.x.data(), s.B, c.d_model, s.logits.data(), c.vocab_size);
    for (int& p : s.pos) ++p;
    return {s.logits.data(), s.logits.size()};
}

void BatchSession::reset() {
    std::fill(s_->pos.begin(), s_->pos.end(), 0);
}

}  // namespace attncheck::optimized
