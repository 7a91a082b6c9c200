// optimized/gemm.hpp — the linear layers of the optimized decoder: y = act(x W^T + b) (+ r).
//
// Every projection, the feed-forward and the logits of the decoder go through linear(). The
// weight W [n, k] is packed once, at load time, into panels of kNR = 32 output columns stored
// k-major, so that the inner loop of both products reads one panel row (32 floats, two 512-bit
// vectors) per reduction step:
//
//   panel p = W[p*32 .. p*32+31, :]^T   [k, 32], zero padded past n      packed [P, k, 32]
//
// Two products share that packing:
//   - M > kSmallM rows (prefill, teacher-forced): a BLIS-style GEMM. x is packed once per call
//     (in parallel) into micro-panels [kc, kMR]; a tile's (mc x kc) block of them stays in L2,
//     a weight micro-panel [kc, 32] in L1 while kMR x 32 outputs accumulate in 24 registers.
//     OpenMP over (row block, column block) tiles, dynamically scheduled; a column block is up
//     to 8 panels, fewer when that leaves threads idle (panels_per_tile).
//   - M <= kSmallM rows (a decode step, a small batch): a GEMV limited by memory bandwidth.
//     Each weight is read exactly once, several panels at a time (independent FMA chains), the
//     threads on disjoint panel ranges. How many panels a tile takes depends on the thread
//     count (panels_per_tile): with many threads, fewer panels per tile so that every thread
//     streams a share of the weights.
//
// Determinism: every output element is accumulated by one thread, starting at 0, with one FMA
// per reduction index in the order k = 0, 1, ..., then + bias, activation, + residual. The K
// dimension is never split across threads; K blocking stores the exact float partial sum and
// reloads it. So the result is bitwise the same for any thread count, any tiling, and in both
// products (a row computed in a prefill equals the same row computed in a step).
//
// Dimension legend: M = rows of x, K = reduction (in features), N = out features.
#pragma once

#include <vector>

#include "optimized/aligned.hpp"

namespace attncheck::optimized {

inline constexpr int kNR = 32;     // output columns per packed panel (two 16-float vectors)
inline constexpr int kMR = 12;     // rows of the GEMM micro-kernel (12 x 32 = 24 accumulators)
inline constexpr int kMC = 12 * kMR;  // rows of the GEMM's x block (144; gemm.cpp says why)
inline constexpr int kSmallM = 4;  // up to this many rows the bandwidth-bound GEMV is used

// W [n, k] (and bias [n], possibly absent) in the panel layout above.
struct PackedMatrix {
    int n = 0;  // N: out features (rows of W)
    int k = 0;  // K: in features
    AlignedVector<float> panels;  // [ceil(n/32), k, 32]
    std::vector<float> bias;      // [n], or empty for no bias
    int num_panels() const { return (n + kNR - 1) / kNR; }
};

// Packs W [n, k] row-major (and bias [n], or nullptr).
PackedMatrix pack_weights(const float* w, int n, int k, const float* bias);

// Concatenates several weights with the same k along n (e.g. Wq, Wk, Wv -> Wqkv [3d, d]):
// parts[i] = {w_i [n_i, k], bias_i [n_i] or nullptr}.
struct WeightPart {
    const float* w;
    int n;
    const float* bias;
};
PackedMatrix pack_weights(const std::vector<WeightPart>& parts, int k);

// The same packing of W [n, k] given by its transpose wt [k, n] (row stride ldw >= n):
// W[j, c] = wt[c * ldw + j], no bias, into `into` (its storage reused when large enough: a
// training step packs per step). Panel p is, row c by row c, the 32 contiguous floats
// wt[c, 32p .. 32p + 31]: a copy, OpenMP over panels, where pack_weights scatters. What a
// backward pass needs: dX = dY W is a linear() over W^T, and dW = dY^T X one over X^T; it has
// W and X untransposed.
void pack_weights_transposed(const float* wt, int n, int k, int ldw, PackedMatrix& into);

enum class Activation32 { none, relu, gelu, gelu_tanh };

// y[i, j] = act(sum_k x[i, k] W[j, k] + b[j]) + residual[i, j]   for i < m, j < W.n
//   x [m, ldx] (first W.k columns used), y [m, ldy], residual [m, ldr] or nullptr.
// residual may alias y (an in-place x += F(x)); x must not overlap y. OpenMP inside (runs
// serially when called from a parallel region). Scratch for packing x is per thread and grown
// on first use, so a call with m <= kSmallM allocates nothing. Throws std::bad_alloc, on the
// calling thread, when any thread's scratch cannot be allocated (y is then unspecified).
void linear(const PackedMatrix& W, const float* x, int m, int ldx, float* y, int ldy,
            Activation32 act = Activation32::none, const float* residual = nullptr, int ldr = 0);

// Panels per tile (the GEMV's, the GEMM's column block) for a product of `panels` panels and
// `row_blocks` row blocks (1 for the GEMV) on `threads` threads, at most `max_np`: of max_np,
// max_np/2, ..., 1, going down, a narrower tile is taken when it cuts the busiest thread's
// panels (busiest_thread_panels) by a fifth or more; a wider tile has more FMA chains (GEMV)
// and reuses x more (GEMM). E.g. a GEMV of 16 panels: 8 per tile on 2 threads, 1 on 16. The
// result never changes the bits, only which thread computes which columns.
int panels_per_tile(int panels, int row_blocks, int threads, int max_np);
// The panels (counting one per row block) of the busiest thread when the tiles of np panels,
// column block by column block, go in turn to the least loaded thread (the last column block
// may be narrower).
long busiest_thread_panels(int panels, int row_blocks, int threads, int np);

// The element-wise activation used in linear()'s epilogue (exposed for tests).
float activate32(Activation32 a, float v);

// The plain triple loop with the same accumulation order (fma from 0, k ascending, then bias,
// activation, residual): the specification of linear(), used by the tests.
void linear_naive(const float* w, const float* bias, int n, int k, const float* x, int m, int ldx,
                  float* y, int ldy, Activation32 act = Activation32::none,
                  const float* residual = nullptr, int ldr = 0);

// The pieces of linear() shared by every instruction set's code (gemm_pack.cpp); internal.
namespace gemm_detail {
// The depth of the GEMM's K blocks for a reduction of K, on AVX2's tiles or the others'.
int k_block(int K, bool avx2_tiles);
// Per-thread scratch of at least n floats, `which` 0 a tile's packed x block, 1 a tile's partial
// sums, 2 the shared packed x. Throws std::bad_alloc when it cannot grow.
float* thread_scratch(std::size_t n, int which);
// The micro-panel [kc, kMR] of rows i0 .. i0 + kMR of x (rows past m zero), columns k0 .. k0 + kc.
void pack_micro_panel(const float* x, int m, int ldx, int i0, int k0, int kc, float* dst);
// Micro-panel ip of row block ib, K block at k0 (kc_block deep), of x packed once per call.
void pack_x_unit(const float* x, int m, int ldx, int K, int kc_block, int ib, int k0, int ip, float* apack);
}  // namespace gemm_detail

}  // namespace attncheck::optimized
