// attncheck/problem_v2.hpp — reading an attncheck_problem_v2 (attncheck/kernel_abi_v2.h) the
// way the ABI defines it: per-sequence lengths and positions, visibility, element addresses
// through strides, varlen offsets and pages, and the float16 / bfloat16 conversions.
//
// These are the ABI's definitions in code, shared by the float64 reference kernel, the
// suite's own v2 kernels and the case generator. problem_v2_error() is the argument check: a
// malformed problem (a kv_heads that does not divide q_heads, a block-table entry out of
// range, lengths that do not fit) is named, never read.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "attncheck/kernel_abi_v2.h"

namespace attncheck {

// ---- float16 / bfloat16 <-> float32 (round to nearest even; NaN stays NaN) ------------------

inline float bits_to_float(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
inline std::uint32_t float_to_bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bf16_to_float(std::uint16_t h) { return bits_to_float(std::uint32_t(h) << 16); }
inline std::uint16_t float_to_bf16(float f) {
    const std::uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
    return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float f16_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // Inf, NaN
    if (exp == 0) {                                                            // zero, subnormal
        const float mag = std::ldexp(float(man), -24);
        return sign ? -mag : mag;
    }
    return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}
inline std::uint16_t float_to_f16(float f) {
    const std::uint32_t u = float_to_bits(f);
    const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u); // rounds to Inf (>= 65520)
    if (a < 0x38800000u) {                                       // below 2^-14: subnormal or 0
        // The value in units of 2^-24, rounded to nearest even by the float add.
        const float mag = bits_to_float(a) * 16777216.0f;        // exact: a power-of-two scale
        const float r = std::nearbyint(mag);
        return std::uint16_t(sign | std::uint16_t(r));
    }
    const std::uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return std::uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

// Unit roundoff of a dtype (half the spacing at 1): 2^-24, 2^-11, 2^-8.
inline double unit_roundoff(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? 0x1p-11 : dtype == ATTNCHECK_DTYPE_BF16 ? 0x1p-8 : 0x1p-24;
}
inline std::size_t dtype_size(std::int32_t dtype) { return dtype == ATTNCHECK_DTYPE_F32 ? 4 : 2; }
const char* dtype_name(std::int32_t dtype);  // "f32", "f16", "bf16", "dtype?"

// Element `offset` (in elements) of a buffer of `dtype`, as a float.
inline float load_element(std::int32_t dtype, const void* data, std::int64_t offset) {
    switch (dtype) {
    case ATTNCHECK_DTYPE_F16: return f16_to_float(static_cast<const std::uint16_t*>(data)[offset]);
    case ATTNCHECK_DTYPE_BF16: return bf16_to_float(static_cast<const std::uint16_t*>(data)[offset]);
    default: return static_cast<const float*>(data)[offset];
    }
}
// Rounds `x` to `dtype` and stores it.
inline void store_element(std::int32_t dtype, void* data, std::int64_t offset, float x) {
    switch (dtype) {
    case ATTNCHECK_DTYPE_F16: static_cast<std::uint16_t*>(data)[offset] = float_to_f16(x); break;
    case ATTNCHECK_DTYPE_BF16: static_cast<std::uint16_t*>(data)[offset] = float_to_bf16(x); break;
    default: static_cast<float*>(data)[offset] = x;
    }
}
// x rounded to dtype, as a float.
inline float round_to(std::int32_t dtype, float x) {
    switch (dtype) {
    case ATTNCHECK_DTYPE_F16: return f16_to_float(float_to_f16(x));
    case ATTNCHECK_DTYPE_BF16: return bf16_to_float(float_to_bf16(x));
    default: return x;
    }
}

// ---- the per-sequence reading of a problem (valid only for a problem_v2_error()-free one) ---

inline int q_len_of(const attncheck_problem_v2& p, int b) {
    return p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.q_len;
}
inline int kv_len_of(const attncheck_problem_v2& p, int b) {
    if (p.cu_seqlens_k) return p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    return p.kv_lens ? p.kv_lens[b] : p.kv_len;
}
// The row index t of row i of sequence b in q, out and lse (varlen: packed).
inline std::int64_t q_row_of(const attncheck_problem_v2& p, int b, int i) {
    return p.cu_seqlens_q ? std::int64_t(p.cu_seqlens_q[b]) + i : i;
}
inline int kv_head_of(const attncheck_problem_v2& p, int h) { return h / (p.q_heads / p.kv_heads); }

// Whether key j is visible to row i of sequence b (the ABI's rule, window and causality).
inline bool visible_v2(const attncheck_problem_v2& p, int b, int i, int j) {
    if (j < 0 || j >= kv_len_of(p, b)) return false;
    const std::int64_t a = std::int64_t(p.q_pos[b]) + i;
    if (p.causal && j > a) return false;
    if (p.window_left >= 0 && j < a - p.window_left) return false;
    if (!p.causal && p.window_right >= 0 && j > a + p.window_right) return false;
    return true;
}

// The keys [lo, hi] among Tk that the row at absolute position a sees: visible_v2()'s rule as one
// interval (empty when lo > hi), for kernels that skip what no row sees. A row's interval moves
// right by at most one key per row, so the keys of a block of rows are one interval too.
struct KeyInterval {
    std::int64_t lo, hi;
    bool empty() const { return lo > hi; }
};
inline KeyInterval visible_keys_v2(const attncheck_problem_v2& p, std::int64_t Tk, std::int64_t a) {
    KeyInterval r{0, Tk - 1};
    if (p.causal)
        r.hi = r.hi < a ? r.hi : a;
    else if (p.window_right >= 0)
        r.hi = r.hi < a + p.window_right ? r.hi : a + p.window_right;
    if (p.window_left >= 0) r.lo = r.lo > a - p.window_left ? r.lo : a - p.window_left;
    return r;
}

// Offsets (in elements) of element (b, h, row i, column c) of q / out, and of key j of
// kv head hk in k / v (through varlen packing or the block table).
inline std::int64_t q_offset_v2(const attncheck_problem_v2& p, const attncheck_tensor_v2& t, int b, int h, int i, int c) {
    const std::int64_t batch = p.cu_seqlens_q ? 0 : std::int64_t(b) * t.stride[0];
    return batch + h * t.stride[1] + q_row_of(p, b, i) * t.stride[2] + c * t.stride[3];
}
inline std::int64_t kv_offset_v2(const attncheck_problem_v2& p, const attncheck_tensor_v2& t, int b, int hk, int j, int c) {
    std::int64_t outer, row;
    if (p.block_table) {
        outer = std::int64_t(p.block_table[std::int64_t(b) * p.block_table_stride + j / p.block_size]) * t.stride[0];
        row = j % p.block_size;
    } else if (p.cu_seqlens_k) {
        outer = 0;
        row = std::int64_t(p.cu_seqlens_k[b]) + j;
    } else {
        outer = std::int64_t(b) * t.stride[0];
        row = j;
    }
    return outer + hk * t.stride[1] + row * t.stride[2] + c * t.stride[3];
}
inline std::int64_t lse_offset_v2(const attncheck_problem_v2& p, int b, int h, int i) {
    const std::int64_t batch = p.cu_seqlens_q ? 0 : std::int64_t(b) * p.lse_stride[0];
    return batch + h * p.lse_stride[1] + q_row_of(p, b, i) * p.lse_stride[2];
}

// Why a problem is malformed, naming the field ("" when well formed): version and struct size,
// dtype, sizes >= 1, kv_heads dividing q_heads, lengths and prefix sums that fit, q_pos >= 0,
// windows >= -1, a finite scale, softcap >= 0, a block table whose entries are in
// [0, num_blocks) and that covers every sequence's keys, non-null tensors, strides >= 0.
std::string problem_v2_error(const attncheck_problem_v2& p);

// The k / v rows of sequence b that a backward call writes dk / dv for: every row of a dense
// tensor (kv_len, padding past kv_lens[b] included), the sequence's packed rows of a varlen one.
inline int kv_rows_of(const attncheck_problem_v2& p, int b) { return p.cu_seqlens_k ? kv_len_of(p, b) : p.kv_len; }

// Why a backward call (kernel_abi_v2.h, attncheck_grads_v2) is malformed ("" when well formed):
// problem_v2_error(p), then lse null, a block table, g's struct_size, a null gradient tensor or
// a negative stride.
std::string grads_v2_error(const attncheck_problem_v2& p, const attncheck_grads_v2& g);

// One line: "dtype=bf16 B=2 Hq=8 Hk=2 Tq=5 Tk=97 Dk=64 Dv=64 causal window=16 softcap=30 ...".
std::string describe_v2(const attncheck_problem_v2& p);

}  // namespace attncheck
