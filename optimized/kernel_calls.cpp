// optimized/kernel_calls.cpp — the one place the decoder calls an attention kernel, of either ABI
// version (kernel_calls.hpp).
#include "optimized/kernel_calls.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "attncheck/error.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"

namespace attncheck::optimized {

namespace {

std::string describe(const attncheck_problem& p) {
    std::ostringstream s;
    s << "batch=" << p.batch << " heads=" << p.heads << " q_len=" << p.q_len << " kv_len=" << p.kv_len
      << " head_dim=" << p.head_dim << " value_dim=" << p.value_dim << " q_offset=" << p.q_offset
      << " causal=" << p.causal << " kv_valid_len=" << (p.kv_valid_len ? "given" : "null");
    return s.str();
}

}  // namespace

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

// The built-in kernel on views of the decoder's own rows (KernelRef::builtin).
void call_builtin(const attncheck_problem& p, const attention_detail::Strides& st, const float* q, const float* k,
                  const float* v, float* out, const char* where) {
    const int rc = attention_detail::strided_kernel(p, st, q, k, v, out);
    if (rc != 0)
        throw KernelError("the built-in attention kernel returned " + std::to_string(rc) +
                          " (unsupported) for the " + where + " problem: " + describe(p));
}

// ---- version 2 calls (KernelRef::fn_v2) ------------------------------------------------------

// A float32 problem of the model's shape, tensors to be set by the caller.
attncheck_problem_v2 problem_v2(const PackedWeights& P, int batch, int q_heads, int kv_heads, int q_len, int kv_len,
                                const int32_t* q_pos, const int32_t* kv_lens, bool causal, int window) {
    const int d = P.config.head_dim();
    attncheck_problem_v2 p = make_problem_v2({.batch = batch, .q_heads = q_heads, .kv_heads = kv_heads, .head_dim = d,
                                              .value_dim = d, .causal = causal, .window_left = window,
                                              .scale = P.attn_scale});
    p.q_len = q_len;
    p.kv_len = kv_len;
    p.kv_lens = kv_lens;
    p.q_pos = q_pos;
    return p;
}

// A contiguous [*, heads, rows, dk] tensor at data.
attncheck_tensor_v2 dense_tensor(const float* data, int heads, int rows, int dk) {
    const std::int64_t r = rows, d = dk;
    return {const_cast<float*>(data), {heads * r * d, r * d, d, 1}};
}

// Cross-attention of q_len rows of `batch` sequences against the memory K/V [batch, H, S, dk] of
// one layer (valid_len per sequence), not causal; q and out to be set by the caller.
attncheck_problem_v2 memory_problem_v2(const PackedWeights& P, int batch, int q_len, const int32_t* q_pos,
                                       const float* k, const float* v, int S, const int32_t* valid) {
    const int H = P.config.n_heads, dk = P.config.head_dim();
    attncheck_problem_v2 p = problem_v2(P, batch, H, H, q_len, S, q_pos, valid, false, -1);
    p.k = dense_tensor(k, H, S, dk);
    p.v = dense_tensor(v, H, S, dk);
    return p;
}

// Layer l of a version 2 cache as the problem's k and v: paged through its table (sequences
// [b0, b0 + batch) of it), or dense.
void set_cache(attncheck_problem_v2& p, const PagedCache& pool, int l, int b0, int hkv, int dk) {
    const float* k = pool.k.data() + std::size_t(l) * pool.layer_stride;
    const float* v = pool.v.data() + std::size_t(l) * pool.layer_stride;
    p.k = dense_tensor(k, hkv, pool.block_size, dk);
    p.v = dense_tensor(v, hkv, pool.block_size, dk);
    if (pool.paged) {
        p.block_table = pool.table.data() + std::size_t(b0) * std::size_t(pool.blocks_per_seq);
        p.block_table_stride = pool.blocks_per_seq;
        p.block_size = pool.block_size;
        p.num_blocks = pool.num_blocks;
    } else {  // dense: block b is sequence b
        const std::size_t seq = std::size_t(hkv) * std::size_t(pool.block_size) * std::size_t(dk);
        p.k.data = const_cast<float*>(k) + std::size_t(b0) * seq;
        p.v.data = const_cast<float*>(v) + std::size_t(b0) * seq;
    }
}

namespace {

// For a kernel that takes no kv_lens on a dense cache (Decoder::set_exact_kv_len): sequence b
// alone, with kv_len = kv_lens[b] and no kv_lens, its tensors offset to it. A sequence with no
// key is not sent: its rows are the ABI's empty rows, 0.
void call_kernel_v2_per_sequence(const KernelRef& kernel, const attncheck_problem_v2& p, const char* where) {
    const auto at = [](const attncheck_tensor_v2& t, int b) {
        return attncheck_tensor_v2{static_cast<float*>(t.data) + b * t.stride[0],
                                   {t.stride[0], t.stride[1], t.stride[2], t.stride[3]}};
    };
    for (int b = 0; b < p.batch; ++b) {
        attncheck_problem_v2 one = p;
        one.batch = 1;
        one.kv_len = p.kv_lens[b];
        one.kv_lens = nullptr;
        one.q_pos = p.q_pos + b;
        one.q = at(p.q, b), one.k = at(p.k, b), one.v = at(p.v, b), one.out = at(p.out, b);
        if (p.lse) one.lse = p.lse + b * p.lse_stride[0];
        if (one.kv_len == 0) {
            for (int h = 0; h < p.q_heads; ++h)
                for (int t = 0; t < p.q_len; ++t) {
                    float* row = static_cast<float*>(one.out.data) + h * one.out.stride[1] + t * one.out.stride[2];
                    for (int c = 0; c < p.value_dim; ++c) row[c * one.out.stride[3]] = 0.0f;
                }
            continue;
        }
        const int rc = kernel.fn_v2(&one);
        if (rc != 0)
            throw KernelError(std::string("attention kernel (ABI version 2) returned ") + std::to_string(rc) +
                              " (unsupported) for the " + where + " problem (sequence " + std::to_string(b) +
                              " alone, exact kv_len): " + describe_v2(one));
    }
}

}  // namespace

void call_kernel_v2(const KernelRef& kernel, const attncheck_problem_v2& p, const char* where) {
    if (kernel.exact_kv_len && p.kv_lens && !p.block_table) {
        call_kernel_v2_per_sequence(kernel, p, where);
        return;
    }
    const int rc = kernel.fn_v2(&p);
    if (rc != 0)
        throw KernelError(std::string("attention kernel (ABI version 2) returned ") + std::to_string(rc) +
                          " (unsupported) for the " + where + " problem: " + describe_v2(p));
    // As call_kernel: the decoder's problems are dense float32 ones whose rows all see key 0 of
    // their sequence unless it has none (kv_lens[b] = 0, a cross-attention memory of length 0),
    // so such a sequence's rows, of every head, are the empty ones.
    if (!kernel.zero_empty_rows || !p.kv_lens) return;
    float* out = static_cast<float*>(p.out.data);
    for (int b = 0; b < p.batch; ++b) {
        if (p.kv_lens[b] != 0) continue;
        for (int h = 0; h < p.q_heads; ++h)
            for (int t = 0; t < p.q_len; ++t) {
                float* row = out + b * p.out.stride[0] + h * p.out.stride[1] + t * p.out.stride[2];
                for (int c = 0; c < p.value_dim; ++c) row[c * p.out.stride[3]] = 0.0f;
            }
    }
}

}  // namespace attncheck::optimized
