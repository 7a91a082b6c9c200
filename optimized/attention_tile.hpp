// optimized/attention_tile.hpp — the arithmetic of the online-softmax attention kernel
// (attention_v2.cpp, behind attncheck_optimized_kernel and attncheck_optimized_kernel_v2) and of
// the backward's score tiles: the register blocking per target, the scores of a micro-block of
// rows against a key tile (S = Q Kt), their online-softmax update, the P V update, the merge of a
// chunk's partial into a row's running state, and the final division.
//
// Per target, like vec16.hpp (included once per target of simd_targets.hpp by a file that includes
// hwy/foreach_target.h).
#include <algorithm>
#include <cstdint>

#include "optimized/attention_kernel.hpp"
#include "optimized/vec16.hpp"

#if defined(ATTNCHECK_OPTIMIZED_ATTENTION_TILE_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNCHECK_OPTIMIZED_ATTENTION_TILE_HPP_
#undef ATTNCHECK_OPTIMIZED_ATTENTION_TILE_HPP_
#else
#define ATTNCHECK_OPTIMIZED_ATTENTION_TILE_HPP_
#endif

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {
// Internal linkage: each kernel's file has its own copy.
namespace {

constexpr int kTileVecs = kTileKeys / kLanes;  // 4
// Register blocking per target. AVX-512 (32 registers of 16 floats): 6-row micro-blocks whose
// 6 x 64 scores stay in 24 registers from their FMA chains to the softmax, and P V over 64 output
// columns at a time. AVX2 (16 registers of 8 floats, a vector of 16 is two): 3-row micro-blocks,
// scores in passes of 32 keys and P V over 32 columns, 12 accumulators each. A step's keys or
// values are pinned to registers (vpin) where they fit beside the accumulators (blocks of 1 or 2
// rows); in a 3-row block g++ keeps three of the four vectors and the FMAs read the fourth
// from L1. 2-row blocks (8 accumulators) reached 0.35-0.49 of the AVX2 peak on a Zen 3 EPYC with
// 77% of the samples in their two FMA loops; 3-row blocks were 1.14x faster at T=2048 on 1
// thread and 1.10x on 2 (alternating processes, 10 and 8 pairs). 6-row blocks with scores in
// passes of 16 keys and P V over 16 columns (12 accumulators, keys or values pinned, all in 15
// registers) were 0.64-0.68x of 3-row blocks (BM_AttentionPrefill, T=512 and 2048, 1 and 2
// threads, alternating processes, 6 pairs); a first try with the same score passes was 30-40%
// slower too. (The scores go through memory in both: 3 x 64 of them need 24 registers.)
// A microbenchmark of one tile's loops in plain AVX2 intrinsics (scores of 64 rows against 64
// keys, then P V over 64 columns, Dk = Dv = 64) puts every blocking at ~0.78 of the FMA peak on
// Zen 3: 6 x 16 ran 0.98-1.05x and 4 rows in passes of 24 keys or columns (3 registers: 12
// accumulators, 3 pinned and a broadcast fill the 16) 0.94-1.00x as fast as 3 x 32. Tried in
// the kernel and dropped: the score and P V loops unrolled 2 or 4 times (1.5-1.6x the time);
// the key tile stored as two [Dk, 32] strips, so that a pass of 32 keys reads whole lines
// (0.98-1.00x the time, in-process alternation: within the noise).
constexpr bool kNarrow = HWY_TARGET == HWY_AVX2;
constexpr int kRows = kNarrow ? 3 : kMicroRows;
// Registers of the target, and per 16-float vector: what decides whether a step's keys or
// values can stay in registers beside R x NV accumulators and a broadcast.
constexpr int kVecRegs = kNarrow ? 16 : 32, kRegsPerVf = kNarrow ? 2 : 1;
// Whether a step's N vectors of keys or values are pinned (vpin): for more than one row, and
// only where they fit beside the R x N accumulators and a broadcast.
template <int R, int N>
inline constexpr bool kPinStep = R > 1 && (R + 1) * N * kRegsPerVf + 1 <= kVecRegs;
// 16-key vectors per score pass and 16-column vectors per P V pass, for R rows. A single row
// (a decode step) takes the whole tile, or 64 columns, in one pass on AVX2 too: its 8
// accumulators fit, and its passes of 4 (one FMA chain per accumulator, one row) left the FMA
// latency exposed, half the units idle: the kernel's decode at kv 256, K and V in L2, read
// 0.35 of the L2's read rate (AMD EPYC Zen 3). Chains and order are the same either way.
template <int R>
inline constexpr int kScoreVecs = kNarrow && R > 1 ? 2 : kTileVecs;
template <int R>
inline constexpr int kDvBlockVecs = kNarrow && R > 1 ? 2 : 4;
static_assert(kTileKeys % kLanes == 0 && kChunkKeys % kTileKeys == 0);

// f.template operator()<R>() for a micro-block of R rows, R in [1, kRows] chosen at run time.
template <class F>
void with_rows(int R, F&& f) {
    static_assert(kRows == 3 || kRows == 6);
    if constexpr (kRows == 3) {
        switch (R) {
            case 1: f.template operator()<1>(); break;
            case 2: f.template operator()<2>(); break;
            default: f.template operator()<3>(); break;
        }
    } else {
        switch (R) {
            case 1: f.template operator()<1>(); break;
            case 2: f.template operator()<2>(); break;
            case 3: f.template operator()<3>(); break;
            case 4: f.template operator()<4>(); break;
            case 5: f.template operator()<5>(); break;
            default: f.template operator()<6>(); break;
        }
    }
}

// The work of one key tile over a block of `rows` query rows, in micro-blocks of up to kRows:
// softmax.template operator()<R>(lr0) for every micro-block (its scores and online softmax),
// then P V in passes over the value columns, pv.template operator()<R>(lr0, dv0, cols) for
// every micro-block in each pass. Micro-blocks for which meets(lr0, R) is false see nothing of
// the tile and are skipped (an exact no-op for them). A pass reads the tile's keys, or one slice
// of its values, once per micro-block, and they stay in the L1 from one micro-block to the
// next; scores and P V in turn per micro-block read 32 KiB of keys and values each time (Dk =
// Dv = 64), more than a 32 KiB L1 holds with the rows beside them. Each element gets the same
// operations in the same order either way.
template <class Meets, class Softmax, class Pv>
void for_micro_blocks(std::int64_t rows, std::int64_t Dv, Meets&& meets, Softmax&& softmax, Pv&& pv) {
    for (std::int64_t lr0 = 0; lr0 < rows; lr0 += kRows) {
        const int R = int(std::min<std::int64_t>(kRows, rows - lr0));
        if (meets(lr0, R)) with_rows(R, [&]<int RR>() { softmax.template operator()<RR>(int(lr0)); });
    }
    // Passes as wide as a block's rows allow: a block of one row (a decode step) in passes of
    // kDvBlockVecs<1>, any other in those of the widest micro-block.
    const std::int64_t pass = (rows == 1 ? kDvBlockVecs<1> : kDvBlockVecs<kRows>) * kLanes;
    for (std::int64_t dv0 = 0; dv0 < Dv; dv0 += pass) {
        const int cols = int(std::min<std::int64_t>(Dv - dv0, pass));
        for (std::int64_t lr0 = 0; lr0 < rows; lr0 += kRows) {
            const int R = int(std::min<std::int64_t>(kRows, rows - lr0));
            if (meets(lr0, R)) with_rows(R, [&]<int RR>() { pv.template operator()<RR>(int(lr0), dv0, cols); });
        }
    }
}

// o[r, :] = o[r, :] * alpha[r] (when scale_o) + sum_{j in [j0, j1)} p[r, j] * v[j, :], for the
// R rows, over NV vectors of output columns starting at column dv0 (the last has `last_n`
// lanes; Tail: fewer than 16). Keys are added in ascending order, one FMA each.
template <int R, int NV, bool Tail>
void pv_block(float* const* o_rows, const float* alpha, bool scale_o, const float* const* p_rows,
              const float* v, std::int64_t Dv, std::int64_t dv0, int last_n, int j0, int j1) {
    vf acc[R][NV];
    for (int r = 0; r < R; ++r)
        for (int u = 0; u < NV; ++u) {
            acc[r][u] = Tail && u == NV - 1 ? vload_n(o_rows[r] + dv0 + u * kLanes, last_n)
                                            : vload(o_rows[r] + dv0 + u * kLanes);
            if (scale_o) acc[r][u] = vmul(acc[r][u], vset1(alpha[r]));
        }
    for (int j = j0; j < j1; ++j) {
        const float* vj = v + std::int64_t(j) * Dv + dv0;
        vf vv[NV];
        for (int u = 0; u < NV; ++u) {
            vv[u] = Tail && u == NV - 1 ? vload_n(vj + u * kLanes, last_n) : vload(vj + u * kLanes);
            if constexpr (kPinStep<R, NV>) vpin(vv[u]);
        }
        for (int r = 0; r < R; ++r) {
            const vf pj = vset1(p_rows[r][j]);
            for (int u = 0; u < NV; ++u) acc[r][u] = vfma(pj, vv[u], acc[r][u]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int u = 0; u < NV; ++u) {
            if (Tail && u == NV - 1)
                vstore_n(o_rows[r] + dv0 + u * kLanes, acc[r][u], last_n);
            else
                vstore(o_rows[r] + dv0 + u * kLanes, acc[r][u]);
        }
}

template <int R>
void pv_dispatch(int nv, float* const* o_rows, const float* alpha, bool scale_o,
                 const float* const* p_rows, const float* v, std::int64_t Dv, std::int64_t dv0,
                 int last_n, int j0, int j1) {
    // A full last vector is loaded and stored whole (a masked load is slower on some CPUs).
    const auto run = [&]<int NV>() {
        if (last_n < kLanes) pv_block<R, NV, true>(o_rows, alpha, scale_o, p_rows, v, Dv, dv0, last_n, j0, j1);
        else pv_block<R, NV, false>(o_rows, alpha, scale_o, p_rows, v, Dv, dv0, last_n, j0, j1);
    };
    if constexpr (kDvBlockVecs<R> == 2) {
        if (nv == 1) run.template operator()<1>();
        else run.template operator()<2>();
    } else {
        switch (nv) {
            case 1: run.template operator()<1>(); break;
            case 2: run.template operator()<2>(); break;
            case 3: run.template operator()<3>(); break;
            default: run.template operator()<4>(); break;
        }
    }
}

// S = Q Kt for R rows (row r at qrow + r * q_rs) and a tile: acc[r][u] holds the scores of keys
// 16u .. 16u+15, each one FMA chain over c = 0 .. Dk-1. The tile's keys go in passes of
// kScoreVecs<R> vectors so that a pass's R x kScoreVecs<R> accumulators and its keys fit the
// registers (one pass on AVX-512 and for one row; two of 32 keys on AVX2); the chains, and so
// the bits, are the same either way. Keys outside [lo, end) are masked by the caller for every
// row: a pass wholly outside is not computed (its scores are left 0, for the caller's mask to
// replace), e.g. the second half of a causal diagonal tile for a micro-block in its first half.
// Always inlined: the caller's accumulators must stay in registers (through a call they go
// through memory).
template <int R>
[[gnu::always_inline]] inline void tile_scores(const float* qrow, std::int64_t q_rs, std::int64_t Dk,
                                               const float* kt, vf (&acc)[R][kTileVecs], int lo = 0,
                                               int end = kTileKeys) {
    constexpr int kPass = kScoreVecs<R>;
    for (int u0 = 0; u0 < kTileVecs; u0 += kPass) {
        vf part[R][kPass];
        for (int r = 0; r < R; ++r)
            for (int u = 0; u < kPass; ++u) part[r][u] = vzero();
        if (u0 * kLanes >= end || (u0 + kPass) * kLanes <= lo) {
            for (int r = 0; r < R; ++r)
                for (int u = 0; u < kPass; ++u) acc[r][u0 + u] = part[r][u];
            continue;
        }
        for (std::int64_t c = 0; c < Dk; ++c) {
            vf kv[kPass];
            for (int u = 0; u < kPass; ++u) {
                kv[u] = vload(kt + c * kTileKeys + (u0 + u) * kLanes);
                if constexpr (kPinStep<R, kPass>) vpin(kv[u]);
            }
            for (int r = 0; r < R; ++r) {
                const vf qb = vset1(qrow[r * q_rs + c]);
                for (int u = 0; u < kPass; ++u) part[r][u] = vfma(qb, kv[u], part[r][u]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int u = 0; u < kPass; ++u) acc[r][u0 + u] = part[r][u];
    }
}

// The online-softmax update of a micro-block of R rows against a tile, from their scores acc
// (scaled, -inf where a row sees no key) and each row's largest score mx[r]: the running max
// m[r] becomes max(m[r], mx[r]), P = exp(S - m) goes to p [R, 64], the per-lane running sums
// lvec [R, 16] become lvec * alpha + P, and alpha[r] = exp(m_old - m_new) is the factor of the
// row's accumulator. Row r's scores outside keys [lo[r], end[r]) are -inf, and its P there is
// never read: a vector of 16 such keys is skipped (its exp would be exactly 0, and adding +0 to
// the running sums changes no bit), and its P left as it was. Always inlined, like
// tile_scores: acc stays in registers.
template <int R>
[[gnu::always_inline]] inline void online_softmax(vf (&acc)[R][kTileVecs], const float* mx, float* m, float* lvec,
                                                  float* p, float* alpha, const int* lo, const int* end) {
    float m_old[R], m_use[R];
    for (int r = 0; r < R; ++r) {
        m_old[r] = m[r];
        const float m_new = std::max(m_old[r], mx[r]);
        m[r] = m_new;
        // A row that has seen no key yet keeps m = -inf; subtracting 0 instead keeps
        // exp(-inf - -inf) = NaN out: its P is exp(-inf) = 0 and alpha irrelevant.
        m_use[r] = m_new == kNegInf ? 0.0f : m_new;
    }
    float d[kLanes] = {}, e[kLanes];
    for (int r = 0; r < R; ++r) d[r] = m_old[r] - m_use[r];  // -inf - finite = -inf: alpha 0
    vstore(e, vexp(vload(d)));
    for (int r = 0; r < R; ++r) alpha[r] = e[r];
    for (int r = 0; r < R; ++r) {
        const vf mu = vset1(m_use[r]);
        vf psum = vzero();
        for (int u = 0; u < kTileVecs; ++u) {
            if (u * kLanes >= end[r] || (u + 1) * kLanes <= lo[r]) continue;
            const vf pr = vexp(vsub(acc[r][u], mu));
            vstore(p + r * kTileKeys + u * kLanes, pr);
            psum = vadd(psum, pr);
        }
        float* lv = lvec + std::size_t(r) * kLanes;
        vstore(lv, vfma(vload(lv), vset1(alpha[r]), psum));
    }
}

// Merges one chunk's partial of a row (m_c, l_c, o_c) into the running (m, l, o). Used by both
// work splits, so the arithmetic (and every bit of the result) is the same in both.
[[gnu::noinline]] void merge_partial(float m_c, float l_c, const float* o_c, float& m, float& l,
                                     float* o, std::int64_t Dv) {
    if (m_c == kNegInf) return;  // the row saw no key of this chunk: nothing to add
    const float m_new = std::max(m, m_c);
    const float a = sexp(m - m_new);    // 0 when m = -inf (first contributing chunk)
    const float b = sexp(m_c - m_new);  // 1 for the chunk that holds the max
    const vf va = vset1(a), vb = vset1(b);
    std::int64_t c = 0;
    for (; c + kLanes <= Dv; c += kLanes)
        vstore(o + c, vfma(vload(o + c), va, vmul(vload(o_c + c), vb)));
    if (c < Dv) {
        const int n = int(Dv - c);
        vstore_n(o + c, vfma(vload_n(o + c, n), va, vmul(vload_n(o_c + c, n), vb)), n);
    }
    float tmp[kLanes];
    vstore(tmp, vfma(vset1(l), va, vmul(vset1(l_c), vb)));
    l = tmp[0];
    m = m_new;
}

// out = o / l, or exactly 0 for a row with no visible key (l = 0).
void finalize_row(const float* o, float l, float* out, std::int64_t Dv) {
    if (!(l > 0.0f)) {
        std::fill(out, out + Dv, 0.0f);
        return;
    }
    const vf vl = vset1(l);
    std::int64_t c = 0;
    for (; c + kLanes <= Dv; c += kLanes) vstore(out + c, vdiv(vload(o + c), vl));
    if (c < Dv) vstore_n(out + c, vdiv(vload_n(o + c, int(Dv - c)), vl), int(Dv - c));
}

}  // namespace
}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNCHECK_OPTIMIZED_ATTENTION_TILE_HPP_
