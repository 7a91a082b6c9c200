// optimized/attention_kernel.cpp — the design of the built-in fast attention kernel, and its
// vectorized exp (exp_nonpositive). The kernel is one driver (attention_v2.cpp) behind both entry
// points: attncheck_optimized_kernel_v2 and, posing its problem as version 2,
// attncheck_optimized_kernel (attention_kernel_entry.cpp); its arithmetic is attention_tile.hpp's.
//
// Fused masked attention with an online softmax (FlashAttention's recurrence, on a CPU):
//
//   for each query block (kQueryBlock rows) of one (sequence, kv head):
//     for each chunk of kChunkKeys keys, tile by tile (kTileKeys keys):
//       pack the key tile transposed            Kt [Dk, 64]          (reused by every row)
//       for each micro-block of 6 rows (3 on AVX2):
//         S = scale * Q Kt                      [6, 64] in 24 zmm registers
//         masked entries -> -inf; per row: m' = max(m, max S), alpha = exp(m - m'),
//         P = exp(S - m'), l = l * alpha + sum P
//       for each slice of the value columns, for each micro-block: O = O * alpha + P V
//     merge the chunk's partial (m, l, O) into the running one, in chunk order
//   out = O / l   (0 for a row that sees no key)
//
// No Tq x Tk matrix exists: P lives for one query block and tile (64 x 64 floats).
//
// GQA without replication: a kv head's tiles serve the G query heads of its group. Skipping: a
// row's visible keys are one interval [lo, hi] (window and causality), nondecreasing in the
// row, so a block's keys are the union of its rows' intervals, one interval too; tiles outside
// it (past the diagonal, before the window, in the padding) are never read, micro-blocks that
// see nothing of a tile are skipped, and in a partly visible tile a row's scores outside its
// interval are replaced (a blend, not arithmetic) by -inf and its P V runs over its own keys
// only: keys only it sees alone, the keys every row of the micro-block sees together, in
// ascending order either way, so a key a row does not see is never multiplied into its output
// (not even as 0 * v: an inf or NaN in a value it does not see cannot reach it) and a row's bits
// do not depend on its neighbours. A score pass or a vector of exps that no row of a micro-block
// needs is skipped (tile_scores, online_softmax): no bit changes, and a causal prefill of
// `base`'s shape (T = 512) ran 1.02-1.06x as fast (AMD EPYC Zen 3, alternating processes).
//
// Determinism and exact causality. The arithmetic that produces row i is a fixed function of
// (q[i], keys and values 0 .. last visible, scale): tiles and chunks start at multiples of
// their size in absolute key index; each score is one FMA chain over c = 0 .. Dk-1; each lane
// of a vector always holds the same key residue (j mod 16); P V adds keys in ascending order;
// partials merge in chunk order; a tile or chunk where the row sees nothing is an exact no-op
// (alpha = exp(0) = 1, P = 0; such a chunk is skipped in the merge). So the result is bitwise
// the same for any thread count, whether a decode step splits its chunks across threads or
// not, for any q_len / q_offset split of the same rows (chunked prefill == full prefill ==
// incremental steps), and appending future keys cannot change an earlier row.
//
// Work split (OpenMP, dynamic schedule): tasks are the query blocks of each (sequence, kv head),
// last (heaviest) first. When there are fewer than two blocks per thread (a decode step), tasks
// are (block, chunk) pairs instead, each writing its rows' chunk state to a buffer, and a second
// loop merges each block's chunks in order, with the same arithmetic as a block run on one
// thread. Keys handed over already in tiles (Strides::k_tiled: a Session's cache) are read where
// they are, never packed.
//
// Cost (Zen 5 core, measured by bench/kernel_bench.cpp): causal prefill T=2048, 8 heads,
// Dk=Dv=64 runs at ~65-80% of the measured FMA peak; the rest is the exp (~13 vector ops per 16
// scores), the per-row max/rescale and the half-masked diagonal tiles. A decode step at
// kv_len 4096, K and V from DRAM, reads them at ~0.5 of the rate of reading the same bytes on 1
// thread and ~0.6-0.75 on 2 (BM_AttentionDecode's frac_read, AVX2 and AVX-512). On an AMD EPYC
// Zen 3 core (AVX2) the same prefill runs at ~0.51-0.59 of the FMA peak: the score and P V loops
// take ~74% of the time (perf, 1 thread), and a whole tile's loops alone (scores then P V over
// 64 rows, in a microbenchmark) reach ~0.78 of the peak with 3-, 4- or 6-row blocking alike
// (attention_tile.hpp); the exp takes ~8% (the kernel with P = S - m instead of exp(S - m), wrong
// on purpose, took 0.92x the time) and the scale multiply ~1% (removed: 0.99-1.01x).
//
// Vectorization: 16-float vectors (vec16.hpp). The file is compiled once per target of
// simd_targets.hpp (Highway's foreach_target.h re-includes it) and the kernel dispatches at run
// time: AVX-512 (one register per vector, 6-row micro-blocks), AVX2 (two registers per vector;
// 3-row micro-blocks, as 6 x 64 scores would not fit in 16 registers: see kRows) or scalar. The arithmetic
// of a score, a P V sum, the exp and the sums is the same on the AVX-512 and AVX2 paths, so they
// give the same bits; the scalar path uses std::exp.
//
// Contraction: g++ contracts a * b + c into an FMA by default in C++ (-ffp-contract=fast, even
// with -std=c++20), and whether it does depends on inlining, so the same source line could round
// differently for a 6-row and a 1-row micro-block. Every multiply-add here is therefore written
// as an explicit FMA, and every other product feeds a blend, a max or an exp, never an add, so
// no contraction is left for the compiler to choose (the determinism tests check it).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
// g++ 12's AVX-512 headers initialise "undefined" vectors from themselves (_mm512_undefined_ps),
// which -Wuninitialized reports at every intrinsic that uses one (max, roundscale, scalef,
// reductions). The pragma must precede the first include of <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "optimized/attention_kernel.hpp"

#include <cstddef>

#include "optimized/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimized/attention_kernel.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "optimized/vec16.hpp"

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {

void exp_nonpositive_target(const float* x, float* y, std::size_t n) {
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) vstore(y + i, vexp(vload(x + i)));
    if (i < n) vstore_n(y + i, vexp(vload_n(x + i, int(n - i))), int(n - i));
}

}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attncheck::optimized::attention_detail {

HWY_EXPORT(exp_nonpositive_target);

void exp_nonpositive(const float* x, float* y, std::size_t n) {
    isa_choice();  // ATTNCHECK_ISA is applied before the first dispatch
    HWY_DYNAMIC_DISPATCH(exp_nonpositive_target)(x, y, n);
}

}  // namespace attncheck::optimized::attention_detail
#endif  // HWY_ONCE
