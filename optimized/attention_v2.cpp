// optimized/attention_v2.cpp — attncheck_optimized_kernel_v2: the fused attention kernel of
// kernel ABI version 2 (attncheck/kernel_abi_v2.h).
//
// Fast path. A problem that version 1 can express exactly (float32, Hq = Hk, contiguous
// [B,H,T,D] tensors, one q_pos for every sequence, equal Tq, kv_lens as v1 padding, and no
// window, softcap, ALiBi, pages, varlen or lse) goes to attncheck_optimized_kernel unchanged:
// same bits, same speed.
//
// General path: online softmax over key tiles, per (sequence, kv head, query block):
//
//   pack the query rows of the block for ALL the query heads of the kv head's group
//     (G = Hq / Hk heads x block rows), converted to float32 once     Qf [G*rows, Dk]
//   for each chunk of kChunk keys, for each tile of kTile keys that some row of the block sees:
//     read its keys and values once (through strides, varlen packing or the block table),
//     converted to float32 once                                        Kt [Dk, kTile], Vf [kTile, Dv]
//     for the packed rows whose visible keys meet the tile, two at a time (sharing the loads):
//       s = scale * q.k over the whole tile (fixed-length loops the compiler vectorizes);
//       softcap and ALiBi; keys the row does not see -> -inf; m' = max(m, max s),
//       alpha = exp(m - m'), p = exp(s - m'), l = l * alpha + sum p,
//       O = O * alpha + sum_j p_j V_j over the row's visible keys only
//     merge the chunk's (m, l, O) of each row into the row's total, in chunk order
//   out = O / l, lse = m + log l   (0 and -inf for a row that sees no key)
//
// GQA without replication: a kv head's tiles are read once per query block and serve the G
// query heads of its group. Skipping: a row's visible keys are one interval [lo, hi] (window
// and causality), nondecreasing in the row, so the block's keys are the union of its rows'
// intervals, one interval too; tiles outside it (past the diagonal, before the window, in the
// padding) are never read, and in a partly visible tile a row uses only its own keys. A key that
// no row of the call sees is never loaded, so NaN there cannot reach the result; a key a row
// does not see is never multiplied into its output (not even as 0 * v).
//
// Work split (OpenMP, dynamic schedule): tasks are the blocks, last (heaviest) first. When
// there are fewer than two blocks per thread (a decode step), tasks are (block, chunk) pairs
// instead, each writing its rows' chunk state to a buffer, and a second loop merges each
// block's chunks in order, with the same arithmetic as a block run on one thread.
//
// Determinism: the arithmetic of a row depends only on its own inputs and on the tiles and
// chunks, which start at multiples of their size in absolute key index (never at an offset that
// depends on the block or the thread); every score is one FMA chain over c, every P V sum adds
// the row's keys in ascending order, whether the row goes alone or in a pair. So the result is
// bitwise the same for any thread count, either work split and any query blocking.
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys
// of a sequence, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <omp.h>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem.hpp"
#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/attention_v2.hpp"

namespace attncheck::optimized::attention_v2_detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys per tile (the unit of the online softmax, of the K/V conversion and of the skip).
constexpr int kTile = 64;
// Packed query rows per task: G heads x max(1, kPackedRows / G) rows.
constexpr int kPackedRows = 64;
// Keys per chunk: each chunk gives every row a partial state (max, sum, accumulator), merged
// in chunk order. A decode step hands its chunks to different threads; otherwise one thread
// runs a block's chunks in order; the arithmetic is the same either way.
constexpr std::int64_t kChunk = 512;

// ---- the fast path ---------------------------------------------------------------------------

// Whether view t is exactly the contiguous [n0, n1, n2, n3] layout (a stride of an extent-1
// dimension is never used, so any value is accepted there).
bool contiguous(const attncheck_tensor_v2& t, std::int64_t n0, std::int64_t n1, std::int64_t n2, std::int64_t n3) {
    const std::int64_t extent[4] = {n0, n1, n2, n3};
    const std::int64_t want[4] = {n1 * n2 * n3, n2 * n3, n3, 1};
    for (int d = 0; d < 4; ++d)
        if (extent[d] > 1 && t.stride[d] != want[d]) return false;
    return true;
}

