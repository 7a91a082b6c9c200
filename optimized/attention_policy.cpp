// optimized/attention_policy.cpp — the decoder's teacher-forced attention policy, the caches and
// the cross-attention memory (attention_policy.hpp); the incremental policies are
// attention_steps.cpp. Every kernel call goes through kernel_calls.hpp.
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

SelfAttentionShape self_attention_shape(const ModelConfig& c) {
    const bool window = c.has_window() && c.attn_window < c.max_len - 1;
    return {.kv_heads = c.kv_heads(), .group = c.group_size(), .window = window ? c.attn_window : -1,
            .rope = c.positional == Positional::rope};
}

int cache_rows(const ModelConfig& c, bool k_tiled) {
    const SelfAttentionShape shape = self_attention_shape(c);
    const int rows = shape.window >= 0 ? 2 * (shape.window + 1) : c.max_len;
    constexpr int kTile = attention_detail::kTileKeys;
    return k_tiled ? (rows + kTile - 1) / kTile * kTile : rows;
}

bool tiled_key_cache(const ModelConfig& c, const KernelRef& kernel) {
    return kernel.builtin && !kernel.fn_v2 && self_attention_shape(c).v1();
}

namespace {

// The rotation of rotate_qk by +a (Sign 1) or by -a (Sign -1, its transpose: rotate_qk_back).
// sin is negated, never multiplied by Sign, so the forward's arithmetic is the plain rotation's.
template <int Sign>
void rotate_rows(const PackedWeights& P, float* qkv, std::size_t ld, int rows, const int* positions) {
    const ModelConfig& c = P.config;
    if (c.positional != Positional::rope) return;
    const int dk = c.head_dim(), half = dk / 2, heads = c.n_heads + c.kv_heads();
    for (int r = 0; r < rows; ++r) {
        float* row = qkv + std::size_t(r) * ld;
        const float* cs = P.rope_cos.data() + std::size_t(positions[r]) * std::size_t(half);
        const float* sn = P.rope_sin.data() + std::size_t(positions[r]) * std::size_t(half);
        for (int head = 0; head < heads; ++head) {
            // q heads 0 .. h-1 at column head*dk; k heads after them at column d + (head-h)*dk
            // = head*dk, since q spans exactly d columns.
            float* x = row + std::size_t(head) * std::size_t(dk);
            for (int i = 0; i < half; ++i) {
                const float xa = x[i], xb = x[i + half], s = Sign > 0 ? sn[i] : -sn[i];
                x[i] = xa * cs[i] - xb * s;
                x[i + half] = xa * s + xb * cs[i];
            }
        }
    }
}

}  // namespace

void rotate_qk(const PackedWeights& P, float* qkv, std::size_t ld, int rows, const int* positions) {
    rotate_rows<1>(P, qkv, ld, rows, positions);
}

void rotate_qk_back(const PackedWeights& P, float* dqkv, std::size_t ld, int rows, const int* positions) {
    rotate_rows<-1>(P, dqkv, ld, rows, positions);
}

KernelRef kernel_of(const Decoder& decoder) {
    const AttentionKernel& k = decoder.attention_kernel();
    return {.fn = k.fn, .reads_only_visible_keys = k.reads_only_visible_keys,
            .zero_empty_rows = decoder.zero_empty_rows(), .fn_v2 = k.fn_v2, .block_size = k.block_size,
            .exact_kv_len = decoder.exact_kv_len(),
            .builtin = k.fn == kBuiltinAttentionKernel.fn &&
                       k.reads_only_visible_keys == kBuiltinAttentionKernel.reads_only_visible_keys};
}

// ---------------------------------------------------------------------------------------------
// A version 2 kernel's K/V cache
// ---------------------------------------------------------------------------------------------

void PagedCache::build(const ModelConfig& c, int B, int bs) {
    const int N = c.max_len;
    paged = bs > 0;
    block_size = paged ? bs : N;
    blocks_per_seq = (N + block_size - 1) / block_size;
    num_blocks = B * blocks_per_seq;
    table.resize(std::size_t(num_blocks));
    for (int b = 0; b < B; ++b)
        for (int e = 0; e < blocks_per_seq; ++e)
            table[std::size_t(b * blocks_per_seq + e)] = paged ? num_blocks - 1 - (e * B + b) : b;
    layer_stride = std::size_t(num_blocks) * std::size_t(c.kv_heads()) * std::size_t(block_size) *
                   std::size_t(c.head_dim());
    k.assign(std::size_t(c.n_layers) * layer_stride, 0.0f);  // zero: rows past a position stay finite
    v.assign(k.size(), 0.0f);
}

