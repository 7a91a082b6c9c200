// optimized/attention_policy.cpp — the decoder's attention policies, the cross-attention memory
// and the one place a kernel is called (attention_policy.hpp).
#include "optimized/attention_policy.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "attncheck/error.hpp"
#include "attncheck/problem.hpp"
#include "optimized/gemm.hpp"

namespace attncheck::optimized {

namespace {

std::string describe(const attncheck_problem& p) {
    std::ostringstream s;
    s << "batch=" << p.batch << " heads=" << p.heads << " q_len=" << p.q_len << " kv_len=" << p.kv_len
      << " head_dim=" << p.head_dim << " value_dim=" << p.value_dim << " q_offset=" << p.q_offset
      << " causal=" << p.causal << " kv_valid_len=" << (p.kv_valid_len ? "given" : "null");
    return s.str();
}

attncheck_problem make_problem(const PackedWeights& P, int batch, int heads, int q_len, int kv_len,
                               int q_offset, bool causal, const int32_t* kv_valid_len) {
    return attncheck::make_problem({.batch = batch, .heads = heads, .q_len = q_len, .kv_len = kv_len,
                                    .head_dim = P.config.head_dim(), .value_dim = P.config.head_dim(),
                                    .q_offset = q_offset, .causal = causal,
                                    .kv_valid_len = kv_valid_len, .scale = P.attn_scale});
}

void call_kernel(const KernelRef& kernel, const attncheck_problem& p, const float* q, const float* k,
                 const float* v, float* out, const char* where) {
    const int rc = kernel.fn(&p, q, k, v, out);
    if (rc != 0)
        throw KernelError(std::string("attention kernel returned ") + std::to_string(rc) +
                          " (unsupported) for the " + where + " problem: " + describe(p));
    // Row i of sequence b sees no key only when kv_valid_len[b] = 0 (key 0 is visible to every
    // row otherwise, since q_offset >= 0): such a sequence's whole output block.
    if (!kernel.zero_empty_rows || !p.kv_valid_len) return;
    const std::size_t per_b = std::size_t(p.heads) * std::size_t(p.q_len) * std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b)
        if (p.kv_valid_len[b] == 0) std::fill_n(out + std::size_t(b) * per_b, per_b, 0.0f);
}

// Memory K/V of every layer: m [S, d] -> k, v [H, S_pad, dk] for one sequence, written at
// k_out/v_out (rows >= S untouched).
void memory_kv(const PackedWeights& P, int l, const Memory& mem, int S_pad, float* k_out, float* v_out,
               std::vector<float>& tmp) {
    const int d = P.config.d_model, H = P.config.n_heads, dk = P.config.head_dim();
    const int S = mem.rows;
    tmp.resize(std::size_t(S) * 2 * std::size_t(d));
    linear(P.layers[std::size_t(l)].cross_kv, mem.data.data(), S, d, tmp.data(), 2 * d);  // [S, 2d]
    for (int s = 0; s < S; ++s)
        for (int hh = 0; hh < H; ++hh) {
            const float* row = tmp.data() + std::size_t(s) * 2 * std::size_t(d) + std::size_t(hh * dk);
            const std::size_t at = (std::size_t(hh) * std::size_t(S_pad) + std::size_t(s)) * std::size_t(dk);
            std::memcpy(k_out + at, row, sizeof(float) * std::size_t(dk));
            std::memcpy(v_out + at, row + d, sizeof(float) * std::size_t(dk));
        }
}

}  // namespace

KernelRef kernel_of(const Decoder& decoder) {
    const AttentionKernel& k = decoder.attention_kernel();
    return {.fn = k.fn, .reads_only_visible_keys = k.reads_only_visible_keys,
            .zero_empty_rows = decoder.zero_empty_rows()};
}

// ---------------------------------------------------------------------------------------------
// Cross-attention memory
// ---------------------------------------------------------------------------------------------

