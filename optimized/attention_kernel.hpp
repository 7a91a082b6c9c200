// optimized/attention_kernel.hpp — internals of the fused attention kernel that tests look at.
//
// The kernel itself is attncheck_optimized_kernel (attncheck/kernels.hpp); this header exposes
// its blocking constants (so tests can pick shapes that straddle every tile and chunk edge) and
// its vectorized exp (so its accuracy is tested on its own, not only through attention).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstddef>

namespace attncheck::optimized::attention_detail {

// Keys per tile: the unit of the online softmax (one running-max update per tile) and of the
// masked-tile skip. Tiles start at multiples of kTileKeys in ABSOLUTE key index, never at an
// offset that depends on kv_len, q_len or the thread count, so a row's rounding is fixed.
inline constexpr int kTileKeys = 64;
// Keys per chunk: each chunk produces a partial (max, sum, accumulator) per query row, and the
// partials are merged in chunk order. A decode step hands chunks to different threads; a
// prefill walks them in order on one thread; the arithmetic is the same either way.
inline constexpr int kChunkKeys = 512;
// Query rows per OpenMP task (one packed key tile is reused by all of them).
inline constexpr int kQueryBlock = 64;
// Query rows in the register microkernel (6 rows x 64 keys = 24 zmm accumulators).
inline constexpr int kMicroRows = 6;

// y[i] = exp(x[i]) for x[i] <= 0 (including -inf, which gives exactly 0), with the kernel's
// vectorized exp. Documented accuracy: within 2 ulp (measured: 0.93 ulp max) of exp for
// results >= FLT_MIN (x >= -87.3); below that the result is subnormal or 0 and its absolute
// error is below FLT_MIN * 2^-22. exp(0) is exactly 1, exp(-inf) exactly 0, NaN stays NaN.
void exp_nonpositive(const float* x, float* y, std::size_t n);

}  // namespace attncheck::optimized::attention_detail