std::size_t PagedCache::at(const ModelConfig& c, int b, int kh, int p) const {
    const std::size_t block = std::size_t(table[std::size_t(b * blocks_per_seq + p / block_size)]);
    return ((block * std::size_t(c.kv_heads()) + std::size_t(kh)) * std::size_t(block_size) +
            std::size_t(p % block_size)) * std::size_t(c.head_dim());
}

CacheView sequence_cache(PagedCache& pool, int b) { return {.pool = &pool, .seq = b}; }

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
    const ModelConfig& c = P.config;
    const std::size_t abi = tokens.size() * std::size_t(Tmax) * std::size_t(c.d_model);  // B * H * Tmax * dk
    const std::size_t abi_kv = tokens.size() * std::size_t(Tmax) * std::size_t(c.kv_heads() * c.head_dim());
    in_place = kernel.builtin && self_attention_shape(c).v1() && !padded;
    // Zero: padding rows stay zero (finite) in every layer. Unused by an in-place self-attention
    // (but for the cross-attention's q and out).
    if (!in_place || c.cross_attention) {
        qh.assign(abi, 0.0f);
        oh.assign(abi, 0.0f);
    }
    if (!in_place) {
        kh.assign(abi_kv, 0.0f);
        vh.assign(abi_kv, 0.0f);
    }
    if (c.positional == Positional::rope)
        for (std::size_t b = 0; b < tokens.size(); ++b)
            for (int t = 0; t < len[b]; ++t) positions.push_back(t);
}

std::size_t TeacherAttention::at(int b, int hh, int t, int heads) const {
    return ((std::size_t(b) * std::size_t(heads) + std::size_t(hh)) * std::size_t(Tmax) + std::size_t(t)) *
           std::size_t(P.config.head_dim());
}

namespace {

// f(b, t) for every position t < len[b] of every sequence b, in parallel over (sequence,
// position) pairs, not sequences: a single sequence (B = 1, every teacher-forced forward) would
// otherwise run on one thread while the others wait.
template <class F>
void for_each_position(const std::vector<int>& len, int Tmax, F&& f) {
    const std::int64_t pairs = std::int64_t(len.size()) * Tmax;
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < pairs; ++i) {
        const int b = int(i / Tmax), t = int(i % Tmax);
        if (t < len[std::size_t(b)]) f(b, t);
    }
}

}  // namespace

// rows of src [M, ld] (column offset col0, `heads` heads of dk) -> dst [B, heads, Tmax, dk], and back.
void TeacherAttention::scatter(const float* src, std::size_t ld, int col0, int heads, std::vector<float>& dst) const {
    const int dk = P.config.head_dim();
    for_each_position(len, Tmax, [&](int b, int t) {
        for (int hh = 0; hh < heads; ++hh)
            std::memcpy(dst.data() + at(b, hh, t, heads),
                        src + std::size_t(row0[std::size_t(b)] + t) * ld + std::size_t(col0 + hh * dk),
                        sizeof(float) * std::size_t(dk));
    });
}

void TeacherAttention::gather(float* att) const {
    const int H = P.config.n_heads, dk = P.config.head_dim();
    const std::size_t d = std::size_t(P.config.d_model);
    for_each_position(len, Tmax, [&](int b, int t) {
        for (int hh = 0; hh < H; ++hh)
            std::memcpy(att + std::size_t(row0[std::size_t(b)] + t) * d + std::size_t(hh * dk),
                        oh.data() + at(b, hh, t, H), sizeof(float) * std::size_t(dk));
    });
}

