// optimized/attention_v2.cpp — the built-in fused attention kernel, the one driver behind both
// entry points: attncheck_optimized_kernel_v2 (attention_v2_entry.cpp) and
// attncheck_optimized_kernel, whose problem is posed as version 2 (attention_kernel_entry.cpp).
// Its design, exp and arithmetic: attention_kernel.cpp's notes, attention_tile.hpp. Per
// (sequence, kv head, query block):
//
//   pack the query rows of the block for ALL the query heads of the kv head's group
//     (G = Hq / Hk heads x block rows), converted to float32 once     Qf [G*rows, Dk]
//     (float32 rows of one head, G = 1, are read in place)
//   for each chunk of kChunkKeys keys, for each tile of kTileKeys keys that some row sees:
//     its keys transposed and its values, as float32                  Kt [Dk, 64], Vf [64, Dv]
//     (float32 values at one row stride are read in place; keys already in tiles, a
//     Session's cache, too: RunOptions::k_tiled)
//     for each micro-block of kRows packed rows that meets the tile:
//       S = scale * Q Kt in registers; softcap, ALiBi; keys a row does not see -> -inf;
//       m' = max(m, max S), alpha = exp(m - m'), P = exp(S - m'), l = l * alpha + sum P,
//       O = O * alpha + P V over each row's visible keys only
//     merge the chunk's (m, l, O) of each row into the row's total, in chunk order
//   out = O / l, lse = m + log l   (0 and -inf for a row that sees no key)
//
// So a float32 MHA problem gives the same bits in any layout, paged or packed, through either entry.
//
// K/V. A call with several query blocks per (sequence, kv head) (a prefill) first converts and
// packs each tile once, in parallel, into buffers the size of the used K/V in float32; a call
// with one block per (sequence, kv head) (a decode step) converts each tile as it reads it.
// Either way a tile is read through the strides, the varlen packing or the block table, and the
// keys of a sequence that no row of the call sees are never read.
//
// GQA, skipping, work split, determinism, vectorization and contraction: attention_kernel.cpp's notes.
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys
// of a sequence, Dk = head_dim, Dv = value_dim.
// g++ 12's AVX-512 headers: see attention_kernel.cpp (the pragma precedes <immintrin.h>).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "optimized/attention_v2.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <omp.h>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem_v2.hpp"
#include "optimized/aligned.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/parallel_tasks.hpp"
#include "optimized/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimized/attention_v2.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "optimized/attention_tile.hpp"
#include "optimized/element_rows.hpp"
#include "optimized/key_tile.hpp"
#include "optimized/vec16.hpp"

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {
namespace {

// Packed query rows per block: G heads x max(1, kQueryBlock / G) rows.
constexpr int kPackedRows = kQueryBlock;

using KeyRange = KeyInterval;  // the keys [lo, hi] a row sees: visible_keys_v2() (problem_v2.hpp)

// The union of the keys rows [i0, i1) of sequence b see: one interval, since each row's
// interval is nondecreasing in the row (empty when no row sees a key).
KeyRange keys_of_rows(const attncheck_problem_v2& p, int b, std::int64_t i0, std::int64_t i1) {
    const std::int64_t Tk = kv_len_of(p, b), pos = p.q_pos[b];
    KeyRange all{std::numeric_limits<std::int64_t>::max(), -1};
    for (std::int64_t i = i0; i < i1; ++i) {
        const KeyRange k = visible_keys_v2(p, Tk, pos + i);
        if (k.empty()) continue;
        all.lo = std::min(all.lo, k.lo);
        all.hi = std::max(all.hi, k.hi);
    }
    return all;
}

// Query rows [i0, i1) of sequence b for the G query heads of kv head hk: G * (i1 - i0) packed
// rows, packed row r being head hk * G + r / (i1 - i0), row i0 + r % (i1 - i0).
struct Block {
    int b, hk, G;
    std::int64_t i0, i1;
    std::int64_t rows() const { return i1 - i0; }
    std::int64_t packed() const { return G * rows(); }
    int head_of(std::int64_t r) const { return hk * G + int(r / rows()); }
    std::int64_t row_of(std::int64_t r) const { return i0 + r % rows(); }
};

// Per-thread scratch, grown on demand and kept between calls (a decode step allocates nothing
// once the largest shape has been seen). 64-byte aligned, like the packed tiles below, so that
// a key tile's rows (64 floats) and, where Dv is a multiple of 16, a value tile's start on cache
// lines (see attention_kernel.cpp's Scratch).
struct Scratch {
    AlignedVector<float> q;        // [packed, Dk]   packed query rows
    const float* q_rows = nullptr;  // where the block's rows are read: q above, or q's own (f32_rows)
    std::int64_t q_rs = 0;          // at this row stride
    AlignedVector<float> krows;    // [64, Dk]       a tile's keys as float32, before the transpose
    AlignedVector<float> kt;       // [Dk, 64]       the key tile, transposed
    AlignedVector<float> v;        // [64, Dv]       the value tile
    AlignedVector<float> p;        // [packed, 64]   probabilities of the block's rows for one tile
    AlignedVector<float> alpha;    // [packed]       each row's accumulator factor for the tile
    AlignedVector<int> lo, hi;     // [packed]       each row's visible keys of the tile [lo, hi]
    AlignedVector<float> row;      // [Dv]           one output row before its conversion
    std::vector<KeyRange> keys;    // [packed]       visible keys of each packed row
    // The chunk's state, [packed, Dv], [packed, 16], [packed], [packed]; and merged over the
    // chunks so far.
    AlignedVector<float> o, lvec, m, lsum;
    AlignedVector<float> o_tot, m_tot, l_tot;
    void reserve(std::int64_t packed, std::int64_t Dk, std::int64_t Dv) {
        const std::size_t n = std::size_t(packed), dk = std::size_t(Dk), dv = std::size_t(Dv);
        const auto grow = [](auto& x, std::size_t size) {
            if (x.size() < size) x.resize(size);
        };
        grow(q, n * dk);
        grow(krows, kTileKeys * dk);
        grow(kt, dk * kTileKeys);
        grow(v, kTileKeys * dv);
        grow(p, n * kTileKeys);
        grow(alpha, n);
        grow(lo, n);
        grow(hi, n);
        grow(row, dv);
        grow(keys, n);
        grow(o, n * dv);
        grow(o_tot, n * dv);
        grow(lvec, n * kLanes);
        for (auto* x : {&m, &lsum, &m_tot, &l_tot}) grow(*x, n);
    }
};
thread_local Scratch t_scratch;

// Keys and values of (sequence, kv head) pairs, packed up front: tile t of pair n at
// kt + (first_tile[n] + t) * Dk * 64 ([Dk, 64]) and v + (first_tile[n] + t) * 64 * Dv ([64, Dv]).
thread_local AlignedVector<float> t_packed_kt, t_packed_v;

// Whether t's rows of `width` are float32, columns contiguous: used in place (k, v: if not paged).
bool f32_rows(const attncheck_problem_v2& p, const attncheck_tensor_v2& t, std::int64_t width) {
    return p.dtype == ATTNCHECK_DTYPE_F32 && (width == 1 || t.stride[3] == 1);
}

// Where a block finds its (sequence, kv head)'s tiles: keys [tiles, Dk, 64] from tile 0, values
// key j's row at v + j * v_rs (packed up front, or in place); a block converts what is null itself.
struct TileSource {
    const float* kt = nullptr;
    const float* v = nullptr;
    std::int64_t v_rs = 0;
};

// Keys [jlo, jhi] of the tile at t0 (kv head hk of sequence b), as float32, transposed into kt
// [Dk, 64] (the other keys' columns 0: never used); keys to `last` come next. krows: scratch.
void load_keys(const attncheck_problem_v2& p, int b, int hk, std::int64_t t0, std::int64_t jlo, std::int64_t jhi,
               std::int64_t last, float* krows, float* kt) {
    const std::int64_t Dk = p.head_dim;
    if (f32_rows(p, p.k, Dk) && !p.block_table && jlo == t0) {  // from the tile's first key: transposed in place
        const float* rows = static_cast<const float*>(p.k.data) + kv_offset_v2(p, p.k, b, hk, int(t0), 0);
        const int ahead = int(std::clamp<std::int64_t>(last - jhi, 0, kTileKeys));  // prefetched (key_tile.hpp)
        pack_key_tile(rows, p.k.stride[2], Dk, 0, int(jhi - t0 + 1), ahead, kt);
        return;
    }
    std::fill(krows, krows + (jlo - t0) * Dk, 0.0f);
    for (std::int64_t j = jlo; j <= jhi; ++j)
        load_row(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, int(j), 0), p.k.stride[3], Dk, krows + (j - t0) * Dk);
    pack_key_tile(krows, Dk, Dk, 0, int(jhi - t0 + 1), 0, kt);  // krows is scratch in the L1: nothing to prefetch
}

// Values [jlo, jhi] of the tile at t0 as float32 into vt's rows jlo - t0 .. jhi - t0 ([64, Dv]).
void load_values(const attncheck_problem_v2& p, int b, int hk, std::int64_t t0, std::int64_t jlo, std::int64_t jhi,
                 float* vt) {
    const std::int64_t Dv = p.value_dim;
    for (std::int64_t j = jlo; j <= jhi; ++j)
        load_row(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, int(j), 0), p.v.stride[3], Dv, vt + (j - t0) * Dv);
}