void MemoryCache::build(const PackedWeights& P, const std::vector<const Memory*>& mems) {
    const ModelConfig& c = P.config;
    if (!c.cross_attention) return;
    const std::size_t B = mems.size();
    S = 0;
    for (const Memory* m : mems) S = std::max(S, m->rows);
    seq_stride = std::size_t(c.n_heads) * std::size_t(S) * std::size_t(c.head_dim());
    layer_stride = B * seq_stride;
    k.assign(std::size_t(c.n_layers) * layer_stride, 0.0f);
    v.assign(k.size(), 0.0f);
    valid.resize(B);
    std::vector<float> tmp;
    for (std::size_t b = 0; b < B; ++b) {
        valid[b] = mems[b]->valid_len;
        for (int l = 0; l < c.n_layers; ++l)
            memory_kv(P, l, *mems[b], S, k.data() + std::size_t(l) * layer_stride + b * seq_stride,
                      v.data() + std::size_t(l) * layer_stride + b * seq_stride, tmp);
    }
}

MemoryView MemoryCache::sequence(int b) const {
    if (valid.empty()) return {};  // no cross-attention
    return {.k = k_at(0, b), .v = v_at(0, b), .layer_stride = layer_stride, .S = S,
            .valid = valid.data() + b};
}

std::vector<const Memory*> checked_memories(const ModelConfig& c, const std::vector<std::optional<Memory>>& memories,
                                            std::size_t batch) {
    if (!memories.empty() && memories.size() != batch)
        throw InputError("memories: " + std::to_string(memories.size()) + " given for " +
                         std::to_string(batch) + " sequences (must be none or one per sequence)");
    std::vector<const Memory*> out;
    for (std::size_t b = 0; b < batch; ++b) {
        const std::optional<Memory> none;
        const std::optional<Memory>& m = memories.empty() ? none : memories[b];
        check_memory(c, m);
        if (c.cross_attention) out.push_back(&*m);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Teacher-forced batch
// ---------------------------------------------------------------------------------------------

TeacherAttention::TeacherAttention(const PackedWeights& P_, KernelRef kernel_, const MemoryCache& mem_,
                                   const std::vector<std::vector<int>>& tokens)
    : P(P_), kernel(kernel_), mem(mem_) {
    int M = 0;
    for (const auto& t : tokens) {
        row0.push_back(M);
        len.push_back(int(t.size()));
        valid.push_back(int32_t(t.size()));
        M += int(t.size());
        Tmax = std::max(Tmax, int(t.size()));
    }
    for (int l : len) padded = padded || l != Tmax;
    const std::size_t abi = tokens.size() * std::size_t(Tmax) * std::size_t(P.config.d_model);  // B * H * Tmax * dk
    qh.assign(abi, 0.0f);  // zero: padding rows stay zero (finite) in every layer
    kh.assign(abi, 0.0f);
    vh.assign(abi, 0.0f);
    oh.assign(abi, 0.0f);
}

std::size_t TeacherAttention::at(int b, int hh, int t) const {
    const ModelConfig& c = P.config;
    return ((std::size_t(b) * std::size_t(c.n_heads) + std::size_t(hh)) * std::size_t(Tmax) + std::size_t(t)) *
           std::size_t(c.head_dim());
}

// rows of src [M, ld] (column offset col0, heads of dk) -> dst [B, H, Tmax, dk], and back.
void TeacherAttention::scatter(const float* src, std::size_t ld, int col0, std::vector<float>& dst) const {
    const int B = int(len.size()), H = P.config.n_heads, dk = P.config.head_dim();
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < len[std::size_t(b)]; ++t)
            for (int hh = 0; hh < H; ++hh)
                std::memcpy(dst.data() + at(b, hh, t),
                            src + std::size_t(row0[std::size_t(b)] + t) * ld + std::size_t(col0 + hh * dk),
                            sizeof(float) * std::size_t(dk));
}

void TeacherAttention::gather(float* att) const {
    const int B = int(len.size()), H = P.config.n_heads, dk = P.config.head_dim();
    const std::size_t d = std::size_t(P.config.d_model);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < len[std::size_t(b)]; ++t)
            for (int hh = 0; hh < H; ++hh)
                std::memcpy(att + std::size_t(row0[std::size_t(b)] + t) * d + std::size_t(hh * dk),
                            oh.data() + at(b, hh, t), sizeof(float) * std::size_t(dk));
}

