// optimized/attention_policy.hpp — how the decoder's rows meet the attention kernel: the three
// policies run_layers() takes (a teacher-forced batch, a chunk of one sequence at a cache
// position, a step of a batch of sequences) and the cross-attention memory they read.
//
// Everything except attention is row-wise, so the policies only differ in how they lay Q, K, V
// out for the kernel ABI ([B, H, T, dk]) and which problem they pass:
//
//   teacher-forced batch  q, k, v scattered to [B, H, Tmax, dk]; one call: causal,
//                         q_offset 0, kv_valid_len = T_b (null for a single sequence). The
//                         built-in kernel (KernelRef::builtin) on sequences of one length: no
//                         copy, the same call on views of the rows of qkv and att.
//   session chunk/step    K/V appended to the cache [H, N, dk], no copy of the cache per step.
//                         A kernel that reads only visible keys (AttentionKernel): one call for
//                         all heads, the cache layer passed as k, v [1, H, N, dk]: q_len n,
//                         kv_len N, q_offset pos, causal (the mask hides positions >= pos+n,
//                         which such a kernel never reads). Any other kernel: one call per head
//                         (batch 1, heads 1), q_len n, kv_len pos+n, q_offset pos, causal, each
//                         head's cache being a contiguous [pos+n, dk] prefix (the exact
//                         incremental problem of KERNEL_ABI.md, with no work on unused rows).
//                         The built-in kernel reads a chunk's (or a step's) q in the rows of
//                         qkv and writes its out into those of att, and a Session keeps its
//                         keys in that kernel's tiles [H, N/64, dk, 64] (tiled_key_cache), so
//                         that no call transposes them again.
//   batch step            caches [B, H, N, dk]; one call for all: q_len 1, kv_len N, no causal
//                         flag, kv_valid_len = pos_b + 1 (the rows past a sequence's position
//                         are padding: zero at start, stale but finite after a truncate/reset).
//                         With the built-in kernel the keys are tiled, as in a session.
//   cross-attention       memory K/V computed once per call or session into [B, H, S, dk];
//                         causal 0, kv_valid_len = the memory's valid_len.
//
// MODEL.md "Version 2 additions" change the self-attention only (SelfAttentionShape):
//   rope                  q and k of every row rotated at the row's absolute position right
//                         after the projection (rotate_qk), before they reach a buffer or cache.
//   grouped-query heads   K/V buffers and caches hold hkv heads; one kernel call per query head
//                         (batch 1, heads 1) whose k, v point at its kv head j / g: never a
//                         replicated copy. Teacher-forced: q_len T_b, kv_len T_b, causal; a
//                         chunk: q_len n, kv_len pos+n, q_offset pos, causal; a batch step:
//                         q_len 1, kv_len pos_b+1, q_offset pos_b.
//   sliding window w      row i sees keys max(0, i-w) .. i, a range whose lower end moves with
//                         the row, which one ABI v1 call of several rows cannot express: every
//                         row is its own call per query head, q_len 1 over exactly its keys
//                         (kv_len = i - first + 1, q_offset = kv_len - 1, causal), in every
//                         policy; the same problem for the same row, so teacher-forced, chunked
//                         and step-by-step logits are the same bits. A session keeps a rolling
//                         cache: w+1 slots per kv head and layer, each key stored in slot p mod
//                         (w+1) and again w+1 rows further, so the last w+1 keys are always
//                         contiguous and in position order (a chunk stores and attends row by
//                         row). A window of N-1 or more hides nothing and runs as none.
//
// A version 2 kernel (AttentionKernel::fn_v2) takes every policy in one call of its own ABI:
//   teacher-forced batch  q [B, H, Tmax, dk], k, v [B, hkv, Tmax, dk], kv_lens = T_b, q_pos 0,
//                         causal, window_left = w: GQA and the window as such, no per-row calls
//   session chunk/step    q [1, H, n, dk], k, v in the PagedCache (blocks [hkv, bs, dk] under
//                         the sequence's block-table row, or its dense [hkv, N, dk]), kv_len N,
//                         kv_lens = pos + n, q_pos = pos, causal, window_left = w; no rolling
//                         cache: every position keeps its keys
//   batch step            q [B, H, 1, dk], the PagedCache of the B sequences (one block table,
//                         or B dense caches), kv_lens = pos_b + 1, q_pos = pos_b, causal, window
//   cross-attention       the memory [B, H, S, dk], kv_lens = its valid_len, not causal
// Keys sit at their absolute positions in every policy, so with the built-in version 2 kernel
// (tiles at absolute key indices) teacher-forced, chunked and step logits are the same bits.
//
// Dimension legend: d = d_model, H = heads, dk = d/H, L = layers, N = max_len, S = memory
// rows, B = sequences, M = rows of a call, T = tokens of a sequence, bs = block_size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/model.hpp"
#include "optimized/decoder.hpp"
#include "optimized/weights.hpp"