// The values of (sequence b, kv head hk) in place (f32_rows, not paged); else {}.
TileSource values_in_place(const attncheck_problem_v2& p, int b, int hk) {
    if (!f32_rows(p, p.v, p.value_dim) || p.block_table) return {};
    return {.v = static_cast<const float*>(p.v.data) + kv_offset_v2(p, p.v, b, hk, 0, 0), .v_rs = p.v.stride[2]};
}

// The key index of each lane of a tile, for ALiBi's distances.
struct KeyIndex {
    alignas(64) float j[kTileKeys];
    constexpr KeyIndex() : j() {
        for (int i = 0; i < kTileKeys; ++i) j[i] = float(i);
    }
};
constexpr KeyIndex kKeyIndex{};

// pv_dispatch for n <= R rows chosen at run time.
template <int R>
void pv_rows(int n, int nv, float* const* o_rows, const float* alpha, bool scale_o, const float* const* p_rows,
             const float* v, std::int64_t Dv, std::int64_t dv0, int last_n, int j0, int j1) {
    if (n == R)
        pv_dispatch<R>(nv, o_rows, alpha, scale_o, p_rows, v, Dv, dv0, last_n, j0, j1);
    else if constexpr (R > 1)
        pv_rows<R - 1>(n, nv, o_rows, alpha, scale_o, p_rows, v, Dv, dv0, last_n, j0, j1);
}