// Whether p says nothing that version 1 cannot say (see the file comment).
bool v1_expressible(const attncheck_problem_v2& p) {
    if (p.dtype != ATTNCHECK_DTYPE_F32 || p.q_heads != p.kv_heads) return false;
    if (p.cu_seqlens_q || p.cu_seqlens_k || p.block_table || p.alibi_slopes || p.lse) return false;
    if (p.window_left != -1 || p.window_right != -1 || p.softcap != 0.0f) return false;
    for (int b = 1; b < p.batch; ++b)
        if (p.q_pos[b] != p.q_pos[0]) return false;
    const std::int64_t B = p.batch, H = p.q_heads;
    return contiguous(p.q, B, H, p.q_len, p.head_dim) && contiguous(p.k, B, H, p.kv_len, p.head_dim) &&
           contiguous(p.v, B, H, p.kv_len, p.value_dim) && contiguous(p.out, B, H, p.q_len, p.value_dim);
}

attncheck_problem v1_problem(const attncheck_problem_v2& p) {
    return attncheck::make_problem({.batch = p.batch,
                                    .heads = p.q_heads,
                                    .q_len = p.q_len,
                                    .kv_len = p.kv_len,
                                    .head_dim = p.head_dim,
                                    .value_dim = p.value_dim,
                                    .q_offset = p.q_pos[0],
                                    .causal = p.causal != 0,
                                    .kv_valid_len = p.kv_lens,
                                    .scale = p.scale});
}

// ---- the general path ------------------------------------------------------------------------

// dst[c] = element offset + c * stride of data, as float32, for c < n: `convert` applied to
// each element, in a loop of its own for contiguous rows (the usual case), which vectorizes.
template <class T, class Convert>
void load_elements(const void* data, std::int64_t offset, std::int64_t stride, std::int64_t n, float* dst,
                   const Convert& convert) {
    const T* src = static_cast<const T*>(data) + offset;
    if (stride == 1)
        for (std::int64_t c = 0; c < n; ++c) dst[c] = convert(src[c]);
    else
        for (std::int64_t c = 0; c < n; ++c) dst[c] = convert(src[c * stride]);
}

void load_row(std::int32_t dtype, const void* data, std::int64_t offset, std::int64_t stride, std::int64_t n,
              float* dst) {
    switch (dtype) {
    case ATTNCHECK_DTYPE_BF16:
        load_elements<std::uint16_t>(data, offset, stride, n, dst, [](std::uint16_t h) { return bf16_to_float(h); });
        break;
    case ATTNCHECK_DTYPE_F16:
        load_elements<std::uint16_t>(data, offset, stride, n, dst,
                                     [](std::uint16_t h) { return f16_to_float_branchless(h); });
        break;
    default: load_elements<float>(data, offset, stride, n, dst, [](float x) { return x; });
    }
}