namespace attncheck::optimized {

// How the self-attention of a config meets the kernel (MODEL.md "Version 2 additions").
struct SelfAttentionShape {
    int kv_heads;     // hkv
    int group;        // g = h / hkv
    int window;       // w, or -1: none (also when w >= N-1, where it hides nothing)
    bool rope;
    bool v1() const { return group == 1 && window < 0; }  // one call for all heads, as in v1
};
SelfAttentionShape self_attention_shape(const ModelConfig& c);
// The first key a row at position p sees under a window w.
inline int window_first(int p, int w) { return p > w ? p - w : 0; }
// Rows per kv head of a session's cache: N, or 2(w+1) for the rolling cache of a window; with
// tiled keys (tiled_key_cache) N rounded up to whole key tiles of the built-in kernel.
int cache_rows(const ModelConfig& c, bool k_tiled = false);

// Rotary positions (MODEL.md "Version 2 additions") in place on q (h heads at column 0) and k
// (hkv heads at column d) of the rows of qkv [rows, ld], row r at position positions[r], with
// the float cos/sin table of PackedWeights. Nothing for a model without rope.
void rotate_qk(const PackedWeights& P, float* qkv, std::size_t ld, int rows, const int* positions);
// Its transpose: each pair turned by -a, which takes the gradient of a rotated q or k back to
// the gradient of the projection's output (the training step's backward).
void rotate_qk_back(const PackedWeights& P, float* dqkv, std::size_t ld, int rows, const int* positions);

// The kernel of a decoder as its attention calls use it.
struct KernelRef {
    attncheck_kernel_fn fn;
    bool reads_only_visible_keys;  // AttentionKernel::reads_only_visible_keys
    bool zero_empty_rows;          // Decoder::set_zero_empty_rows
    attncheck_kernel_v2_fn fn_v2 = nullptr;  // AttentionKernel::fn_v2: every call through it
    int block_size = 0;                      // AttentionKernel::block_size
    bool exact_kv_len = false;               // Decoder::set_exact_kv_len
    // The kernel is kBuiltinAttentionKernel (the pointer with its declaration): a teacher-forced
    // prefill and a session's chunk hand its arithmetic views of the decoder's own rows
    // (attention_detail::strided_kernel), the same bits without the copies into and out of the
    // [B, H, T, dk] layout of kernel_abi.h.
    bool builtin = false;
};

// The K/V cache of B sequences for a version 2 kernel: K and V [L, num_blocks, hkv, bs, dk],
// sequence b's position p in block table[b * blocks_per_seq + p / bs], row p % bs. Paged
// (KernelRef::block_size > 0): ceil(N / bs) blocks per sequence, handed out in a scrambled
// order (the last block first, the sequences interleaved), so that a kernel that ignored the
// table would read another block's keys. Dense (block_size 0): one block of N rows per
// sequence, in order: the [L, B, hkv, N, dk] cache, passed without a table.
struct PagedCache {
    bool paged = false;
    int block_size = 0;      // bs (N when dense)
    int blocks_per_seq = 0;
    int num_blocks = 0;
    std::vector<float> k, v;
    std::vector<int32_t> table;  // [B, blocks_per_seq]
    std::size_t layer_stride = 0;  // num_blocks * hkv * bs * dk
    void build(const ModelConfig& c, int B, int block_size);
    // The offset in a layer of kv head kh's row for position p of sequence b.
    std::size_t at(const ModelConfig& c, int b, int kh, int p) const;
};
KernelRef kernel_of(const Decoder& decoder);

// One sequence's cross-attention memory: K and V [H, S, dk] of every layer at layer_stride
// (all null and 0 for a model without cross-attention).
struct MemoryView {
    const float* k = nullptr;
    const float* v = nullptr;
    std::size_t layer_stride = 0;
    int S = 0;
    const int32_t* valid = nullptr;  // -> the memory's valid_len
};

// Cross-attention memory of B sequences, all layers: [L, B, H, Smax, dk] for K and V.
struct MemoryCache {
    int S = 0;                     // Smax (0: no cross-attention)
    std::vector<float> k, v;       // [L, B, H, S, dk]
    std::vector<int32_t> valid;    // [B] memory valid_len
    std::size_t seq_stride = 0;    // H * S * dk
    std::size_t layer_stride = 0;  // B * seq_stride
    // Computes K and V of every memory in every layer (nothing without cross-attention).
    void build(const PackedWeights& P, const std::vector<const Memory*>& mems);
    const float* k_at(int l, int b) const { return k.data() + std::size_t(l) * layer_stride + std::size_t(b) * seq_stride; }
    const float* v_at(int l, int b) const { return v.data() + std::size_t(l) * layer_stride + std::size_t(b) * seq_stride; }
    MemoryView sequence(int b) const;
};

// The memories of a call, checked against the model (InputError): none, or one per sequence.
// Empty for a model without cross-attention.
std::vector<const Memory*> checked_memories(const ModelConfig& c, const std::vector<std::optional<Memory>>& memories,
                                            std::size_t batch);

// Teacher-forced batch: B whole sequences, rows of sequence b at row0[b] .. row0[b]+T_b-1.
// q and the output are [B, H, Tmax, dk], k and v [B, hkv, Tmax, dk].
struct TeacherAttention {
    const PackedWeights& P;
    KernelRef kernel;
    const MemoryCache& mem;
    std::vector<int> row0, len;        // [B]
    std::vector<int32_t> valid;        // [B] = len
    int Tmax = 0;
    bool padded = false;               // some sequence shorter than Tmax
    // The self-attention reads q, k, v in the rows of qkv and writes att's (KernelRef::builtin,
    // multi-head, no window, not padded); otherwise through the buffers below.
    bool in_place = false;
    std::vector<float> qh, kh, vh, oh;  // q, o [B, H, Tmax, dk], k, v [B, hkv, Tmax, dk]; the cross-attention reuses qh/oh
    std::vector<int> positions;         // [M] position of each row (rope)
    std::vector<int32_t> zeros;         // [B] q_pos of a version 2 call