// Scores of R packed rows lr0 .. lr0+R-1 of blk against the tile at t0 (kt) and their online
// softmax update, into the chunk state of s, the probabilities into s.p (row lr at s.p + lr * 64),
// the accumulator factors into s.alpha and each row's visible keys into s.lo, s.hi, for tile_pv.
// The attention_kernel.cpp tile_softmax, with each row's visible keys an interval of the tile,
// and (Extras) softcap and ALiBi in an instantiation of their own, so that the common one
// carries no code for them.
template <int R, bool Extras>
void tile_softmax(const attncheck_problem_v2& p, const Block& blk, int lr0, std::int64_t t0, const float* kt,
                  Scratch& s) {
    const std::int64_t Dk = p.head_dim, pos = p.q_pos[blk.b];
    int* lo = s.lo.data() + lr0;  // the tile-local keys [lo, hi] each row sees (none when lo > hi)
    int* hi = s.hi.data() + lr0;
    int end[R], lo_all = kTileKeys, end_all = 0;  // end = hi + 1; the micro-block's [lo_all, end_all)
    for (int r = 0; r < R; ++r) {
        const KeyRange k = s.keys[std::size_t(lr0 + r)];
        lo[r] = int(std::clamp<std::int64_t>(k.lo - t0, 0, kTileKeys));
        hi[r] = int(std::clamp<std::int64_t>(k.hi - t0, -1, kTileKeys - 1));
        end[r] = hi[r] + 1;
        if (lo[r] < end[r]) {
            lo_all = std::min(lo_all, lo[r]);
            end_all = std::max(end_all, end[r]);
        }
    }
    vf acc[R][kTileVecs];
    tile_scores<R>(s.q_rows + lr0 * s.q_rs, s.q_rs, Dk, kt, acc, lo_all, end_all);

    float mx[R];
    const vf scale = vset1(p.scale);
    for (int r = 0; r < R; ++r) {
        const int lr = lr0 + r;
        for (int u = 0; u < kTileVecs; ++u) acc[r][u] = vmul(acc[r][u], scale);
        if (Extras && p.softcap > 0.0f) {
            float t[kTileKeys];
            for (int u = 0; u < kTileVecs; ++u) vstore(t + u * kLanes, acc[r][u]);
            for (int j = lo[r]; j <= hi[r]; ++j) t[j] = p.softcap * std::tanh(t[j] / p.softcap);
            for (int u = 0; u < kTileVecs; ++u) acc[r][u] = vload(t + u * kLanes);
        }
        if (Extras && p.alibi_slopes) {  // s -= slope * (a - j), a - j = (a - t0) - (j - t0), exact below 2^24
            const vf slope = vset1(p.alibi_slopes[blk.head_of(lr)]);
            const vf d0 = vset1(float(pos + blk.row_of(lr) - t0));
            for (int u = 0; u < kTileVecs; ++u)
                acc[r][u] = vsub(acc[r][u], vmul(slope, vsub(d0, vload(kKeyIndex.j + u * kLanes))));
        }
        vf vmx = vset1(kNegInf);
        for (int u = 0; u < kTileVecs; ++u) {
            // Only a vector the row does not see in full is masked. GQA, T = 2048, causal and
            // with a 256-key window: 1.02-1.06x as fast (AMD EPYC Zen 3, in-process alternation,
            // 15 rounds).
            if (lo[r] > u * kLanes || hi[r] + 1 < (u + 1) * kLanes)
                acc[r][u] = vmask_before(vmask_after(acc[r][u], hi[r] + 1 - u * kLanes), lo[r] - u * kLanes);
            vmx = vmax(vmx, acc[r][u]);
        }
        mx[r] = vreduce_max(vmx);
    }
    online_softmax<R>(acc, mx, s.m.data() + lr0, s.lvec.data() + std::size_t(lr0) * kLanes,
                      s.p.data() + std::size_t(lr0) * kTileKeys, s.alpha.data() + lr0, lo, end);
}

