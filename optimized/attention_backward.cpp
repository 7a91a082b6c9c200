// optimized/attention_backward.cpp — the pass of attncheck_optimized_kernel_v2_backward (its
// entry and checks: attention_backward_entry.cpp; the plan of a call, compiled once:
// attention_backward_plan.cpp): FlashAttention-2's backward pass on a CPU, for every problem of
// kernel ABI version 2 but a paged one (the contract is attncheck_grads_v2's comment in
// attncheck/kernel_abi_v2.h).
//
// The arithmetic, per (query block of 64 rows, key block of 64 keys) that some row sees a key
// of, for one query head h (P and dS are never stored beyond the pair):
//
//   S^T = K Q^T  (scale, softcap, ALiBi as the forward; keys a row does not see -> -inf)
//   P^T = exp(S^T - lse)            lse as the forward wrote it, per row
//   dP^T = V dO^T,   dS^T = P^T (dP^T - D)  [* (1 - tanh(s0 / cap)^2)],  D_i = dO_i . out_i
//   dV += P^T dO,   dK += dS^T Q,   dQ^T += K^T dS^T
//   dq = scale dQ, dk = scale dK, dv = dV   (rounded to the dtype once, when written)
//
// Everything is computed key-major (rows = keys of the block, 64 query rows across the vector
// lanes), so that the five products are two kinds of loops the forward already has
// (attention_tile.hpp): the score kernel tile_scores (S^T and dP^T: a micro-block of R keys
// against a [D, 64] transposed query block) and the P V kernel pv_block (dV and dK: R keys'
// rows of P^T / dS^T times the query block's rows; dQ^T: R of the Dk columns' rows of K^T times
// dS^T). No intermediate is transposed. All inputs are converted to float32 and packed once per
// call, in parallel, per query block (Q, Q^T, dO, dO^T, lse, D) and key block (K, K^T, V).
//
// Work split (OpenMP, dynamic schedule, no atomics):
//   two_phase  dk and dv per (sequence, kv head, key block): the rows of all G query heads of
//              the group that see its keys, query block by query block; then dq per (sequence,
//              query head, query block), recomputing P and dS over the key blocks its rows see.
//              Seven products where five are needed, but tasks for any number of threads.
//   fused      one task per (sequence, kv head): key block by key block, dk and dv as above,
//              and each pair's dS also added into dQ^T of its (head, query block), kept in the
//              task's scratch until the end. Five products, but only B * Hk tasks.
// Both run the same function on each (query block, key block, head) pair, and every element of
// dq, dk and dv is a sum in the same order in both (dk, dv: query block by query block, head by
// head, row by row; dq: key block by key block, key by key), so they give the same bits, and the
// choice (fused on one thread, or when the B * Hk tasks balance over the threads; else
// two_phase) changes no bit. The result is the same for any thread count and schedule.
//
// Cost: one exp and 5 products of 2*D flops per visible (row, key) pair and head (fused); one
// more exp and 2 more products (two_phase). BM_AttentionV2BackwardF32 (f32 MHA causal prefill,
// T = 2048, 8 heads, D = 64, bench/kernel_v2_bench.cpp), AMD EPYC Zen 4 VM with 2 vCPUs, fused:
// 0.72 of the same-run FMA peak on 1 thread on AVX-512, 0.70 on AVX2; 0.79 and 0.71 on 2
// threads; 2.2-2.5x the forward's time on the same problem (2.5x its flops). two_phase forced on
// the same problem: 0.45-0.47 on 1 thread, as its 5/7 useful work predicts.
//
// Skipping: a row's keys are one interval, nondecreasing in the row, so the keys of a query
// block and the rows of a key block are intervals too; pairs outside them are never computed,
// micro-blocks of keys that no row of the pair sees are skipped, and 16-row vectors that none
// of a micro-block's keys sees are neither scored nor exponentiated. Masked entries of P and dS
// are exactly +0 (a select to -inf before the exp, then dS = fma(P, dP - D, +0)); inside a pair
// they are still multiplied into the sums, fma(+0, x, acc), which leaves acc as it was (up to
// the sign of a zero): x is then a row or key that another row or key of the pair sees, so
// finite. A key or row a gradient element does not depend on therefore changes none of its bits
// (the suite's gradient causality property), with no per-row split of the products.
//
// What is read: the q, dout and out rows of rows that see a key, their lse (never the -inf of
// a row that sees none), and the k and v rows of keys some row sees: never padding, gaps or
// keys outside every window. Keys no row sees, padding rows and rows with no visible key get
// exactly +0, written, not computed.
//
// Vectorization: compiled once per target of simd_targets.hpp (Highway's foreach_target.h
// re-includes this file) and dispatched at run time, like the forward. The AVX-512 and AVX2 paths
// give the same bits (the same FMA chains, the same exp); the scalar path differs in its exp.
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys
// of a sequence, Dk = head_dim, Dv = value_dim.
// g++ 12's AVX-512 headers: see attention_kernel.cpp (the pragma precedes <immintrin.h>).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// attention_tile.hpp's online-softmax pieces (merge_partial, finalize_row) are the forward's
// alone: this file takes its score and P V kernels.
#pragma GCC diagnostic ignored "-Wunused-function"
#include "optimized/attention_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem_v2.hpp"
#include "optimized/aligned.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/parallel_tasks.hpp"
#include "optimized/attention_v2.hpp"
#include "optimized/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimized/attention_backward.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "optimized/attention_tile.hpp"
#include "optimized/element_rows.hpp"
#include "optimized/key_tile.hpp"
#include "optimized/vec16.hpp"

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {
namespace {

namespace bd = attncheck::optimized::backward_detail;
using bd::Interval;
using bd::kBlock;
using bd::Layout;
using bd::Plan;
using bd::Seq;
static_assert(bd::kBlock == kTileKeys, "tile_scores computes 64 columns");

// D = dout . out over n floats: one FMA chain in column order, the chain of a dP^T entry
// (tile_scores): where out equals a value row (a row that sees one key), D equals that key's dP
// bit for bit and dS is exactly 0, as in exact arithmetic. Once per row: its latency is nothing
// beside the row's products.
float dot_chain(const float* dout, const float* out, std::int64_t n) {
    float acc = 0.0f;
    for (std::int64_t c = 0; c < n; ++c) acc = std::fma(dout[c], out[c], acc);
    return acc;
}

// Per-thread scratch, grown on demand and kept between calls.
struct Scratch {
    AlignedVector<float> pt, dst;  // [64 keys, 64 rows]  P^T and dS^T of the pair at hand
    AlignedVector<float> dk, dv;   // [64, Dk], [64, Dv]  a key block's dK and dV
    AlignedVector<float> dqt;      // [Dk, 64] a query block's dQ^T; fused: [G, nqb, Dk, 64]
    AlignedVector<float> row, row2;  // [max(Dk, Dv)]    one row in float32
    void reserve(std::int64_t Dk, std::int64_t Dv, std::int64_t dqt_floats) {
        const auto grow = [](auto& x, std::int64_t size) {
            if (x.size() < std::size_t(size)) x.resize(std::size_t(size));
        };
        grow(pt, kBlock * kBlock);
        grow(dst, kBlock * kBlock);
        grow(dk, kBlock * Dk);
        grow(dv, kBlock * Dv);
        grow(dqt, std::max(dqt_floats, Dk * kBlock));
        grow(row, std::max(Dk, Dv));
        grow(row2, std::max(Dk, Dv));
    }
};
thread_local Scratch t_scratch;
// The packed blocks of the call (grown, kept between calls): query blocks at
// ((qfirst + qb) * Hq + h) * qchunk, key blocks at ((kfirst + kb) * Hk + hk) * kchunk.
thread_local AlignedVector<float> t_qpack, t_kpack;

// The row index of each lane of a query block, for ALiBi's distances.
struct RowIndex {
    alignas(64) float i[kBlock];
    constexpr RowIndex() : i() {
        for (int r = 0; r < kBlock; ++r) i[r] = float(r);
    }
};
constexpr RowIndex kRowIndex{};

// What one task reads: the problem, its plan and the packed blocks.
struct Ctx {
    const attncheck_problem_v2& p;
    const attncheck_grads_v2& g;
    const Plan& plan;
    float* qpack;
    float* kpack;
    float* qblock(int b, int h, std::int64_t qb) const {
        const Seq& s = plan.seq[std::size_t(b)];
        return qpack + ((s.qfirst + qb) * p.q_heads + h) * plan.lay.qchunk();
    }
    float* kblock(int b, int hk, std::int64_t kb) const {
        const Seq& s = plan.seq[std::size_t(b)];
        return kpack + ((s.kfirst + kb) * p.kv_heads + hk) * plan.lay.kchunk();
    }
};

// One (query block qb of head h, key block kb) of sequence b.
struct Pair {
    int b, h;
    std::int64_t qb, kb;
    const float* qc;  // the packed query block
    const float* kc;  // the packed key block
};

// Rows [lo, end) of query block qb (local indices) that see key j; lo = 64, end = 0 when none.
inline void local_rows(const attncheck_problem_v2& p, const Seq& s, std::int64_t qb, std::int64_t j, int& lo,
                       int& end) {
    const Interval r = bd::rows_of_key(p, s.Tq, s.Tk, s.pos, j);
    const std::int64_t i0 = qb * kBlock;
    lo = kBlock, end = 0;
    if (r.empty() || r.hi < i0 || r.lo >= i0 + kBlock) return;
    lo = int(std::max<std::int64_t>(r.lo - i0, 0));
    end = int(std::min<std::int64_t>(r.hi - i0 + 1, kBlock));
}

// P^T and dS^T of R keys of the pair (local keys r0 .. r0+R-1), rows [lo[r], end[r]) of each
// (their union [lo_all, end_all), not empty), into s.pt and s.dst: all 64 row lanes of each of
// the R key rows, +0 where the key is not seen. Extras: softcap and ALiBi, in an instantiation
// of their own, so that the common one carries no code for them.
template <int R, bool Extras>
void pair_rows(const Ctx& x, const Pair& pr, int r0, const int* lo, const int* end, int lo_all, int end_all,
               Scratch& s) {
    const attncheck_problem_v2& p = x.p;
    const Layout& L = x.plan.lay;
    const std::int64_t Dk = L.Dk, Dv = L.Dv;
    const float* qt = pr.qc + L.q_t();
    const float* dout_t = pr.qc + L.dout_t();
    const float* lse = pr.qc + L.lse();
    const float* dvec = pr.qc + L.d();
    const float* k = pr.kc + std::int64_t(r0) * Dk;
    const float* v = pr.kc + L.v() + std::int64_t(r0) * Dv;
    const auto outside = [&](int r, int u) { return u * kLanes >= end[r] || (u + 1) * kLanes <= lo[r]; };

    // S^T = K Q^T, scaled (softcap, ALiBi), masked, then P^T = exp(S^T - lse).
    vf acc[R][kTileVecs];
    tile_scores<R>(k, Dk, Dk, qt, acc, lo_all, end_all);
    const vf scale = vset1(p.scale);
    [[maybe_unused]] float fac[Extras ? R : 1][Extras ? kBlock : 1];  // 1 - tanh^2 of softcap
    for (int r = 0; r < R; ++r) {
        for (int u = 0; u < kTileVecs; ++u) acc[r][u] = vmul(acc[r][u], scale);
        if constexpr (Extras) {
            std::fill(fac[r], fac[r] + kBlock, 1.0f);
            if (p.softcap > 0.0f) {
                alignas(64) float t[kBlock];
                for (int u = 0; u < kTileVecs; ++u) vstore(t + u * kLanes, acc[r][u]);
                for (int i = lo[r]; i < end[r]; ++i) {
                    const float th = std::tanh(t[i] / p.softcap);
                    t[i] = p.softcap * th;
                    fac[r][i] = 1.0f - th * th;
                }
                for (int u = 0; u < kTileVecs; ++u) acc[r][u] = vload(t + u * kLanes);
            }
            if (p.alibi_slopes) {  // s -= slope * (a - j), a - j = (pos + qb*64 - j) + i, exact below 2^24
                const Seq& sq = x.plan.seq[std::size_t(pr.b)];
                const vf slope = vset1(p.alibi_slopes[pr.h]);
                const vf d0 = vset1(float(sq.pos + pr.qb * kBlock - (pr.kb * kBlock + r0 + r)));
                for (int u = 0; u < kTileVecs; ++u)
                    acc[r][u] = vsub(acc[r][u], vmul(slope, vadd(d0, vload(kRowIndex.i + u * kLanes))));
            }
        }
        float* ptr = s.pt.data() + std::size_t(r0 + r) * kBlock;
        for (int u = 0; u < kTileVecs; ++u) {
            if (outside(r, u)) {
                vstore(ptr + u * kLanes, vzero());
                continue;
            }
            if (lo[r] > u * kLanes || end[r] < (u + 1) * kLanes)
                acc[r][u] = vmask_before(vmask_after(acc[r][u], end[r] - u * kLanes), lo[r] - u * kLanes);
            vstore(ptr + u * kLanes, vexp(vsub(acc[r][u], vload(lse + u * kLanes))));
        }
    }

    // dP^T = V dO^T, then dS^T = P^T (dP^T - D) [* fac]; fma(., ., +0) turns a -0 into +0.
    vf dp[R][kTileVecs];
    tile_scores<R>(v, Dv, Dv, dout_t, dp, lo_all, end_all);
    const vf zero = vzero();
    for (int r = 0; r < R; ++r) {
        const float* ptr = s.pt.data() + std::size_t(r0 + r) * kBlock;
        float* dsr = s.dst.data() + std::size_t(r0 + r) * kBlock;
        for (int u = 0; u < kTileVecs; ++u) {
            if (outside(r, u)) {
                vstore(dsr + u * kLanes, zero);
                continue;
            }
            const vf diff = vsub(dp[r][u], vload(dvec + u * kLanes));
            if constexpr (Extras)
                vstore(dsr + u * kLanes, vfma(vmul(vload(ptr + u * kLanes), diff), vload(fac[r] + u * kLanes), zero));
            else
                vstore(dsr + u * kLanes, vfma(vload(ptr + u * kLanes), diff, zero));
        }
    }
}

// o_rows[r][c] += sum_{j in [j0, j1)} p_rows[r][j] * v[j * v_rs + c] for the R rows and c < cols,
// in passes as wide as pv_dispatch<R> takes; j ascending, one FMA each.
template <int R>
void accumulate(float* const* o_rows, const float* const* p_rows, const float* v, std::int64_t v_rs,
                std::int64_t cols, int j0, int j1) {
    constexpr std::int64_t pass = kDvBlockVecs<R> * kLanes;
    const float no_alpha[R] = {};  // pv_dispatch's accumulator factors: not applied (scale_o false)
    for (std::int64_t c0 = 0; c0 < cols; c0 += pass) {
        const int n = int(std::min(pass, cols - c0));
        const int nv = (n + kLanes - 1) / kLanes;
        pv_dispatch<R>(nv, o_rows, no_alpha, false, p_rows, v, v_rs, c0, n - (nv - 1) * kLanes, j0, j1);
    }
}

// dV += P^T dO and dK += dS^T Q for the R keys r0 .. of the pair, over rows [lo_all, end_all).
template <int R>
void update_dkdv(const Ctx& x, const Pair& pr, int r0, int lo_all, int end_all, Scratch& s) {
    const Layout& L = x.plan.lay;
    float* dv_rows[R];
    float* dk_rows[R];
    const float* p_rows[R];
    const float* ds_rows[R];
    for (int r = 0; r < R; ++r) {
        dv_rows[r] = s.dv.data() + std::size_t(r0 + r) * std::size_t(L.Dv);
        dk_rows[r] = s.dk.data() + std::size_t(r0 + r) * std::size_t(L.Dk);
        p_rows[r] = s.pt.data() + std::size_t(r0 + r) * kBlock;
        ds_rows[r] = s.dst.data() + std::size_t(r0 + r) * kBlock;
    }
    accumulate<R>(dv_rows, p_rows, pr.qc + L.dout(), L.Dv, L.Dv, lo_all, end_all);
    accumulate<R>(dk_rows, ds_rows, pr.qc, L.Dk, L.Dk, lo_all, end_all);
}

// dQ^T [Dk, 64] += K^T dS^T over the pair's keys [j0, j1) (all 64 row lanes).
void update_dqt(const Ctx& x, const Pair& pr, int j0, int j1, float* dqt, Scratch& s) {
    const std::int64_t Dk = x.plan.lay.Dk;
    const float* kt = pr.kc + x.plan.lay.k_t();
    for (std::int64_t c0 = 0; c0 < Dk; c0 += kRows) {
        with_rows(int(std::min<std::int64_t>(kRows, Dk - c0)), [&]<int R>() {
            float* o_rows[R];
            const float* p_rows[R];
            for (int r = 0; r < R; ++r) {
                o_rows[r] = dqt + (c0 + r) * kBlock;
                p_rows[r] = kt + (c0 + r) * kBlock;
            }
            accumulate<R>(o_rows, p_rows, s.dst.data(), kBlock, kBlock, j0, j1);
        });
    }
}

// One pair: P^T and dS^T of every micro-block of keys some row of the pair sees, then (dkdv)
// dV and dK of those keys, and (dqt not null) dQ^T of the query block. The same function, so
// the same bits, under both work splits.
void run_pair(const Ctx& x, const Pair& pr, bool dkdv, float* dqt, Scratch& s) {
    const attncheck_problem_v2& p = x.p;
    const Seq& sq = x.plan.seq[std::size_t(pr.b)];
    const bool extras = p.softcap > 0.0f || p.alibi_slopes;
    int j0 = kBlock, j1 = 0;  // keys of the block that some row of the pair sees
    for (int r0 = 0; r0 < kBlock; r0 += kRows) {
        const int R = std::min(kRows, kBlock - r0);
        int lo[kRows], end[kRows], lo_all = kBlock, end_all = 0;
        for (int r = 0; r < R; ++r) {
            local_rows(p, sq, pr.qb, pr.kb * kBlock + r0 + r, lo[r], end[r]);
            if (lo[r] < end[r]) {
                lo_all = std::min(lo_all, lo[r]);
                end_all = std::max(end_all, end[r]);
                j0 = std::min(j0, r0 + r);
                j1 = std::max(j1, r0 + r + 1);
            }
        }
        if (lo_all >= end_all) continue;
        with_rows(R, [&]<int RR>() {
            if (extras)
                pair_rows<RR, true>(x, pr, r0, lo, end, lo_all, end_all, s);
            else
                pair_rows<RR, false>(x, pr, r0, lo, end, lo_all, end_all, s);
            if (dkdv) update_dkdv<RR>(x, pr, r0, lo_all, end_all, s);
        });
    }
    if (dqt && j0 < j1) update_dqt(x, pr, j0, j1, dqt, s);
}

// ---- packing ---------------------------------------------------------------------------------

// Query block qb of head h of sequence b, packed into qc: rows that see a key converted (and
// their D and lse), every other row 0 (lse 0, so that no exp ever sees -inf - -inf).
void pack_query_block(const Ctx& x, int b, int h, std::int64_t qb, float* qc, Scratch& s) {
    const attncheck_problem_v2& p = x.p;
    const attncheck_grads_v2& g = x.g;
    const Layout& L = x.plan.lay;
    const Seq& sq = x.plan.seq[std::size_t(b)];
    const std::int64_t Dk = L.Dk, Dv = L.Dv;
    float* q = qc;
    float* dout = qc + L.dout();
    float* lse = qc + L.lse();
    float* d = qc + L.d();
    for (int r = 0; r < kBlock; ++r) {
        const std::int64_t i = qb * kBlock + r;
        if (i < sq.Tq && !bd::keys_of_row(p, sq.Tk, sq.pos + i).empty()) {
            load_row(p.dtype, p.q.data, q_offset_v2(p, p.q, b, h, int(i), 0), p.q.stride[3], Dk, q + r * Dk);
            load_row(p.dtype, g.dout.data, q_offset_v2(p, g.dout, b, h, int(i), 0), g.dout.stride[3], Dv,
                     dout + r * Dv);
            load_row(p.dtype, p.out.data, q_offset_v2(p, p.out, b, h, int(i), 0), p.out.stride[3], Dv, s.row.data());
            d[r] = dot_chain(dout + r * Dv, s.row.data(), Dv);
            lse[r] = p.lse[lse_offset_v2(p, b, h, int(i))];
        } else {
            std::fill_n(q + r * Dk, Dk, 0.0f);
            std::fill_n(dout + r * Dv, Dv, 0.0f);
            d[r] = 0.0f;
            lse[r] = 0.0f;
        }
    }
    pack_key_tile(q, Dk, Dk, 0, kBlock, 0, qc + L.q_t());
    pack_key_tile(dout, Dv, Dv, 0, kBlock, 0, qc + L.dout_t());
}

// Key block kb of kv head hk of sequence b, packed into kc: keys some row sees converted, every
// other key 0.
void pack_key_block(const Ctx& x, int b, int hk, std::int64_t kb, float* kc) {
    const attncheck_problem_v2& p = x.p;
    const Layout& L = x.plan.lay;
    const Seq& sq = x.plan.seq[std::size_t(b)];
    const std::int64_t Dk = L.Dk, Dv = L.Dv;
    float* k = kc;
    float* v = kc + L.v();
    for (int r = 0; r < kBlock; ++r) {
        const std::int64_t j = kb * kBlock + r;
        if (!bd::rows_of_key(p, sq.Tq, sq.Tk, sq.pos, j).empty()) {
            load_row(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, int(j), 0), p.k.stride[3], Dk, k + r * Dk);
            load_row(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, int(j), 0), p.v.stride[3], Dv, v + r * Dv);
        } else {
            std::fill_n(k + r * Dk, Dk, 0.0f);
            std::fill_n(v + r * Dv, Dv, 0.0f);
        }
    }
    pack_key_tile(k, Dk, Dk, 0, kBlock, 0, kc + L.k_t());
}