    // Lays the sequences out one after the other (rows() rows) and sizes the ABI buffers.
    TeacherAttention(const PackedWeights& P, KernelRef kernel, const MemoryCache& mem,
                     const std::vector<std::vector<int>>& tokens);
    int rows() const { return row0.empty() ? 0 : row0.back() + len.back(); }
    void self(int l, float* qkv, float* att);
    void cross(int l, const float* q, float* att);

private:
    std::size_t at(int b, int hh, int t, int heads) const;
    void scatter(const float* src, std::size_t ld, int col0, int heads, std::vector<float>& dst) const;
    void gather(float* att) const;
};

// One sequence's cache: K and V of every layer, [L, hkv, R, dk] at a layer stride (a BatchSession
// puts B of them side by side, so its layer stride is B * hkv * R * dk); R = cache_rows().
// k_tiled: each head's keys in the built-in kernel's key tiles instead, [R / 64, dk, 64]
// (attention_detail::Strides::k_tiled; R then a multiple of 64): key p's column c at
// tiled_key_offset(p, dk) + 64 c of its head.
struct CacheView {
    float* k = nullptr;
    float* v = nullptr;
    std::size_t layer_stride = 0;
    std::size_t head_stride = 0;  // R * dk
    int ring = 0;                 // w+1 slots of the rolling cache of a window; 0: row p is position p
    // A version 2 kernel's cache (k, v, the strides and ring unused): sequence `seq` of it.
    PagedCache* pool = nullptr;
    int seq = 0;
    bool k_tiled = false;
};
// Sequence b of a version 2 kernel's cache.
CacheView sequence_cache(PagedCache& pool, int b);
// Sequence b of caches k, v [L, batch, hkv, R, dk], R = cache_rows(c, k_tiled).
CacheView sequence_cache(const ModelConfig& c, float* k, float* v, int batch, int b, bool k_tiled = false);
// Whether a Session or a BatchSession keeps its keys tiled (CacheView::k_tiled): with the
// built-in kernel on the self-attention of version 1 (one call for all heads, as
// ChunkAttention::self and BatchStepAttention::self make it), whose every call then reads the
// cache's tiles as they are. A decode step of `base` at ctx 1024 otherwise spent about a fifth
// of its time transposing each key tile it read.
bool tiled_key_cache(const ModelConfig& c, const KernelRef& kernel);

// n rows of one sequence at cache positions pos .. pos+n-1 (a chunk of a prefill, or a step).
struct ChunkAttention {
    const PackedWeights& P;
    KernelRef kernel;
    CacheView cache;
    MemoryView mem;
    int pos = 0;          // cache position of the first row
    int n = 0;            // rows
    float* qh = nullptr;  // [H, n, dk] scratch (n > 1 only)
    float* oh = nullptr;  // [H, n, dk] scratch (n > 1 only)

    void self(int l, float* qkv, float* att);
    void cross(int l, const float* q, float* att);

private:
    void gather(float* att) const;
    void self_v2(int l, float* qkv, float* att);
    void self_abi_v2(int l, float* qkv, float* att);
};

// One row per sequence, each at its own position: caches [L, B, H, N, dk], one kernel call for
// the whole batch with kv_len = N and kv_valid_len = pos_b + 1 (version 2 self-attention: the
// calls of a one-row chunk per sequence, caches [L, B, hkv, R, dk]).
struct BatchStepAttention {
    const PackedWeights& P;
    KernelRef kernel;
    float* k_cache;
    float* v_cache;
    const MemoryCache& mem;
    const int32_t* valid;  // [B] pos_b + 1
    const int* pos;        // [B]
    int B;
    float* qh;  // [B, H, 1, dk] = [B, d]
    PagedCache* pool = nullptr;  // a version 2 kernel's cache (k_cache, v_cache then unused)
    bool k_tiled = false;        // k_cache holds tiles (CacheView::k_tiled): the built-in kernel's call

    void self(int l, float* qkv, float* att);
    void cross(int l, const float* q, float* att);
};

}  // namespace attncheck::optimized
