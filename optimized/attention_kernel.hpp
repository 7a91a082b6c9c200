// optimized/attention_kernel.hpp — internals of the fused attention kernel that tests look at.
//
// The kernel itself is attncheck_optimized_kernel (attncheck/kernels.hpp); this header exposes
// its blocking constants (so tests can pick shapes that straddle every tile and chunk edge) and
// its vectorized exp (so its accuracy is tested on its own, not only through attention).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attncheck/kernel_abi.h"

namespace attncheck::optimized::attention_detail {

// Keys per tile: the unit of the online softmax (one running-max update per tile) and of the
// masked-tile skip. Tiles start at multiples of kTileKeys in ABSOLUTE key index, never at an
// offset that depends on kv_len, q_len or the thread count, so a row's rounding is fixed.
inline constexpr int kTileKeys = 64;
// Keys per chunk: each chunk produces a partial (max, sum, accumulator) per query row, and the
// partials are merged in chunk order. A decode step hands chunks to different threads; a
// prefill walks them in order on one thread; the arithmetic is the same either way.
inline constexpr int kChunkKeys = 512;
// Query rows per OpenMP task (one packed key tile is reused by all of them). 32 (half the
// block's query rows and probabilities beside a tile in L1) measured the same on an AMD EPYC
// Zen 3, AVX2: BM_AttentionPrefill 1.00-1.06x (alternating processes, 6 pairs, within noise).
// So did 66 (11 micro-blocks of 6 rows, 22 of 3: no one-row remainder in a block): 0.99-1.08x
// by the median, 18 pairs in two runs, BM_Prefill T=512 0.99x (1 thread) and 1.04x (2).
inline constexpr int kQueryBlock = 64;
// Query rows in the register microkernel (6 rows x 64 keys = 24 zmm accumulators).
inline constexpr int kMicroRows = 6;

// The smallest float whose exp is at least 2^-126 (the smallest normal float). The vectorized
// exp flushes every x below it to +0 on the AVX-512 and AVX2 paths: a subnormal result costs a
// microcode assist per instruction, which made attention with widely spread scores (standard
// deviation ~30) 11-14x slower. NUMERICS' underflow term covers the flush (an absolute error
// under 2^-126 per weight).
inline constexpr float kExpFlushBelow = -87.3365402f;

// y[i] = exp(x[i]) for x[i] <= 0 (including -inf, which gives exactly 0), with the kernel's
// vectorized exp. Documented accuracy: within 2 ulp (measured: 0.93 ulp max) of exp for
// x >= kExpFlushBelow (results >= 2^-126); below it +0 on the vector paths (the scalar path's
// std::exp gives the subnormal). exp(0) is exactly 1, exp(-inf) exactly 0, NaN stays NaN.
void exp_nonpositive(const float* x, float* y, std::size_t n);

// Strides in floats of views of q [B, H, Tq, Dk], k [B, H, Tk, Dk], v [B, H, Tk, Dv] and out
// [B, H, Tq, Dv], per (sequence, head, row); a row's columns are contiguous.
//
// k_tiled: k holds each head's keys already in the kernel's key tiles, as the kernel would pack
// them: head (b, h) at k + b * k[0] + h * k[1] is [ceil(Tk / 64), Dk, 64], key j's column c at
// ((j / 64) * Dk + c) * 64 + j % 64 (k[2] unused). The lanes of keys past kv_len, or that no
// row sees, may hold anything: lanes never mix, and a row's scores of keys it does not see are
// replaced by -inf (a select) before its softmax. The kernel then reads the keys as they are
// instead of transposing each tile it uses, as it must for keys in rows: in a decode step,
// which reads every key once, the transpose took about two thirds of the kernel's time (`base`
// at ctx 1024, perf, AMD EPYC Zen 5 with AVX-512).
struct Strides {
    std::int64_t q[3], k[3], v[3], out[3];
    bool k_tiled = false;
};

// Floats of one head's keys in the tiled layout of Strides::k_tiled, for Tk keys of width Dk.
inline std::int64_t tiled_key_floats(std::int64_t Tk, std::int64_t Dk) {
    return (Tk + kTileKeys - 1) / kTileKeys * kTileKeys * Dk;
}
// Where key j's column 0 goes in a head's tiled keys (its column c is c * 64 floats further).
inline std::int64_t tiled_key_offset(std::int64_t j, std::int64_t Dk) {
    return (j / kTileKeys) * Dk * kTileKeys + j % kTileKeys;
}

// The kernel (attention_v2.cpp's run_v2) on a version 1 problem already checked, posed as the
// version 2 problem it is (attention_kernel_entry.cpp; may throw std::bad_alloc).
int run_v1(const attncheck_problem& p, const Strides& st, const float* q, const float* k, const float* v, float* out);

// attncheck_optimized_kernel on views at any non-negative strides (the version 2 kernel's
// tensors, read and written in place): the same arithmetic, so the same bits as on contiguous
// copies of them. ATTNCHECK_UNSUPPORTED, as from the kernel, for an invalid problem, a negative
// stride, a view whose last element's index would not fit int64, or a failed allocation. The
// views that out's elements take must not overlap q's, k's, v's or one another.
int strided_kernel(const attncheck_problem& p, const Strides& st, const float* q, const float* k, const float* v,
                   float* out);

}  // namespace attncheck::optimized::attention_detail