// The keys [lo, hi] the row at absolute position a sees among Tk keys (empty when lo > hi).
struct KeyRange {
    std::int64_t lo, hi;
    bool empty() const { return lo > hi; }
};
KeyRange visible_keys(const attncheck_problem_v2& p, std::int64_t Tk, std::int64_t a) {
    KeyRange r{0, Tk - 1};
    if (p.causal)
        r.hi = std::min(r.hi, a);
    else if (p.window_right >= 0)
        r.hi = std::min(r.hi, a + p.window_right);
    if (p.window_left >= 0) r.lo = std::max(r.lo, a - p.window_left);
    return r;
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

// The online-softmax state of packed rows: running max, sum and unnormalized accumulator.
struct RowState {
    std::vector<float> m, l;  // [packed]
    std::vector<float> o;     // [packed, Dv]
    RowState(std::int64_t packed, std::int64_t Dv)
        : m(std::size_t(packed)), l(std::size_t(packed)), o(std::size_t(packed * Dv)) {}
    void reset(std::int64_t packed, std::int64_t Dv) {
        std::fill_n(m.begin(), packed, kNegInf);
        std::fill_n(l.begin(), packed, 0.0f);
        std::fill_n(o.begin(), packed * Dv, 0.0f);
    }
};

// Per-thread buffers of a call.
struct Scratch {
    std::vector<float> q;        // [packed, Dk]   packed query rows
    std::vector<float> kt;       // [Dk, kTile]    the key tile, transposed
    std::vector<float> krow;     // [Dk]           one key, before the transpose
    std::vector<float> v;        // [kTile, Dv]    the value tile
    std::vector<KeyRange> keys;  // [packed]       visible keys of each packed row
    RowState chunk, total;       // of the chunk being run, and merged over the chunks so far
    Scratch(std::int64_t packed, std::int64_t Dk, std::int64_t Dv)
        : q(std::size_t(packed * Dk)), kt(std::size_t(Dk * kTile)), krow(std::size_t(Dk)),
          v(std::size_t(kTile * Dv)), keys(std::size_t(packed)), chunk(packed, Dv), total(packed, Dv) {}
};

// s[r][j] = q[r] . kt[:, j] for R rows and the kTile keys of the tile: one FMA chain per score
// over c = 0 .. Dk-1, so a score has the same bits whether its row goes alone or in a pair. The
// keys go in passes of kScoreKeys, whose R x kScoreKeys / 8 accumulators stay in AVX2 registers
// and share each load of kt. (The project compiles with -ffp-contract=off, so every
// multiply-add that should be one FMA says so.)
template <int R>
[[gnu::noinline]] void tile_scores(const float* const* q, const float* kt, std::int64_t Dk, float (*s)[kTile]) {
    constexpr int kScoreKeys = R == 1 ? 64 : 32;
    for (int j0 = 0; j0 < kTile; j0 += kScoreKeys) {
        float acc[R][kScoreKeys] = {};
        for (std::int64_t c = 0; c < Dk; ++c) {
            const float* kc = kt + c * kTile + j0;
            for (int r = 0; r < R; ++r) {
                const float qc = q[r][c];
                for (int j = 0; j < kScoreKeys; ++j) acc[r][j] = std::fma(qc, kc[j], acc[r][j]);
            }
        }
        for (int r = 0; r < R; ++r) std::memcpy(s[r] + j0, acc[r], sizeof acc[r]);
    }
}

// o[r][0 .. Dv) = o[r] * alpha[r] + sum_{j in [j0, j1]} p[r][j] * v[j, :] for R rows, keys in
// ascending order, one FMA each, R x kPvCols / 8 accumulators in registers sharing each load
// of v. (Elementwise, so a row's bits do not depend on R.) Not inlined: inside the caller, g++
// 12 spilled an accumulator of the pair, and the loop ran at the speed of a store and a load.
template <int R>
[[gnu::noinline]] void pv_update(float* const* o, const float* alpha, const float* const* p, const float* v, std::int64_t Dv, int j0,
               int j1) {
    constexpr int kPvCols = R == 1 ? 64 : 32;
    std::int64_t d0 = 0;
    for (; d0 + kPvCols <= Dv; d0 += kPvCols) {
        float acc[R][kPvCols];
        for (int r = 0; r < R; ++r)
            for (int u = 0; u < kPvCols; ++u) acc[r][u] = o[r][d0 + u] * alpha[r];
        for (int j = j0; j <= j1; ++j) {
            const float* vj = v + j * Dv + d0;
            for (int r = 0; r < R; ++r) {
                const float pj = p[r][j];
                for (int u = 0; u < kPvCols; ++u) acc[r][u] = std::fma(pj, vj[u], acc[r][u]);
            }
        }
        for (int r = 0; r < R; ++r) std::memcpy(o[r] + d0, acc[r], sizeof acc[r]);
    }
    for (int r = 0; r < R; ++r)
        for (std::int64_t d = d0; d < Dv; ++d) {
            float acc = o[r][d] * alpha[r];
            for (int j = j0; j <= j1; ++j) acc = std::fma(p[r][j], v[j * Dv + d], acc);
            o[r][d] = acc;
        }
}

// The online softmax of one row over one tile starting at key t0, from its raw scores s (q.k):
// the row sees the tile-local keys [j0, j1]; a is its absolute position, slope its ALiBi slope.
// Leaves the probabilities in e (exactly 0 outside [j0, j1]), updates m and l, and returns
// alpha, the factor of the row's old accumulator. The loops run over the whole tile, with the
// keys the row does not see at -inf, so that they have a fixed length and vectorize.
float softmax_tile(const attncheck_problem_v2& p, float* s, std::int64_t t0, int j0, int j1, std::int64_t a,
                   float slope, float& m, float& l, float* e) {
    for (int j = 0; j < kTile; ++j) s[j] *= p.scale;
    if (p.softcap > 0.0f)
        for (int j = j0; j <= j1; ++j) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
    if (p.alibi_slopes) {
        const float d0 = float(a - t0);  // a - j = d0 - (j - t0), exact below 2^24
        for (int j = 0; j < kTile; ++j) s[j] -= slope * (d0 - float(j));
    }
    for (int j = 0; j < kTile; ++j) s[j] = j >= j0 && j <= j1 ? s[j] : kNegInf;
    // Maximum and sum in 8 interleaved partials (vectorizable, fixed order).
    float part[8];
    std::fill_n(part, 8, kNegInf);
    for (int j = 0; j < kTile; j += 8)
        for (int u = 0; u < 8; ++u) part[u] = std::max(part[u], s[j + u]);
    const float mx = std::max(std::max(std::max(part[0], part[1]), std::max(part[2], part[3])),
                              std::max(std::max(part[4], part[5]), std::max(part[6], part[7])));
    const float m_new = std::max(m, mx);
    // While every score seen is -inf, subtracting 0 keeps exp(-inf - -inf) = NaN out.
    const float m_use = m_new == kNegInf ? 0.0f : m_new;
    const float alpha = m == kNegInf ? 0.0f : std::exp(m - m_use);
    m = m_new;
    for (int j = 0; j < kTile; ++j) s[j] -= m_use;
    attention_detail::exp_nonpositive(s, e, kTile);
    std::fill_n(part, 8, 0.0f);
    for (int j = 0; j < kTile; j += 8)
        for (int u = 0; u < 8; ++u) part[u] += e[j + u];
    const float psum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    l = l * alpha + psum;
    return alpha;
}

// Reads keys and values [jlo, jhi] of the tile at t0 (kv head hk of sequence b) into s.kt and
// s.v, as float32.
void load_tile(const attncheck_problem_v2& p, int b, int hk, std::int64_t t0, std::int64_t jlo, std::int64_t jhi,
               Scratch& s) {
    const std::int64_t Dk = p.head_dim, Dv = p.value_dim;
    for (std::int64_t j = jlo; j <= jhi; ++j) {
        const std::int64_t jj = j - t0;
        load_row(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, int(j), 0), p.k.stride[3], Dk, s.krow.data());
        for (std::int64_t c = 0; c < Dk; ++c) s.kt[std::size_t(c * kTile + jj)] = s.krow[std::size_t(c)];
        load_row(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, int(j), 0), p.v.stride[3], Dv,
                 s.v.data() + jj * Dv);
    }
}