// ---- writing the gradients -------------------------------------------------------------------

// dq of query block qb of head h from its dQ^T [Dk, 64]: scale dQ for rows that see a key, +0
// for the others.
void write_dq(const Ctx& x, int b, int h, std::int64_t qb, const float* dqt, Scratch& s) {
    const attncheck_problem_v2& p = x.p;
    const attncheck_grads_v2& g = x.g;
    const Seq& sq = x.plan.seq[std::size_t(b)];
    const std::int64_t Dk = x.plan.lay.Dk;
    float* row = s.row.data();
    for (int r = 0; r < kBlock && qb * kBlock + r < sq.Tq; ++r) {
        const std::int64_t i = qb * kBlock + r;
        if (bd::keys_of_row(p, sq.Tk, sq.pos + i).empty())
            std::fill_n(row, Dk, 0.0f);
        else
            for (std::int64_t c = 0; c < Dk; ++c) row[c] = p.scale * dqt[c * kBlock + r];
        store_row(p.dtype, g.dq.data, q_offset_v2(p, g.dq, b, h, int(i), 0), g.dq.stride[3], Dk, row);
    }
}

// dk and dv of the rows of key block kb of kv head hk: scale dK and dV from s for keys some row
// sees (when `computed`), +0 for the others and for padding rows.
void write_dkdv(const Ctx& x, int b, int hk, std::int64_t kb, bool computed, Scratch& s) {
    const attncheck_problem_v2& p = x.p;
    const attncheck_grads_v2& g = x.g;
    const Seq& sq = x.plan.seq[std::size_t(b)];
    const std::int64_t Dk = x.plan.lay.Dk, Dv = x.plan.lay.Dv;
    float* rk = s.row.data();
    float* rv = s.row2.data();
    for (int r = 0; r < kBlock && kb * kBlock + r < sq.kv_rows; ++r) {
        const std::int64_t j = kb * kBlock + r;
        if (computed && !bd::rows_of_key(p, sq.Tq, sq.Tk, sq.pos, j).empty()) {
            const float* dk = s.dk.data() + std::size_t(r) * std::size_t(Dk);
            for (std::int64_t c = 0; c < Dk; ++c) rk[c] = p.scale * dk[c];
            std::copy_n(s.dv.data() + std::size_t(r) * std::size_t(Dv), Dv, rv);
        } else {
            std::fill_n(rk, Dk, 0.0f);
            std::fill_n(rv, Dv, 0.0f);
        }
        store_row(p.dtype, g.dk.data, kv_offset_v2(p, g.dk, b, hk, int(j), 0), g.dk.stride[3], Dk, rk);
        store_row(p.dtype, g.dv.data, kv_offset_v2(p, g.dv, b, hk, int(j), 0), g.dv.stride[3], Dv, rv);
    }
}