// O = O * alpha + P V for the micro-block's rows (after tile_softmax) over the output columns
// [dv0, dv0 + cols), for the rows that see keys of the tile (for the others alpha is 1, or 0
// on an accumulator still 0: nothing to do). The keys all of them see go through the n-row
// kernel; before that, each row's keys below them alone (the row's alpha applied there), after
// it each row's keys above them alone, so each row adds its keys in ascending order, and only
// its own.
template <int R>
void tile_pv(const attncheck_problem_v2& p, int lr0, const float* vt, std::int64_t v_rs, std::int64_t dv0, int cols,
             Scratch& s) {
    const std::int64_t Dv = p.value_dim;
    const int* lo = s.lo.data() + lr0;
    const int* hi = s.hi.data() + lr0;
    float* o_rows[R];
    const float* p_rows[R];
    float a_rows[R];
    int sel[R], n = 0, all_lo = 0, all_hi = kTileKeys - 1;
    for (int r = 0; r < R; ++r) {
        if (lo[r] > hi[r]) continue;
        sel[n] = r;
        o_rows[n] = s.o.data() + std::size_t(lr0 + r) * std::size_t(Dv);
        p_rows[n] = s.p.data() + std::size_t(lr0 + r) * kTileKeys;
        a_rows[n] = s.alpha[std::size_t(lr0 + r)];
        all_lo = std::max(all_lo, lo[r]);
        all_hi = std::min(all_hi, hi[r]);
        ++n;
    }
    if (n == 0) return;
    const int nv = (cols + kLanes - 1) / kLanes;
    const int last_n = cols - (nv - 1) * kLanes;
    if (n == 1 || all_lo > all_hi) {  // no key in common: each row alone
        for (int t = 0; t < n; ++t)
            pv_dispatch<1>(nv, &o_rows[t], &a_rows[t], true, &p_rows[t], vt, v_rs, dv0, last_n, lo[sel[t]],
                           hi[sel[t]] + 1);
        return;
    }
    float a_common[R];
    for (int t = 0; t < n; ++t) {
        a_common[t] = a_rows[t];
        if (lo[sel[t]] < all_lo) {
            pv_dispatch<1>(nv, &o_rows[t], &a_rows[t], true, &p_rows[t], vt, v_rs, dv0, last_n, lo[sel[t]], all_lo);
            a_common[t] = 1.0f;  // o * 1 is exact
        }
    }
    pv_rows<R>(n, nv, o_rows, a_common, true, p_rows, vt, v_rs, dv0, last_n, all_lo, all_hi + 1);
    for (int t = 0; t < n; ++t)
        if (hi[sel[t]] > all_hi)
            pv_dispatch<1>(nv, &o_rows[t], &a_rows[t], false, &p_rows[t], vt, v_rs, dv0, last_n, all_hi + 1,
                           hi[sel[t]] + 1);
}