// R packed rows (indices rs) of block blk against the tile at t0 held in s.kt / s.v: scores,
// softmax, P V into s.chunk. A row's visible keys there are the tile-local [lo[r], hi[r]]; P V
// adds each row's keys in ascending order: keys only the first-starting row sees alone, then
// the keys both see together, then the keys only the last-ending row sees, so the bits are
// those of the row alone.
template <int R>
void rows_tile(const attncheck_problem_v2& p, const Block& blk, Scratch& s, const std::int64_t (&rs)[R],
               std::int64_t t0) {
    const std::int64_t Dk = p.head_dim, Dv = p.value_dim, t1 = t0 + kTile - 1, pos = p.q_pos[blk.b];
    const float* q[R];
    float* o[R];
    float sc[R][kTile], e[R][kTile], alpha[R];
    const float* pr[R];
    int lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
        q[r] = s.q.data() + rs[r] * Dk;
        o[r] = s.chunk.o.data() + rs[r] * Dv;
        pr[r] = e[r];
    }
    tile_scores<R>(q, s.kt.data(), Dk, sc);
    for (int r = 0; r < R; ++r) {
        const KeyRange k = s.keys[std::size_t(rs[r])];
        lo[r] = int(std::max(k.lo, t0) - t0);
        hi[r] = int(std::min(k.hi, t1) - t0);
        const int h = blk.head_of(rs[r]);
        alpha[r] = softmax_tile(p, sc[r], t0, lo[r], hi[r], pos + blk.row_of(rs[r]),
                                p.alibi_slopes ? p.alibi_slopes[h] : 0.0f, s.chunk.m[std::size_t(rs[r])],
                                s.chunk.l[std::size_t(rs[r])], e[r]);
    }
    if constexpr (R == 1) {
        pv_update<1>(o, alpha, pr, s.v.data(), Dv, lo[0], hi[0]);
    } else {
        const int both_lo = std::max(lo[0], lo[1]), both_hi = std::min(hi[0], hi[1]);
        if (both_lo > both_hi) {  // no key in common
            for (int r = 0; r < 2; ++r) pv_update<1>(&o[r], &alpha[r], &pr[r], s.v.data(), Dv, lo[r], hi[r]);
            return;
        }
        float ones[2] = {1.0f, 1.0f};  // o * 1 is exact: later passes only add
        for (int r = 0; r < 2; ++r) {
            if (lo[r] < both_lo) {
                pv_update<1>(&o[r], &alpha[r], &pr[r], s.v.data(), Dv, lo[r], both_lo - 1);
                alpha[r] = 1.0f;
            }
        }
        pv_update<2>(o, alpha, pr, s.v.data(), Dv, both_lo, both_hi);
        for (int r = 0; r < 2; ++r)
            if (hi[r] > both_hi) pv_update<1>(&o[r], &ones[r], &pr[r], s.v.data(), Dv, both_hi + 1, hi[r]);
    }
}