void TeacherAttention::self(int, float* qkv, float* att) {
    const ModelConfig& c = P.config;
    const std::size_t ld = std::size_t(P.qkv_width);
    const int d = c.d_model, H = c.n_heads, dk = c.head_dim();
    const SelfAttentionShape shape = self_attention_shape(c);
    const int hkv = shape.kv_heads;
    if (shape.rope) rotate_qk(P, qkv, ld, rows(), positions.data());
    if (in_place) {
        // q, k and v read in place from the rows of qkv, out written into those of att.
        const std::int64_t B = std::int64_t(len.size()), T = Tmax, sld = std::int64_t(ld), sd = d;
        const attncheck_problem p = make_problem(P, int(B), H, Tmax, Tmax, 0, true, nullptr);
        const attention_detail::Strides st{.q = {T * sld, dk, sld},
                                           .k = {T * sld, dk, sld},
                                           .v = {T * sld, dk, sld},
                                           .out = {T * sd, dk, sd}};
        call_builtin(p, st, qkv, qkv + d, qkv + d + hkv * dk, att, "self-attention prefill");
        return;
    }
    scatter(qkv, ld, 0, H, qh);
    scatter(qkv, ld, d, hkv, kh);
    scatter(qkv, ld, d + hkv * dk, hkv, vh);
    if (kernel.fn_v2) {
        zeros.assign(len.size(), 0);
        attncheck_problem_v2 p = problem_v2(P, int(len.size()), H, hkv, Tmax, Tmax, zeros.data(), valid.data(), true,
                                            shape.window);
        p.q = dense_tensor(qh.data(), H, Tmax, dk);
        p.k = dense_tensor(kh.data(), hkv, Tmax, dk);
        p.v = dense_tensor(vh.data(), hkv, Tmax, dk);
        p.out = dense_tensor(oh.data(), H, Tmax, dk);
        call_kernel_v2(kernel, p, "self-attention prefill");
    } else if (shape.v1()) {
        const attncheck_problem p = make_problem(P, int(len.size()), H, Tmax, Tmax, 0, true,
                                                 padded ? valid.data() : nullptr);
        call_kernel(kernel, p, qh.data(), kh.data(), vh.data(), oh.data(), "self-attention prefill");
    } else {
        // One sequence and one query head per call, its k and v those of kv head j / g.
        for (int b = 0; b < int(len.size()); ++b) {
            const int T = len[std::size_t(b)];
            for (int hh = 0; hh < H; ++hh) {
                const int kvh = hh / shape.group;
                if (shape.window < 0) {
                    const attncheck_problem p = make_problem(P, 1, 1, T, T, 0, true, nullptr);
                    call_kernel(kernel, p, qh.data() + at(b, hh, 0, H), kh.data() + at(b, kvh, 0, hkv),
                                vh.data() + at(b, kvh, 0, hkv), oh.data() + at(b, hh, 0, H),
                                "self-attention prefill");
                    continue;
                }
                for (int i = 0; i < T; ++i) {
                    const int first = window_first(i, shape.window), n = i - first + 1;
                    const attncheck_problem p = make_problem(P, 1, 1, 1, n, n - 1, true, nullptr);
                    call_kernel(kernel, p, qh.data() + at(b, hh, i, H), kh.data() + at(b, kvh, first, hkv),
                                vh.data() + at(b, kvh, first, hkv), oh.data() + at(b, hh, i, H),
                                "self-attention prefill (window)");
                }
            }
        }
    }
    gather(att);
}

void TeacherAttention::cross(int l, const float* q, float* att) {
    scatter(q, std::size_t(P.config.d_model), 0, P.config.n_heads, qh);
    if (kernel.fn_v2) {
        const int H = P.config.n_heads, dk = P.config.head_dim();
        zeros.assign(len.size(), 0);
        attncheck_problem_v2 p = memory_problem_v2(P, int(len.size()), Tmax, zeros.data(), mem.k_at(l, 0),
                                                   mem.v_at(l, 0), mem.S, mem.valid.data());
        p.q = dense_tensor(qh.data(), H, Tmax, dk);
        p.out = dense_tensor(oh.data(), H, Tmax, dk);
        call_kernel_v2(kernel, p, "cross-attention prefill");
        gather(att);
        return;
    }
    const attncheck_problem p = make_problem(P, int(len.size()), P.config.n_heads, Tmax, mem.S, 0, false,
                                             mem.valid.data());
    call_kernel(kernel, p, qh.data(), mem.k_at(l, 0), mem.v_at(l, 0), oh.data(), "cross-attention prefill");
    gather(att);
}

}  // namespace attncheck::optimized