// The visible keys of every packed row of blk into s.keys, and its query rows: in place for one
// head (G = 1, f32_rows), else those that see a key converted into s.q (the others 0); returns
// the union of the keys, one interval (empty when lo > hi).
KeyRange prepare(const attncheck_problem_v2& p, const Block& blk, Scratch& s, bool load_q) {
    const std::int64_t Tk = kv_len_of(p, blk.b), pos = p.q_pos[blk.b], Dk = p.head_dim;
    const bool in_place = blk.G == 1 && f32_rows(p, p.q, Dk);
    s.q_rows = in_place ? static_cast<const float*>(p.q.data) + q_offset_v2(p, p.q, blk.b, blk.head_of(0), int(blk.i0), 0)
                        : s.q.data();
    s.q_rs = in_place ? p.q.stride[2] : Dk;
    for (std::int64_t r = 0; r < blk.packed(); ++r) {
        const KeyRange k = visible_keys_v2(p, Tk, pos + blk.row_of(r));
        s.keys[std::size_t(r)] = k;
        if (!load_q || in_place) continue;
        if (k.empty())
            std::fill_n(s.q.data() + r * Dk, Dk, 0.0f);
        else
            load_row(p.dtype, p.q.data, q_offset_v2(p, p.q, blk.b, blk.head_of(r), int(blk.row_of(r)), 0),
                     p.q.stride[3], Dk, s.q.data() + r * Dk);
    }
    return keys_of_rows(p, blk.b, blk.i0, blk.i1);  // every head of the group has the same rows
}

// Chunk c of block blk (keys [c * kChunkKeys, (c + 1) * kChunkKeys) within `block`, the union
// of its rows' keys): the rows' state over those keys alone, in s.o, s.m, s.lsum.
void run_chunk(const attncheck_problem_v2& p, const Block& blk, Scratch& s, const KeyRange& block, std::int64_t c,
               const TileSource& src) {
    const std::int64_t packed = blk.packed(), Dk = p.head_dim, Dv = p.value_dim;
    std::fill_n(s.o.begin(), packed * Dv, 0.0f);
    std::fill_n(s.lvec.begin(), packed * kLanes, 0.0f);
    std::fill_n(s.m.begin(), packed, kNegInf);
    const std::int64_t first = std::max(block.lo, c * kChunkKeys);
    const std::int64_t last = std::min(block.hi, (c + 1) * kChunkKeys - 1);
    const bool extras = p.softcap > 0.0f || p.alibi_slopes;
    for (std::int64_t t0 = first / kTileKeys * kTileKeys; t0 <= last; t0 += kTileKeys) {
        const std::int64_t t1 = t0 + kTileKeys - 1;
        const float* kt = src.kt ? src.kt + (t0 / kTileKeys) * Dk * kTileKeys : s.kt.data();
        const float* vt = src.v ? src.v + t0 * src.v_rs : s.v.data();
        const std::int64_t v_rs = src.v ? src.v_rs : Dv;
        if (!src.kt)
            load_keys(p, blk.b, blk.hk, t0, std::max(t0, first), std::min(t1, last), last, s.krows.data(), s.kt.data());
        if (!src.v) load_values(p, blk.b, blk.hk, t0, std::max(t0, first), std::min(t1, last), s.v.data());
        const auto meets = [&](std::int64_t lr0, int R) {  // a row of the micro-block sees the tile
            for (int r = 0; r < R; ++r) {
                const KeyRange k = s.keys[std::size_t(lr0 + r)];
                if (!k.empty() && k.hi >= t0 && k.lo <= t1) return true;
            }
            return false;
        };
        for_micro_blocks(
            packed, Dv, meets,
            [&]<int R>(int lr0) {
                if (extras)
                    tile_softmax<R, true>(p, blk, lr0, t0, kt, s);
                else
                    tile_softmax<R, false>(p, blk, lr0, t0, kt, s);
            },
            [&]<int R>(int lr0, std::int64_t dv0, int cols) { tile_pv<R>(p, lr0, vt, v_rs, dv0, cols, s); });
    }
    for (std::int64_t r = 0; r < packed; ++r)
        s.lsum[std::size_t(r)] = vreduce_add(vload(s.lvec.data() + std::size_t(r) * kLanes));
}