void TeacherAttention::self(int, const float* qkv, float* att) {
    const std::size_t ld = 3 * std::size_t(P.config.d_model);
    const int d = P.config.d_model;
    scatter(qkv, ld, 0, qh);
    scatter(qkv, ld, d, kh);
    scatter(qkv, ld, 2 * d, vh);
    const attncheck_problem p = make_problem(P, int(len.size()), P.config.n_heads, Tmax, Tmax, 0, true,
                                             padded ? valid.data() : nullptr);
    call_kernel(kernel, p, qh.data(), kh.data(), vh.data(), oh.data(), "self-attention prefill");
    gather(att);
}

void TeacherAttention::cross(int l, const float* q, float* att) {
    scatter(q, std::size_t(P.config.d_model), 0, qh);
    const attncheck_problem p = make_problem(P, int(len.size()), P.config.n_heads, Tmax, mem.S, 0, false,
                                             mem.valid.data());
    call_kernel(kernel, p, qh.data(), mem.k_at(l, 0), mem.v_at(l, 0), oh.data(), "cross-attention prefill");
    gather(att);
}

// ---------------------------------------------------------------------------------------------
// A chunk of one sequence
// ---------------------------------------------------------------------------------------------

CacheView sequence_cache(const ModelConfig& c, float* k, float* v, int batch, int b) {
    const std::size_t head_stride = std::size_t(c.max_len) * std::size_t(c.head_dim());
    const std::size_t seq = std::size_t(c.n_heads) * head_stride;  // H * N * dk
    return {.k = k + std::size_t(b) * seq, .v = v + std::size_t(b) * seq,
            .layer_stride = std::size_t(batch) * seq, .head_stride = head_stride};
}

void ChunkAttention::self(int l, const float* qkv, float* att) {
    const ModelConfig& c = P.config;
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
    float* kl = cache.k + std::size_t(l) * cache.layer_stride;
    float* vl = cache.v + std::size_t(l) * cache.layer_stride;
    for (int t = 0; t < n; ++t) {
        const float* row = qkv + std::size_t(t) * 3 * std::size_t(d);
        for (int hh = 0; hh < H; ++hh) {
            const std::size_t at = std::size_t(hh) * cache.head_stride + std::size_t(pos + t) * std::size_t(dk);
            std::memcpy(kl + at, row + d + hh * dk, sizeof(float) * std::size_t(dk));
            std::memcpy(vl + at, row + 2 * d + hh * dk, sizeof(float) * std::size_t(dk));
            if (n > 1)
                std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                            row + hh * dk, sizeof(float) * std::size_t(dk));
        }
    }
    // With one row, q [d] already is [H, 1, dk] and att [d] is out [H, 1, dk].
    const float* q = n > 1 ? qh : qkv;
    float* out = n > 1 ? oh : att;
    const char* where = n > 1 ? "self-attention chunk" : "self-attention step";
    if (kernel.reads_only_visible_keys) {
        // The whole cache layer [H, N, dk] is passed as k [1, H, N, dk] with the causal mask
        // (q_offset = pos) hiding positions >= pos + n: one call for all heads instead of H.
        // Per-head calls cost one or two OpenMP regions each (a futex wake-up apiece under
        // OMP_WAIT_POLICY=passive) and a short head leaves a thread idle: on `base` at ctx 1024
        // the attention of a step took 1.7 ms that way, 1.0 ms in one call. The rows each
        // query sees are the same; with the built-in kernel so is every bit of the result.
        const int N = int(cache.head_stride / std::size_t(dk));
        const attncheck_problem p = make_problem(P, 1, H, n, N, pos, true, nullptr);
        call_kernel(kernel, p, q, kl, vl, out, where);
    } else {
        // The exact incremental problem of KERNEL_ABI.md (kv_len = pos + n, one head at a
        // time): a kernel under test may do work in proportion to kv_len, and this is the shape
        // the decoder-level properties check it with.
        const attncheck_problem p = make_problem(P, 1, 1, n, pos + n, pos, true, nullptr);
        for (int hh = 0; hh < H; ++hh)
            call_kernel(kernel, p, q + std::size_t(hh) * std::size_t(n) * std::size_t(dk),
                        kl + std::size_t(hh) * cache.head_stride, vl + std::size_t(hh) * cache.head_stride,
                        out + std::size_t(hh) * std::size_t(n) * std::size_t(dk), where);
    }
    if (n > 1) gather(att);
}