// The visible keys of every packed row of blk into s.keys (and, with load_q, the rows of q
// that see some key into s.q); returns their union, one interval (empty when lo > hi).
KeyRange prepare(const attncheck_problem_v2& p, const Block& blk, Scratch& s, bool load_q) {
    const std::int64_t Tk = kv_len_of(p, blk.b), pos = p.q_pos[blk.b];
    KeyRange block{std::numeric_limits<std::int64_t>::max(), -1};
    for (std::int64_t r = 0; r < blk.packed(); ++r) {
        const KeyRange k = visible_keys(p, Tk, pos + blk.row_of(r));
        s.keys[std::size_t(r)] = k;
        if (k.empty()) continue;
        block.lo = std::min(block.lo, k.lo);
        block.hi = std::max(block.hi, k.hi);
        if (load_q)
            load_row(p.dtype, p.q.data, q_offset_v2(p, p.q, blk.b, blk.head_of(r), int(blk.row_of(r)), 0),
                     p.q.stride[3], p.head_dim, s.q.data() + r * p.head_dim);
    }
    return block;
}

// Whether key range k meets chunk c.
bool meets_chunk(const KeyRange& k, std::int64_t c) {
    return !k.empty() && k.hi >= c * kChunk && k.lo < (c + 1) * kChunk;
}

// Chunk c of block blk (keys [c * kChunk, (c + 1) * kChunk) within `block`, the union of its
// rows' keys): the rows' state over those keys alone, in s.chunk.
void run_chunk(const attncheck_problem_v2& p, const Block& blk, Scratch& s, const KeyRange& block, std::int64_t c) {
    const std::int64_t packed = blk.packed();
    s.chunk.reset(packed, p.value_dim);
    const std::int64_t first = std::max(block.lo, c * kChunk), last = std::min(block.hi, (c + 1) * kChunk - 1);
    for (std::int64_t t0 = first / kTile * kTile; t0 <= last; t0 += kTile) {
        const std::int64_t t1 = t0 + kTile - 1;
        load_tile(p, blk.b, blk.hk, t0, std::max(t0, first), std::min(t1, last), s);
        // The rows that see keys of the tile, two at a time.
        std::int64_t pending = -1;
        for (std::int64_t r = 0; r < packed; ++r) {
            const KeyRange k = s.keys[std::size_t(r)];
            if (k.empty() || k.hi < t0 || k.lo > t1) continue;
            if (pending < 0) {
                pending = r;
                continue;
            }
            rows_tile<2>(p, blk, s, {pending, r}, t0);
            pending = -1;
        }
        if (pending >= 0) rows_tile<1>(p, blk, s, {pending}, t0);
    }
}

// Merges a chunk's state of one row (m, l, o) into the row's total (mt, lt, ot): the same
// arithmetic whether the chunk ran on this thread just before or elsewhere.
void merge_row(float& mt, float& lt, float* ot, float m, float l, const float* o, std::int64_t Dv) {
    const float M = std::max(mt, m);
    const float M_use = M == kNegInf ? 0.0f : M;
    const float a = mt == kNegInf ? 0.0f : std::exp(mt - M_use);
    const float b = m == kNegInf ? 0.0f : std::exp(m - M_use);
    lt = std::fma(l, b, lt * a);
    for (std::int64_t d = 0; d < Dv; ++d) ot[d] = std::fma(o[d], b, ot[d] * a);
    mt = M;
}