// The running (m, l, o) of blk's rows before their first chunk: nothing seen.
void reset_totals(Scratch& s, std::int64_t packed, std::int64_t Dv) {
    std::fill_n(s.o_tot.begin(), packed * Dv, 0.0f);
    std::fill_n(s.m_tot.begin(), packed, kNegInf);
    std::fill_n(s.l_tot.begin(), packed, 0.0f);
}

// Merges a chunk's state of row r (m_c, l_c, o_c) into its total in s (nothing when the row
// saw no key of the chunk).
void merge_row(Scratch& s, std::int64_t r, float m_c, float l_c, const float* o_c, std::int64_t Dv) {
    merge_partial(m_c, l_c, o_c, s.m_tot[std::size_t(r)], s.l_tot[std::size_t(r)],
                  s.o_tot.data() + std::size_t(r * Dv), Dv);
}

// out = o / l and lse = m + log l of every packed row of blk from the totals of s (0 and -inf
// for a row that sees no key). A sink joins last, as a partial of its own: m = sinks[h], l = 1,
// o = 0 (a row without keys then gives out 0 and lse = sinks[h]).
void finalize(const attncheck_problem_v2& p, const Block& blk, Scratch& s) {
    const std::int64_t Dv = p.value_dim;
    for (std::int64_t r = 0; r < blk.packed(); ++r) {
        const int h = blk.head_of(r), i = int(blk.row_of(r));
        if (p.sinks) {
            std::fill_n(s.row.data(), Dv, 0.0f);
            merge_partial(p.sinks[h], 1.0f, s.row.data(), s.m_tot[std::size_t(r)], s.l_tot[std::size_t(r)],
                          s.o_tot.data() + std::size_t(r * Dv), Dv);
        }
        const bool any = !s.keys[std::size_t(r)].empty() || p.sinks;
        const float l = s.l_tot[std::size_t(r)];
        const std::int64_t at = q_offset_v2(p, p.out, blk.b, h, i, 0), step = p.out.stride[3];
        const bool direct = f32_rows(p, p.out, Dv);  // written in place
        const float* row = s.row.data();
        finalize_row(s.o_tot.data() + std::size_t(r * Dv), any ? l : 0.0f,
                     direct ? static_cast<float*>(p.out.data) + at : s.row.data(), Dv);
        if (!direct && p.dtype == ATTNCHECK_DTYPE_F32)
            for (std::int64_t c = 0; c < Dv; ++c) static_cast<float*>(p.out.data)[at + c * step] = row[c];
        else if (p.dtype == ATTNCHECK_DTYPE_BF16)  // a loop of its own per dtype: it vectorizes
            for (std::int64_t c = 0; c < Dv; ++c) static_cast<std::uint16_t*>(p.out.data)[at + c * step] = float_to_bf16(row[c]);
        else if (p.dtype == ATTNCHECK_DTYPE_F16)
            for (std::int64_t c = 0; c < Dv; ++c) static_cast<std::uint16_t*>(p.out.data)[at + c * step] = float_to_f16(row[c]);
        if (p.lse) p.lse[lse_offset_v2(p, blk.b, h, i)] = any ? s.m_tot[std::size_t(r)] + std::log(l) : kNegInf;
    }
}

// A whole block on one thread: its chunks in order, each merged as it ends.
void run_block(const attncheck_problem_v2& p, const Block& blk, Scratch& s, const TileSource& src) {
    const KeyRange block = prepare(p, blk, s, true);
    const std::int64_t packed = blk.packed(), Dv = p.value_dim;
    reset_totals(s, packed, Dv);
    if (!block.empty())
        for (std::int64_t c = block.lo / kChunkKeys; c <= block.hi / kChunkKeys; ++c) {
            run_chunk(p, blk, s, block, c, src);
            for (std::int64_t r = 0; r < packed; ++r)
                merge_row(s, r, s.m[std::size_t(r)], s.lsum[std::size_t(r)], s.o.data() + r * Dv, Dv);
        }
    finalize(p, blk, s);
}

// Runs fn(scratch, n) for n < count over the OpenMP threads (parallel_tasks.hpp), each thread's
// scratch sized first; false when an allocation failed.
template <class Fn>
bool parallel_for(const attncheck_problem_v2& p, std::int64_t packed, std::size_t count, const Fn& fn) {
    return parallel_tasks(
        count, [&] { t_scratch.reserve(packed, p.head_dim, p.value_dim); }, [&](std::size_t n) { fn(t_scratch, n); });
}