// dK and dV of key block kb (kv head hk of sequence b) over the rows of all G heads that see
// its keys, query block by query block, head by head; each pair's dS also into dQ^T of its
// (head, query block) at dqt + (g * nqb + qb) * Dk * 64 when dqt is not null (fused). Returns
// whether any row sees a key of the block (else s.dk and s.dv are not computed).
bool key_block(const Ctx& x, int b, int hk, std::int64_t kb, float* dqt, Scratch& s) {
    const Seq& sq = x.plan.seq[std::size_t(b)];
    const Layout& L = x.plan.lay;
    if (kb >= sq.nkb) return false;  // padding only
    const Interval rows = rows_of_keys(x.p, sq, kb * kBlock, (kb + 1) * kBlock);
    if (rows.empty()) return false;
    std::fill_n(s.dk.begin(), kBlock * L.Dk, 0.0f);
    std::fill_n(s.dv.begin(), kBlock * L.Dv, 0.0f);
    const float* kc = x.kblock(b, hk, kb);
    for (std::int64_t qb = rows.lo / kBlock; qb <= rows.hi / kBlock; ++qb)
        for (int gg = 0; gg < x.plan.G; ++gg) {
            const int h = hk * x.plan.G + gg;
            const Pair pr{b, h, qb, kb, x.qblock(b, h, qb), kc};
            run_pair(x, pr, true, dqt ? dqt + (gg * sq.nqb + qb) * L.Dk * kBlock : nullptr, s);
        }
    return true;
}