// out = o / l and lse = m + log l of every packed row of blk from s.total (0 and -inf for a
// row that sees no key).
void finalize(const attncheck_problem_v2& p, const Block& blk, const Scratch& s) {
    const std::int64_t Dv = p.value_dim;
    for (std::int64_t r = 0; r < blk.packed(); ++r) {
        const int h = blk.head_of(r), i = int(blk.row_of(r));
        const float l = s.total.l[std::size_t(r)];
        const bool any = !s.keys[std::size_t(r)].empty();
        for (std::int64_t c = 0; c < Dv; ++c)
            store_element(p.dtype, p.out.data, q_offset_v2(p, p.out, blk.b, h, i, int(c)),
                          any ? s.total.o[std::size_t(r * Dv + c)] / l : 0.0f);
        if (p.lse) p.lse[lse_offset_v2(p, blk.b, h, i)] = any ? s.total.m[std::size_t(r)] + std::log(l) : kNegInf;
    }
}

// The chunks a block's keys span: [first, last] (empty when first > last).
std::pair<std::int64_t, std::int64_t> chunks_of(const KeyRange& block) {
    if (block.empty()) return {0, -1};
    return {block.lo / kChunk, block.hi / kChunk};
}

// A whole block on one thread: its chunks in order, each merged as it ends.
void run_block(const attncheck_problem_v2& p, const Block& blk, Scratch& s) {
    const KeyRange block = prepare(p, blk, s, true);
    const std::int64_t packed = blk.packed(), Dv = p.value_dim;
    s.total.reset(packed, Dv);
    const auto [first, last] = chunks_of(block);
    for (std::int64_t c = first; c <= last; ++c) {
        run_chunk(p, blk, s, block, c);
        for (std::int64_t r = 0; r < packed; ++r)
            if (meets_chunk(s.keys[std::size_t(r)], c))
                merge_row(s.total.m[std::size_t(r)], s.total.l[std::size_t(r)], s.total.o.data() + r * Dv,
                          s.chunk.m[std::size_t(r)], s.chunk.l[std::size_t(r)], s.chunk.o.data() + r * Dv, Dv);
    }
    finalize(p, blk, s);
}