// The (sequence, kv head) pairs' K/V tiles that some row of the call sees, converted and packed
// into t_packed_kt / t_packed_v (the values only where source does not read them in place
// already); source[b * Hk + hk] says where each pair's tiles are. May throw.
bool pack_all_tiles(const attncheck_problem_v2& p, std::int64_t packed, std::vector<TileSource>& source) {
    const std::int64_t Dk = p.head_dim, Dv = p.value_dim, Hk = p.kv_heads;
    struct Task {
        int b, hk;
        std::int64_t t0, jlo, jhi, last;  // last: the pair's last used key
        std::size_t at;                   // tile index in the packed buffers
    };
    // Kept between calls, and named through references, as run_v2_target's lists.
    thread_local std::vector<Task> t_tasks;
    thread_local std::vector<std::size_t> t_first_tile;
    auto& tasks = t_tasks;
    auto& first_tile = t_first_tile;
    tasks.clear();
    first_tile.assign(std::size_t(p.batch * Hk), 0);
    std::size_t tiles = 0;
    for (int b = 0; b < p.batch; ++b) {
        const KeyRange used = keys_of_rows(p, b, 0, q_len_of(p, b));
        const std::int64_t n_tiles = used.empty() ? 0 : used.hi / kTileKeys + 1;
        for (int hk = 0; hk < Hk; ++hk) {
            first_tile[std::size_t(b * Hk + hk)] = tiles;
            for (std::int64_t t = used.empty() ? 0 : used.lo / kTileKeys; t < n_tiles; ++t) {
                const std::int64_t t0 = t * kTileKeys;
                tasks.push_back({b, hk, t0, std::max(t0, used.lo), std::min(t0 + kTileKeys - 1, used.hi), used.hi,
                                 tiles + std::size_t(t)});
            }
            tiles += std::size_t(n_tiles);
        }
    }
    // Keys and values are each in place for every pair or for none.
    const bool pack_keys = !source.front().kt, pack_values = !source.front().v;
    if (!pack_keys && !pack_values) return true;
    t_packed_kt.resize(pack_keys ? tiles * std::size_t(Dk * kTileKeys) : 0);
    t_packed_v.resize(pack_values ? tiles * std::size_t(kTileKeys * Dv) : 0);
    float* kt = t_packed_kt.data();
    float* v = t_packed_v.data();
    for (std::size_t n = 0; n < first_tile.size(); ++n) {
        if (pack_keys) source[n].kt = kt + first_tile[n] * std::size_t(Dk * kTileKeys);
        if (pack_values) source[n].v = v + first_tile[n] * std::size_t(kTileKeys * Dv), source[n].v_rs = Dv;
    }
    return parallel_for(p, packed, tasks.size(), [&](Scratch& s, std::size_t n) {
        const Task& t = tasks[n];
        if (pack_keys)
            load_keys(p, t.b, t.hk, t.t0, t.jlo, t.jhi, t.last, s.krows.data(), kt + t.at * std::size_t(Dk * kTileKeys));
        if (pack_values) load_values(p, t.b, t.hk, t.t0, t.jlo, t.jhi, v + t.at * std::size_t(kTileKeys * Dv));
    });
}

}  // namespace