void ChunkAttention::cross(int l, const float* q, float* att) {
    const ModelConfig& c = P.config;
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
    if (n > 1)
        for (int t = 0; t < n; ++t)
            for (int hh = 0; hh < H; ++hh)
                std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                            q + std::size_t(t) * std::size_t(d) + std::size_t(hh * dk), sizeof(float) * std::size_t(dk));
    const attncheck_problem p = make_problem(P, 1, H, n, mem.S, 0, false, mem.valid);
    call_kernel(kernel, p, n > 1 ? qh : q, mem.k + std::size_t(l) * mem.layer_stride,
                mem.v + std::size_t(l) * mem.layer_stride, n > 1 ? oh : att, "cross-attention");
    if (n > 1) gather(att);
}

void ChunkAttention::gather(float* att) const {
    const ModelConfig& c = P.config;
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
    for (int t = 0; t < n; ++t)
        for (int hh = 0; hh < H; ++hh)
            std::memcpy(att + std::size_t(t) * std::size_t(d) + std::size_t(hh * dk),
                        oh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                        sizeof(float) * std::size_t(dk));
}

// ---------------------------------------------------------------------------------------------
// A step of a batch of sequences
// ---------------------------------------------------------------------------------------------

void BatchStepAttention::self(int l, const float* qkv, float* att) {
    const ModelConfig& c = P.config;
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model, N = c.max_len;
    const std::size_t seq = std::size_t(H) * std::size_t(N) * std::size_t(dk);
    float* kl = k_cache + std::size_t(l) * std::size_t(B) * seq;
    float* vl = v_cache + std::size_t(l) * std::size_t(B) * seq;
    for (int b = 0; b < B; ++b) {
        const float* row = qkv + std::size_t(b) * 3 * std::size_t(d);
        std::memcpy(qh + std::size_t(b) * std::size_t(d), row, sizeof(float) * std::size_t(d));
        for (int hh = 0; hh < H; ++hh) {
            const std::size_t at = std::size_t(b) * seq + (std::size_t(hh) * std::size_t(N) + std::size_t(pos[b])) * std::size_t(dk);
            std::memcpy(kl + at, row + d + hh * dk, sizeof(float) * std::size_t(dk));
            std::memcpy(vl + at, row + 2 * d + hh * dk, sizeof(float) * std::size_t(dk));
        }
    }
    const attncheck_problem p = make_problem(P, B, H, 1, N, 0, false, valid);
    call_kernel(kernel, p, qh, kl, vl, att, "batch self-attention step");
}

void BatchStepAttention::cross(int l, const float* q, float* att) {
    const attncheck_problem p = make_problem(P, B, P.config.n_heads, 1, mem.S, 0, false, mem.valid.data());
    call_kernel(kernel, p, q, mem.k_at(l, 0), mem.v_at(l, 0), att, "batch cross-attention step");
}

}  // namespace attncheck::optimized
