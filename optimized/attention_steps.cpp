// optimized/attention_steps.cpp — the decoder's incremental attention policies (attention_policy.hpp):
// ChunkAttention (a session's prefill chunks and steps over its cache) and BatchStepAttention (a
// batched step of sequences at their own positions), and storing rows into the caches. The
// teacher-forced policy and the caches themselves are attention_policy.cpp; every kernel call goes
// through kernel_calls.hpp.
#include "optimized/attention_policy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#include "attncheck/error.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/gemm.hpp"
#include "optimized/kernel_calls.hpp"

namespace attncheck::optimized {

namespace {

// k, v of one row (hkv heads at columns d and d + hkv dk of qkv_row) into layer l of a
// version 2 cache at position p of sequence b.
void store_kv(const ModelConfig& c, PagedCache& pool, int l, int b, const float* qkv_row, int p) {
    const int d = c.d_model, hkv = c.kv_heads(), dk = c.head_dim();
    float* kl = pool.k.data() + std::size_t(l) * pool.layer_stride;
    float* vl = pool.v.data() + std::size_t(l) * pool.layer_stride;
    for (int kh = 0; kh < hkv; ++kh) {
        const std::size_t at = pool.at(c, b, kh, p);
        std::memcpy(kl + at, qkv_row + d + kh * dk, sizeof(float) * std::size_t(dk));
        std::memcpy(vl + at, qkv_row + d + (hkv + kh) * dk, sizeof(float) * std::size_t(dk));
    }
}

// One query row at the end of its window: per query head j, a q_len = 1 call over the n keys
// k0, v0 .. of its kv head (contiguous rows, in position order, the last one the row's own),
// causal with q_offset n-1 so that every one of them is visible. q, out [H, dk]; k0, v0 point at
// kv head 0 with head_stride between kv heads.
void attend_window_row(const PackedWeights& P, const KernelRef& kernel, const float* q, const float* k0,
                       const float* v0, std::size_t head_stride, int n, float* out, const char* where) {
    const ModelConfig& c = P.config;
    const int H = c.n_heads, dk = c.head_dim(), g = c.group_size();
    const attncheck_problem p = make_problem(P, 1, 1, 1, n, n - 1, true, nullptr);
    for (int hh = 0; hh < H; ++hh) {
        const std::size_t kv = std::size_t(hh / g) * head_stride;
        call_kernel(kernel, p, q + std::size_t(hh) * std::size_t(dk), k0 + kv, v0 + kv,
                    out + std::size_t(hh) * std::size_t(dk), where);
    }
}

// The cache row of position p: p itself, or its first copy in the rolling cache.
std::size_t cache_row(const CacheView& cache, int p) { return std::size_t(cache.ring ? p % cache.ring : p); }

// The key [dk] at position p into a head's tiled keys (CacheView::k_tiled): its column c to
// lane p % 64 of row c of tile p / 64.
void store_tiled_key(float* head_tiles, int p, const float* key, int dk) {
    float* kt = head_tiles + std::size_t(attention_detail::tiled_key_offset(p, dk));
    for (int c = 0; c < dk; ++c) kt[std::size_t(c) * attention_detail::kTileKeys] = key[c];
}

// k, v of one row (hkv heads at columns d and d + hkv dk of qkv_row) into layer l's cache at
// position p: one row, or with a rolling cache both copies of its slot.
void store_kv(const CacheView& cache, float* kl, float* vl, const float* qkv_row, int d, int hkv, int dk, int p) {
    const std::size_t r = cache_row(cache, p);
    const std::size_t bytes = sizeof(float) * std::size_t(dk);
    const float* k = qkv_row + d;
    const float* v = qkv_row + d + hkv * dk;
    for (int kh = 0; kh < hkv; ++kh) {
        const std::size_t at = std::size_t(kh) * cache.head_stride + r * std::size_t(dk);
        std::memcpy(kl + at, k + kh * dk, bytes);
        std::memcpy(vl + at, v + kh * dk, bytes);
        if (cache.ring) {
            const std::size_t twin = at + std::size_t(cache.ring) * std::size_t(dk);
            std::memcpy(kl + twin, k + kh * dk, bytes);
            std::memcpy(vl + twin, v + kh * dk, bytes);
        }
    }
}

// One row at position p of a session whose cache layer kl, vl holds every key up to p:
// version 2 self-attention. With a window, the window's keys (contiguous in either cache); without,
// per query head one causal call over the kv head's keys 0 .. p.
void attend_cached_row(const PackedWeights& P, const KernelRef& kernel, const SelfAttentionShape& shape,
                       const CacheView& cache, const float* kl, const float* vl, const float* q, int p, float* out,
                       const char* where) {
    if (shape.window >= 0) {
        const int first = window_first(p, shape.window);
        const std::size_t at = cache_row(cache, first) * std::size_t(P.config.head_dim());
        attend_window_row(P, kernel, q, kl + at, vl + at, cache.head_stride, p - first + 1, out, where);
        return;
    }
    const ModelConfig& c = P.config;
    const int H = c.n_heads, dk = c.head_dim(), g = shape.group;
    const attncheck_problem prob = make_problem(P, 1, 1, 1, p + 1, p, true, nullptr);
    for (int hh = 0; hh < H; ++hh) {
        const std::size_t kv = std::size_t(hh / g) * cache.head_stride;
        call_kernel(kernel, prob, q + std::size_t(hh) * std::size_t(dk), kl + kv, vl + kv,
                    out + std::size_t(hh) * std::size_t(dk), where);
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A chunk of one sequence
// ---------------------------------------------------------------------------------------------

CacheView sequence_cache(const ModelConfig& c, float* k, float* v, int batch, int b, bool k_tiled) {
    const SelfAttentionShape shape = self_attention_shape(c);
    const std::size_t head_stride = std::size_t(cache_rows(c, k_tiled)) * std::size_t(c.head_dim());
    const std::size_t seq = std::size_t(shape.kv_heads) * head_stride;  // hkv * R * dk
    return {.k = k + std::size_t(b) * seq, .v = v + std::size_t(b) * seq,
            .layer_stride = std::size_t(batch) * seq, .head_stride = head_stride,
            .ring = shape.window >= 0 ? shape.window + 1 : 0, .k_tiled = k_tiled};
}

// Version 2 self-attention of a chunk: rows rotated at their positions; with a window each row's
// k, v stored and the row attended before the next row's (the rolling cache has room for one
// window only); without, every row stored, then one call per query head (q_len n).
void ChunkAttention::self_v2(int l, float* qkv, float* att) {
    const ModelConfig& c = P.config;
    const SelfAttentionShape shape = self_attention_shape(c);
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model, hkv = shape.kv_heads;
    const std::size_t ld = std::size_t(P.qkv_width);
    float* kl = cache.k + std::size_t(l) * cache.layer_stride;
    float* vl = cache.v + std::size_t(l) * cache.layer_stride;
    for (int t = 0; t < n; ++t) {
        float* row = qkv + std::size_t(t) * ld;
        const int p = pos + t;
        rotate_qk(P, row, ld, 1, &p);
        store_kv(cache, kl, vl, row, d, hkv, dk, p);
        if (shape.window >= 0)
            attend_cached_row(P, kernel, shape, cache, kl, vl, row, p, att + std::size_t(t) * std::size_t(d),
                              n > 1 ? "self-attention chunk (window)" : "self-attention step (window)");
    }
    if (shape.window >= 0) return;  // att rows written directly: [n, H, dk] = [n, d]
    if (n == 1) {
        attend_cached_row(P, kernel, shape, cache, kl, vl, qkv, pos, att, "self-attention step");
        return;
    }
    for (int t = 0; t < n; ++t)
        for (int hh = 0; hh < H; ++hh)
            std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                        qkv + std::size_t(t) * ld + std::size_t(hh * dk), sizeof(float) * std::size_t(dk));
    const attncheck_problem p = make_problem(P, 1, 1, n, pos + n, pos, true, nullptr);
    for (int hh = 0; hh < H; ++hh) {
        const std::size_t kv = std::size_t(hh / shape.group) * cache.head_stride;
        call_kernel(kernel, p, qh + std::size_t(hh) * std::size_t(n) * std::size_t(dk), kl + kv, vl + kv,
                    oh + std::size_t(hh) * std::size_t(n) * std::size_t(dk), "self-attention chunk");
    }
    gather(att);
}

// Self-attention of a chunk through a version 2 kernel: every row rotated and stored at its
// position in the cache, then one call for all heads and rows.
void ChunkAttention::self_abi_v2(int l, float* qkv, float* att) {
    const ModelConfig& c = P.config;
    const SelfAttentionShape shape = self_attention_shape(c);
    const int H = c.n_heads, dk = c.head_dim(), hkv = shape.kv_heads;
    const std::size_t ld = std::size_t(P.qkv_width);
    for (int t = 0; t < n; ++t) {
        float* row = qkv + std::size_t(t) * ld;
        const int p = pos + t;
        rotate_qk(P, row, ld, 1, &p);
        store_kv(c, *cache.pool, l, cache.seq, row, p);
        if (n > 1)
            for (int hh = 0; hh < H; ++hh)
                std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                            row + std::size_t(hh * dk), sizeof(float) * std::size_t(dk));
    }
    const int32_t q_pos = pos, kv_lens = pos + n;
    attncheck_problem_v2 p = problem_v2(P, 1, H, hkv, n, c.max_len, &q_pos, &kv_lens, true, shape.window);
    set_cache(p, *cache.pool, l, cache.seq, hkv, dk);
    // With one row, q [d] already is [H, 1, dk] and att [d] is out [H, 1, dk].
    p.q = dense_tensor(n > 1 ? qh : qkv, H, n, dk);
    p.out = dense_tensor(n > 1 ? oh : att, H, n, dk);
    call_kernel_v2(kernel, p, n > 1 ? "self-attention chunk" : "self-attention step");
    if (n > 1) gather(att);
}

void ChunkAttention::self(int l, float* qkv, float* att) {
    const ModelConfig& c = P.config;
    if (kernel.fn_v2) return self_abi_v2(l, qkv, att);
    if (!self_attention_shape(c).v1()) return self_v2(l, qkv, att);
    if (c.positional == Positional::rope)
        for (int t = 0; t < n; ++t) {
            const int p = pos + t;
            rotate_qk(P, qkv + std::size_t(t) * std::size_t(P.qkv_width), std::size_t(P.qkv_width), 1, &p);
        }
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
    float* kl = cache.k + std::size_t(l) * cache.layer_stride;
    float* vl = cache.v + std::size_t(l) * cache.layer_stride;
    for (int t = 0; t < n; ++t) {
        const float* row = qkv + std::size_t(t) * 3 * std::size_t(d);
        for (int hh = 0; hh < H; ++hh) {
            const std::size_t at = std::size_t(hh) * cache.head_stride + std::size_t(pos + t) * std::size_t(dk);
            if (cache.k_tiled) {
                store_tiled_key(kl + std::size_t(hh) * cache.head_stride, pos + t, row + d + hh * dk, dk);
            } else {
                std::memcpy(kl + at, row + d + hh * dk, sizeof(float) * std::size_t(dk));
            }
            std::memcpy(vl + at, row + 2 * d + hh * dk, sizeof(float) * std::size_t(dk));
            if (n > 1 && !kernel.builtin)
                std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                            row + hh * dk, sizeof(float) * std::size_t(dk));
        }
    }
    if (kernel.builtin && (n > 1 || cache.k_tiled)) {
        // q read in place from the rows of qkv, out written into those of att; the whole cache
        // layer as k and v, as below (with tiled keys, a step too).
        const std::int64_t N = std::int64_t(cache.head_stride) / dk, hs = std::int64_t(cache.head_stride);
        const attncheck_problem p = make_problem(P, 1, H, n, int(N), pos, true, nullptr);
        const attention_detail::Strides st{.q = {0, dk, 3 * std::int64_t(d)},
                                           .k = {0, hs, dk},
                                           .v = {0, hs, dk},
                                           .out = {0, dk, d},
                                           .k_tiled = cache.k_tiled};
        call_builtin(p, st, qkv, kl, vl, att, n > 1 ? "self-attention chunk" : "self-attention step");
        return;
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
    if (kernel.fn_v2) {
        const int32_t q_pos = 0;
        attncheck_problem_v2 p =
            memory_problem_v2(P, 1, n, &q_pos, mem.k + std::size_t(l) * mem.layer_stride,
                              mem.v + std::size_t(l) * mem.layer_stride, mem.S, mem.valid);
        p.q = dense_tensor(n > 1 ? qh : q, H, n, dk);
        p.out = dense_tensor(n > 1 ? oh : att, H, n, dk);
        call_kernel_v2(kernel, p, "cross-attention");
    } else {
        const attncheck_problem p = make_problem(P, 1, H, n, mem.S, 0, false, mem.valid);
        call_kernel(kernel, p, n > 1 ? qh : q, mem.k + std::size_t(l) * mem.layer_stride,
                    mem.v + std::size_t(l) * mem.layer_stride, n > 1 ? oh : att, "cross-attention");
    }
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

void BatchStepAttention::self(int l, float* qkv, float* att) {
    const ModelConfig& c = P.config;
    const SelfAttentionShape shape = self_attention_shape(c);
    if (shape.rope) rotate_qk(P, qkv, std::size_t(P.qkv_width), B, pos);
    if (kernel.fn_v2) {
        static_assert(std::is_same_v<int, int32_t>);  // pos is the problem's q_pos
        const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
        for (int b = 0; b < B; ++b) {
            const float* row = qkv + std::size_t(b) * std::size_t(P.qkv_width);
            std::memcpy(qh + std::size_t(b) * std::size_t(d), row, sizeof(float) * std::size_t(d));
            store_kv(c, *pool, l, b, row, pos[b]);
        }
        attncheck_problem_v2 p = problem_v2(P, B, H, shape.kv_heads, 1, c.max_len, pos, valid, true, shape.window);
        set_cache(p, *pool, l, 0, shape.kv_heads, dk);
        p.q = dense_tensor(qh, H, 1, dk);
        p.out = dense_tensor(att, H, 1, dk);
        call_kernel_v2(kernel, p, "batch self-attention step");
        return;
    }
    if (!shape.v1()) {
        // Each sequence's row as a one-row chunk at its position: its own calls per query head.
        for (int b = 0; b < B; ++b) {
            const CacheView cache = sequence_cache(c, k_cache, v_cache, B, b);
            float* kl = cache.k + std::size_t(l) * cache.layer_stride;
            float* vl = cache.v + std::size_t(l) * cache.layer_stride;
            const float* row = qkv + std::size_t(b) * std::size_t(P.qkv_width);
            store_kv(cache, kl, vl, row, c.d_model, shape.kv_heads, c.head_dim(), pos[b]);
            attend_cached_row(P, kernel, shape, cache, kl, vl, row, pos[b], att + std::size_t(b) * std::size_t(c.d_model),
                              "batch self-attention step");
        }
        return;
    }
    const int H = c.n_heads, dk = c.head_dim(), d = c.d_model, N = cache_rows(c, k_tiled);
    const std::size_t hs = std::size_t(N) * std::size_t(dk), seq = std::size_t(H) * hs;
    float* kl = k_cache + std::size_t(l) * std::size_t(B) * seq;
    float* vl = v_cache + std::size_t(l) * std::size_t(B) * seq;
    for (int b = 0; b < B; ++b) {
        const float* row = qkv + std::size_t(b) * 3 * std::size_t(d);
        std::memcpy(qh + std::size_t(b) * std::size_t(d), row, sizeof(float) * std::size_t(d));
        for (int hh = 0; hh < H; ++hh) {
            const std::size_t head = std::size_t(b) * seq + std::size_t(hh) * hs;
            const std::size_t at = head + std::size_t(pos[b]) * std::size_t(dk);
            if (k_tiled) {
                store_tiled_key(kl + head, pos[b], row + d + hh * dk, dk);
            } else {
                std::memcpy(kl + at, row + d + hh * dk, sizeof(float) * std::size_t(dk));
            }
            std::memcpy(vl + at, row + 2 * d + hh * dk, sizeof(float) * std::size_t(dk));
        }
    }
    const attncheck_problem p = make_problem(P, B, H, 1, N, 0, false, valid);
    if (k_tiled) {
        const std::int64_t sq = std::int64_t(seq), hsi = std::int64_t(hs);
        const attention_detail::Strides st{.q = {H * std::int64_t(dk), dk, dk},
                                           .k = {sq, hsi, 0},
                                           .v = {sq, hsi, dk},
                                           .out = {H * std::int64_t(dk), dk, dk},
                                           .k_tiled = true};
        call_builtin(p, st, qh, kl, vl, att, "batch self-attention step");
        return;
    }
    call_kernel(kernel, p, qh, kl, vl, att, "batch self-attention step");
}

void BatchStepAttention::cross(int l, const float* q, float* att) {
    if (kernel.fn_v2) {
        const int H = P.config.n_heads, dk = P.config.head_dim();
        attncheck_problem_v2 p = memory_problem_v2(P, B, 1, pos, mem.k_at(l, 0), mem.v_at(l, 0), mem.S, mem.valid.data());
        p.q = dense_tensor(q, H, 1, dk);
        p.out = dense_tensor(att, H, 1, dk);
        call_kernel_v2(kernel, p, "batch cross-attention step");
        return;
    }
    const attncheck_problem p = make_problem(P, B, P.config.n_heads, 1, mem.S, 0, false, mem.valid.data());
    call_kernel(kernel, p, q, mem.k_at(l, 0), mem.v_at(l, 0), att, "batch cross-attention step");
}

}  // namespace attncheck::optimized