// Runs fn(scratch, n) for n < count over the OpenMP threads (parallel_tasks.hpp), each thread's
// scratch sized first; false when an allocation failed.
template <class Fn>
bool parallel_for(const Plan& plan, std::int64_t dqt_floats, std::size_t count, const Fn& fn) {
    return parallel_tasks(
        count, [&] { t_scratch.reserve(plan.lay.Dk, plan.lay.Dv, dqt_floats); }, [&](std::size_t n) { fn(t_scratch, n); });
}

}  // namespace

// The backward pass of this target on a call already checked (may throw std::bad_alloc).
int run_backward_target(const attncheck_problem_v2& p, const attncheck_grads_v2& g, int schedule) {
    const Plan plan = bd::make_plan(p);
    const Layout& L = plan.lay;
    const int Hq = p.q_heads, Hk = p.kv_heads, G = plan.G;
    const std::int64_t Dk = L.Dk;
    t_qpack.resize(std::max<std::size_t>(t_qpack.size(), std::size_t(plan.qblocks * Hq * L.qchunk())));
    t_kpack.resize(std::max<std::size_t>(t_kpack.size(), std::size_t(plan.kblocks * Hk * L.kchunk())));
    float* qpack = t_qpack.data();
    float* kpack = t_kpack.data();
    const Ctx x{p, g, plan, qpack, kpack};

    // Pack every query and key block, in parallel.
    struct Block {
        int b, head;
        std::int64_t blk;
        bool query;
    };
    std::vector<Block> packs;
    for (int b = 0; b < p.batch; ++b) {
        const Seq& s = plan.seq[std::size_t(b)];
        for (std::int64_t qb = 0; qb < s.nqb; ++qb)
            for (int h = 0; h < Hq; ++h) packs.push_back({b, h, qb, true});
        for (std::int64_t kb = 0; kb < s.nkb; ++kb)
            for (int hk = 0; hk < Hk; ++hk) packs.push_back({b, hk, kb, false});
    }
    if (!parallel_for(plan, 0, packs.size(), [&](Scratch& s, std::size_t n) {
            const Block& k = packs[n];
            if (k.query)
                pack_query_block(x, k.b, k.head, k.blk, x.qblock(k.b, k.head, k.blk), s);
            else
                pack_key_block(x, k.b, k.head, k.blk, x.kblock(k.b, k.head, k.blk));
        }))
        return ATTNCHECK_UNSUPPORTED;

    // The split: fused where its dQ^T fits the scratch and its B * Hk tasks balance.
    const bd::Split split = bd::choose_split(p, plan, schedule, omp_in_parallel() ? 1 : omp_get_max_threads());
    if (split.fused) {
        const std::vector<std::size_t>& order = split.order;
        return parallel_for(plan, split.dqt_floats, order.size(),
                            [&](Scratch& s, std::size_t n) {
                                const int b = int(order[n] / std::size_t(Hk)), hk = int(order[n] % std::size_t(Hk));
                                const Seq& sq = plan.seq[std::size_t(b)];
                                float* dqt = s.dqt.data();
                                std::fill_n(dqt, G * sq.nqb * Dk * kBlock, 0.0f);
                                for (std::int64_t kb = 0; kb < sq.nkb_rows; ++kb)
                                    write_dkdv(x, b, hk, kb, key_block(x, b, hk, kb, dqt, s), s);
                                for (int gg = 0; gg < G; ++gg)
                                    for (std::int64_t qb = 0; qb < sq.nqb; ++qb)
                                        write_dq(x, b, hk * G + gg, qb, dqt + (gg * sq.nqb + qb) * Dk * kBlock, s);
                            })
                   ? ATTNCHECK_OK
                   : ATTNCHECK_UNSUPPORTED;
    }

    // Two phases: dk and dv per (sequence, kv head, key block), then dq per (sequence, query
    // head, query block), each list heaviest first.
    std::vector<bd::Task> tasks = bd::dkdv_tasks(p, plan);
    if (!parallel_for(plan, 0, tasks.size(), [&](Scratch& s, std::size_t n) {
            const bd::Task& t = tasks[n];
            write_dkdv(x, t.b, t.head, t.blk, key_block(x, t.b, t.head, t.blk, nullptr, s), s);
        }))
        return ATTNCHECK_UNSUPPORTED;

    tasks = bd::dq_tasks(p, plan);
    return parallel_for(plan, 0, tasks.size(),
                        [&](Scratch& s, std::size_t n) {
                            const bd::Task& t = tasks[n];
                            const Seq& sq = plan.seq[std::size_t(t.b)];
                            float* dqt = s.dqt.data();
                            std::fill_n(dqt, Dk * kBlock, 0.0f);
                            const Interval keys = keys_of_rows(p, sq, t.blk * kBlock, (t.blk + 1) * kBlock);
                            if (!keys.empty()) {
                                const int hk = t.head / G;
                                for (std::int64_t kb = keys.lo / kBlock; kb <= keys.hi / kBlock; ++kb) {
                                    const Pair pr{t.b, t.head, t.blk, kb, x.qblock(t.b, t.head, t.blk),
                                                  x.kblock(t.b, hk, kb)};
                                    run_pair(x, pr, false, dqt, s);
                                }
                            }
                            write_dq(x, t.b, t.head, t.blk, dqt, s);
                        })
               ? ATTNCHECK_OK
               : ATTNCHECK_UNSUPPORTED;
}

}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attncheck::optimized::attention_detail {
HWY_EXPORT(run_backward_target);

int run_backward_dispatched(const attncheck_problem_v2& p, const attncheck_grads_v2& g, int schedule) {
    isa_choice();  // ATTNCHECK_ISA is applied before the first dispatch
    return HWY_DYNAMIC_DISPATCH(run_backward_target)(p, g, schedule);
}
}  // namespace attncheck::optimized::attention_detail
#endif  // HWY_ONCE