// The kernel on this target, on a problem already validated (may throw std::bad_alloc).
int run_v2_target(const attncheck_problem_v2& p, const RunOptions& options) {
    const int G = p.q_heads / p.kv_heads;
    const std::int64_t rows = std::max(1, kPackedRows / G), packed = G * rows, Dv = p.value_dim;
    // The call's lists, kept between calls (a decoder's step allocates nothing); named through
    // references, so that the worker threads' lambdas below read this thread's lists, not their own.
    thread_local std::vector<Block> t_blocks;
    thread_local std::vector<TileSource> t_source;
    auto& blocks = t_blocks;
    auto& source = t_source;
    blocks.clear();
    bool shared_tiles = false;  // some (sequence, kv head) has several query blocks
    for (int b = 0; b < p.batch; ++b) {
        const std::int64_t Tq = q_len_of(p, b);
        shared_tiles = shared_tiles || Tq > rows;
        // Last blocks first: under causality they are the heaviest.
        for (std::int64_t i0 = (Tq - 1) / rows * rows; i0 >= 0 && Tq > 0; i0 -= rows)
            for (int hk = 0; hk < p.kv_heads; ++hk) blocks.push_back({b, hk, G, i0, std::min(Tq, i0 + rows)});
    }
    source.assign(std::size_t(p.batch) * std::size_t(p.kv_heads), TileSource{});
    for (int b = 0; b < p.batch; ++b)
        for (int hk = 0; hk < p.kv_heads; ++hk) {
            TileSource& src = source[std::size_t(b * p.kv_heads + hk)];
            src = values_in_place(p, b, hk);
            if (options.k_tiled)
                src.kt = static_cast<const float*>(p.k.data) + b * p.k.stride[0] + hk * p.k.stride[1];
        }
    if (shared_tiles && !pack_all_tiles(p, packed, source)) return ATTNCHECK_UNSUPPORTED;
    const auto source_of = [&](const Block& blk) { return source[std::size_t(blk.b) * std::size_t(p.kv_heads) + std::size_t(blk.hk)]; };

    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (threads == 1 || blocks.size() >= std::size_t(2 * threads))
        return parallel_for(p, packed, blocks.size(),
                            [&](Scratch& s, std::size_t n) { run_block(p, blocks[n], s, source_of(blocks[n])); })
                   ? ATTNCHECK_OK
                   : ATTNCHECK_UNSUPPORTED;

    // Too few blocks for the threads (a decode step): every (block, chunk) is a task, whose
    // state goes to `partials`, then each block merges its chunks in order, as run_block does.
    struct Split {
        std::size_t block;
        std::int64_t chunk;
        std::size_t at;  // offset in partials: [packed rows][m, l, o[Dv]]
    };
    thread_local std::vector<Split> t_splits;
    thread_local std::vector<std::size_t> t_first_split;
    thread_local std::vector<float> t_partials;
    auto& splits = t_splits;
    auto& first_split = t_first_split;
    auto& partials = t_partials;
    splits.clear();
    first_split.assign(blocks.size() + 1, 0);
    std::size_t size = 0;
    const std::size_t stride = std::size_t(Dv + 2);
    for (std::size_t n = 0; n < blocks.size(); ++n) {
        first_split[n] = splits.size();
        const Block& blk = blocks[n];
        const KeyRange block = keys_of_rows(p, blk.b, blk.i0, blk.i1);
        if (!block.empty())
            for (std::int64_t c = block.lo / kChunkKeys; c <= block.hi / kChunkKeys; ++c) {
                splits.push_back({n, c, size});
                size += std::size_t(blk.packed()) * stride;
            }
    }
    first_split[blocks.size()] = splits.size();
    partials.resize(size);
    const bool ran = parallel_for(p, packed, splits.size(), [&](Scratch& s, std::size_t n) {
        const Split& sp = splits[n];
        const Block& blk = blocks[sp.block];
        const KeyRange block = prepare(p, blk, s, true);
        run_chunk(p, blk, s, block, sp.chunk, source_of(blk));
        for (std::int64_t r = 0; r < blk.packed(); ++r) {
            float* dst = partials.data() + sp.at + std::size_t(r) * stride;
            dst[0] = s.m[std::size_t(r)];
            dst[1] = s.lsum[std::size_t(r)];
            std::copy_n(s.o.data() + r * Dv, Dv, dst + 2);
        }
    });
    const bool merged = ran && parallel_for(p, packed, blocks.size(), [&](Scratch& s, std::size_t n) {
        const Block& blk = blocks[n];
        prepare(p, blk, s, false);
        reset_totals(s, blk.packed(), Dv);
        for (std::size_t k = first_split[n]; k < first_split[n + 1]; ++k)
            for (std::int64_t r = 0; r < blk.packed(); ++r) {
                const float* src = partials.data() + splits[k].at + std::size_t(r) * stride;
                merge_row(s, r, src[0], src[1], src + 2, Dv);
            }
        finalize(p, blk, s);
    });
    return merged ? ATTNCHECK_OK : ATTNCHECK_UNSUPPORTED;
}

}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attncheck::optimized::attention_detail {
HWY_EXPORT(run_v2_target);

int run_v2(const attncheck_problem_v2& p, const RunOptions& options) {
    isa_choice();  // ATTNCHECK_ISA is applied before the first dispatch
    return HWY_DYNAMIC_DISPATCH(run_v2_target)(p, options);
}
}  // namespace attncheck::optimized::attention_detail
#endif  // HWY_ONCE