// Runs fn(scratch, n) for n < count over the OpenMP threads (dynamic schedule); false when a
// thread could not allocate its scratch (no exception may cross an OpenMP region).
template <class Fn>
bool parallel_for(const attncheck_problem_v2& p, std::int64_t packed, std::size_t count, const Fn& fn) {
    bool failed = false;
#pragma omp parallel
    {
        Scratch* s = nullptr;
        try {
            s = new Scratch(packed, p.head_dim, p.value_dim);
        } catch (...) {
#pragma omp atomic write
            failed = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (std::size_t n = 0; n < count; ++n)
            if (s) fn(*s, n);
        delete s;
    }
    return !failed;
}

int run_general(const attncheck_problem_v2& p) {
    const int G = p.q_heads / p.kv_heads;
    const std::int64_t rows = std::max(1, kPackedRows / G), packed = G * rows, Dv = p.value_dim;
    std::vector<Block> blocks;
    for (int b = 0; b < p.batch; ++b) {
        const std::int64_t Tq = q_len_of(p, b);
        // Last blocks first: under causality they are the heaviest.
        for (std::int64_t i0 = (Tq - 1) / rows * rows; i0 >= 0 && Tq > 0; i0 -= rows)
            for (int hk = 0; hk < p.kv_heads; ++hk) blocks.push_back({b, hk, G, i0, std::min(Tq, i0 + rows)});
    }
    const int threads = omp_get_max_threads();
    if (threads == 1 || blocks.size() >= std::size_t(2 * threads))
        return parallel_for(p, packed, blocks.size(), [&](Scratch& s, std::size_t n) { run_block(p, blocks[n], s); })
                   ? ATTNCHECK_OK
                   : ATTNCHECK_UNSUPPORTED;

    // Too few blocks for the threads (a decode step): every (block, chunk) is a task, whose
    // state goes to `partials`, then each block merges its chunks in order, as run_block does.
    struct Split {
        std::size_t block;
        std::int64_t chunk;
        std::size_t at;  // offset in partials: [packed rows][m, l, o[Dv]]
    };
    std::vector<Split> splits;
    std::vector<std::size_t> first_split(blocks.size() + 1);
    std::size_t size = 0;
    const std::size_t stride = std::size_t(Dv + 2);
    for (std::size_t n = 0; n < blocks.size(); ++n) {
        first_split[n] = splits.size();
        const Block& blk = blocks[n];
        const std::int64_t Tk = kv_len_of(p, blk.b), pos = p.q_pos[blk.b];
        KeyRange block{std::numeric_limits<std::int64_t>::max(), -1};
        for (std::int64_t i = blk.i0; i < blk.i1; ++i) {
            const KeyRange k = visible_keys(p, Tk, pos + i);
            if (k.empty()) continue;
            block.lo = std::min(block.lo, k.lo);
            block.hi = std::max(block.hi, k.hi);
        }
        const auto [first, last] = chunks_of(block);
        for (std::int64_t c = first; c <= last; ++c) {
            splits.push_back({n, c, size});
            size += std::size_t(blk.packed()) * stride;
        }
    }
    first_split[blocks.size()] = splits.size();
    std::vector<float> partials(size);
    const bool ran = parallel_for(p, packed, splits.size(), [&](Scratch& s, std::size_t n) {
        const Split& sp = splits[n];
        const Block& blk = blocks[sp.block];
        const KeyRange block = prepare(p, blk, s, true);
        run_chunk(p, blk, s, block, sp.chunk);
        for (std::int64_t r = 0; r < blk.packed(); ++r) {
            float* dst = partials.data() + sp.at + std::size_t(r) * stride;
            dst[0] = s.chunk.m[std::size_t(r)];
            dst[1] = s.chunk.l[std::size_t(r)];
            std::copy_n(s.chunk.o.data() + r * Dv, Dv, dst + 2);
        }
    });
    const bool merged = ran && parallel_for(p, packed, blocks.size(), [&](Scratch& s, std::size_t n) {
        const Block& blk = blocks[n];
        prepare(p, blk, s, false);
        s.total.reset(blk.packed(), Dv);
        for (std::size_t k = first_split[n]; k < first_split[n + 1]; ++k)
            for (std::int64_t r = 0; r < blk.packed(); ++r) {
                if (!meets_chunk(s.keys[std::size_t(r)], splits[k].chunk)) continue;
                const float* src = partials.data() + splits[k].at + std::size_t(r) * stride;
                merge_row(s.total.m[std::size_t(r)], s.total.l[std::size_t(r)], s.total.o.data() + r * Dv, src[0],
                          src[1], src + 2, Dv);
            }
        finalize(p, blk, s);
    });
    return merged ? ATTNCHECK_OK : ATTNCHECK_UNSUPPORTED;
}

// Products of sizes that index a tensor must fit int64 with room; the ABI's int32 fields keep
// each factor small, but B * H * T * D could still overflow in a hostile problem.
bool sizes_fit(const attncheck_problem_v2& p) {
    const unsigned __int128 limit = (unsigned __int128)INT64_MAX / 4;
    const unsigned __int128 b = unsigned(p.batch), h = unsigned(p.q_heads);
    for (const std::int32_t rows : {p.q_len, p.kv_len})
        for (const std::int32_t width : {p.head_dim, p.value_dim})
            if (b * h * unsigned(rows) * unsigned(width) > limit) return false;
    return true;
}

}  // namespace
}  // namespace attncheck::optimized::attention_v2_detail

extern "C" int attncheck_optimized_kernel_v2(const attncheck_problem_v2* p) {
    namespace detail = attncheck::optimized::attention_v2_detail;
    if (!p) return ATTNCHECK_UNSUPPORTED;
    // No exception may cross the C boundary: a failed allocation reports "unsupported".
    try {
        if (!attncheck::problem_v2_error(*p).empty() || !detail::sizes_fit(*p)) return ATTNCHECK_UNSUPPORTED;
        if (detail::v1_expressible(*p)) {
            const attncheck_problem v1 = detail::v1_problem(*p);
            return attncheck_optimized_kernel(&v1, static_cast<const float*>(p->q.data),
                                              static_cast<const float*>(p->k.data),
                                              static_cast<const float*>(p->v.data), static_cast<float*>(p->out.data));
        }
        return detail::run_general(*p);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
