// optimized/attention_kernel.cpp — the built-in fast attention kernel, attncheck_optimized_kernel.
//
// Fused masked attention with an online softmax (FlashAttention's recurrence, on a CPU):
//
//   for each query block (kQueryBlock rows) of one (sequence, head):
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
// Masking and skipping. Key j is visible to query row i when j < kv_valid_len[b] and, if
// causal, j <= q_offset + i (reference::key_visible). Rows' last visible keys are
// nondecreasing in i, so a block stops at the tile that holds the last row's last key: tiles
// past the causal diagonal and padding tiles are never read, let alone computed. Inside the
// diagonal tile, masked scores become -inf (exp gives exactly 0) and P V runs, per row, only
// over that row's visible keys, so a masked key contributes nothing, not even a 0 * v (which
// would turn an inf or NaN in a future value into NaN, or -0 into +0). A score pass or a vector
// of exps that no row of a micro-block needs is skipped (tile_scores, online_softmax): no bit
// changes, and a causal prefill of `base`'s shape (T = 512) ran 1.02-1.06x as fast (AMD EPYC
// Zen 3, alternating processes, 10 pairs).
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
// Work split (OpenMP): tasks are (sequence, head, query block), heaviest (last) blocks first,
// dynamic schedule; with several query blocks per head the key tiles are first packed once, in
// parallel, into a buffer the size of k. When there is only one query block (decode: q_len
// small), more than one chunk, and fewer than 2 (sequence, head) pairs per thread, the tasks
// are (sequence, head, chunk) instead: each packs its tiles as it goes, writes its partial to a
// scratch buffer, and a second loop merges the partials in chunk order. Keys handed over
// already in tiles (Strides::k_tiled: a Session's cache) are read where they are, and neither
// split packs them.
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

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <vector>

#include <omp.h>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernels.hpp"
#include "attncheck/problem.hpp"
#include "optimized/aligned.hpp"
#include "optimized/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimized/attention_kernel.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "optimized/attention_tile.hpp"
#include "optimized/key_tile.hpp"
#include "optimized/vec16.hpp"

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {
namespace {

// ---------------------------------------------------------------------------------------------
// One (sequence, head) of the problem.
struct Head {
    const float* q;  // [Tq, Dk]  rows q_rs floats apart
    const float* k;  // [Tk, Dk]  rows k_rs apart
    const float* v;  // [Tk, Dv]  rows v_rs apart
    float* out;      // [Tq, Dv]  rows out_rs apart
    std::int64_t q_rs, k_rs, v_rs, out_rs;
    std::int64_t valid;  // keys >= valid are padding
    std::int64_t q_i0 = 0;  // the row at q (a block's rows copied to scratch: its first)
    // Null, or this head's keys packed tile by tile in advance: [ceil(Tk/64), Dk, 64].
    const float* kt_packed = nullptr;
};

struct Shape {
    std::int64_t Tq, Tk, Dk, Dv, q_offset;
    bool causal;
    float scale;
    // Last key visible to query row i, or -1 when none.
    std::int64_t last_key(std::int64_t i) const {
        const std::int64_t last = valid_last;
        return causal ? std::min(q_offset + i, last) : last;
    }
    std::int64_t valid_last = 0;  // per head: valid - 1
};

// Per-thread scratch, grown on demand and kept between calls (a decode step allocates nothing
// once the largest shape has been seen). Sizes depend on Dk, Dv and kQueryBlock only.
// 64-byte aligned (AlignedVector), as are the packed key tiles and the copied values: malloc
// aligns to 16 bytes, so a key tile's or a value tile's row could start 16 or 48 bytes into a
// cache line, and then half of the FMA loops' 32-byte loads (every 64-byte load on AVX-512)
// cross one. See pack_all_key_tiles for what it measured.
struct Scratch {
    AlignedVector<float> kt;     // [Dk, 64]   the key tile, transposed
    AlignedVector<float> q;      // [QB, Dk]   the block's query rows, when theirs are not contiguous
    AlignedVector<float> p;      // [QB, 64]   probabilities of the block's rows for one tile
    AlignedVector<float> alpha;  // [QB]       each row's accumulator factor for the tile
    AlignedVector<int> nvis;     // [QB]       each row's keys visible in the tile (a prefix)
    AlignedVector<float> o;      // [QB, Dv]   the chunk's unnormalized accumulator
    AlignedVector<float> lvec;   // [QB, 16]   the chunk's running sums, one per key residue
    AlignedVector<float> m;      // [QB]       the chunk's running max
    AlignedVector<float> lsum;   // [QB]       the chunk's sum (lvec reduced)
    AlignedVector<float> o_tot;  // [QB, Dv]   merged accumulator over chunks
    AlignedVector<float> m_tot;  // [QB]
    AlignedVector<float> l_tot;  // [QB]
    void reserve(std::int64_t Dk, std::int64_t Dv) {
        const std::size_t qb = kQueryBlock, dk = std::size_t(Dk), dv = std::size_t(Dv);
        if (kt.size() < dk * kTileKeys) kt.resize(dk * kTileKeys);
        if (q.size() < qb * dk) q.resize(qb * dk);
        if (p.size() < qb * kTileKeys) p.resize(qb * kTileKeys);
        if (alpha.size() < qb) alpha.resize(qb);
        if (nvis.size() < qb) nvis.resize(qb);
        if (o.size() < qb * dv) o.resize(qb * dv);
        if (o_tot.size() < qb * dv) o_tot.resize(qb * dv);
        if (lvec.size() < qb * kLanes) lvec.resize(qb * kLanes);
        for (auto* s : {&m, &lsum, &m_tot, &l_tot})
            if (s->size() < qb) s->resize(qb);
    }
};
thread_local Scratch t_scratch;

// Sizes the calling thread's scratch. Called by every thread of a team at the start of a
// parallel region, whether or not the schedule then hands it a task, so that a later call (a
// decode step) allocates on no thread. False, with failed set, when the allocation fails (no
// exception may cross an OpenMP region).
bool reserve_thread_scratch(std::int64_t Dk, std::int64_t Dv, bool& failed) {
    try {
        t_scratch.reserve(Dk, Dv);
        return true;
    } catch (...) {
#pragma omp atomic write
        failed = true;
        return false;
    }
}

// The scores of one micro-block of R query rows (block-local indices lr0 .. lr0+R-1, absolute
// row i0 + lr) against one key tile [t0, t0 + nk) and their online softmax update: the rows'
// probabilities go to s.p (row lr at s.p + lr * 64), their accumulator factors to s.alpha and
// their visible keys to s.nvis, for tile_pv. The R x 4 score accumulators stay in registers
// from the FMA chain to the softmax (tile_scores and online_softmax are inlined here).
template <int R>
void tile_softmax(const Head& hd, const Shape& sh, std::int64_t i0, int lr0, std::int64_t t0, int nk,
                  const float* kt, Scratch& s) {
    int* nvis = s.nvis.data() + lr0;
    int end = 0, lo[R] = {};
    for (int r = 0; r < R; ++r) {
        nvis[r] = int(std::clamp<std::int64_t>(sh.last_key(i0 + lr0 + r) - t0 + 1, 0, nk));
        end = std::max(end, nvis[r]);
    }
    vf acc[R][kTileVecs];
    tile_scores<R>(hd.q + (i0 + lr0 - hd.q_i0) * hd.q_rs, hd.q_rs, sh.Dk, kt, acc, 0, end);
    float mx[R];
    for (int r = 0; r < R; ++r) {
        vf vmx = vset1(kNegInf);
        for (int u = 0; u < kTileVecs; ++u) {
            acc[r][u] = vmul(acc[r][u], vset1(sh.scale));
            // Only a vector the row does not see in full is masked: every vector off the diagonal
            // tile is seen in full. Causal T = 2048: 1.01-1.02x as fast (AMD EPYC Zen 3, in-process
            // alternation, 15-20 rounds).
            if (nvis[r] < (u + 1) * kLanes) acc[r][u] = vmask_after(acc[r][u], nvis[r] - u * kLanes);
            vmx = vmax(vmx, acc[r][u]);
        }
        mx[r] = vreduce_max(vmx);
    }
    online_softmax<R>(acc, mx, s.m.data() + lr0, s.lvec.data() + std::size_t(lr0) * kLanes,
                      s.p.data() + std::size_t(lr0) * kTileKeys, s.alpha.data() + lr0, lo, nvis);
}

// O = O * alpha + P V for the micro-block's rows (after tile_softmax) over the output columns
// [dv0, dv0 + cols). Keys every row of the micro-block sees go through the R-row kernel; the
// few keys in the causal diagonal that only later rows see are added row by row, so no masked
// key is ever multiplied in. (Skipping O * alpha where every row's alpha is exactly 1, a
// bitwise no-op, measured 1.00-1.02x the time: AMD EPYC Zen 3, in-process alternation.)
template <int R>
void tile_pv(const Head& hd, const Shape& sh, int lr0, std::int64_t t0, std::int64_t dv0, int cols, Scratch& s) {
    const std::int64_t Dv = sh.Dv;
    const int* nvis = s.nvis.data() + lr0;
    int j_all = kTileKeys;
    for (int r = 0; r < R; ++r) j_all = std::min(j_all, nvis[r]);
    float* o_rows[R];
    const float* p_rows[R];
    for (int r = 0; r < R; ++r) {
        o_rows[r] = s.o.data() + std::size_t(lr0 + r) * std::size_t(Dv);
        p_rows[r] = s.p.data() + std::size_t(lr0 + r) * kTileKeys;
    }
    const float* alpha = s.alpha.data() + lr0;
    const float* vt = hd.v + t0 * hd.v_rs;
    const int nv = (cols + kLanes - 1) / kLanes;
    const int last_n = cols - (nv - 1) * kLanes;
    pv_dispatch<R>(nv, o_rows, alpha, true, p_rows, vt, hd.v_rs, dv0, last_n, 0, j_all);
    for (int r = 0; r < R; ++r)
        if (nvis[r] > j_all)
            pv_dispatch<1>(nv, &o_rows[r], &alpha[r], false, &p_rows[r], vt, hd.v_rs, dv0, last_n, j_all, nvis[r]);
}

// The partial of one chunk for block rows [0, nr) (absolute rows i0 ..): fills s.o, s.m, s.lsum.
void process_chunk(const Head& hd, const Shape& sh, std::int64_t i0, int nr, std::int64_t chunk,
                   Scratch& s) {
    const std::size_t Dv = std::size_t(sh.Dv);
    std::fill(s.o.begin(), s.o.begin() + std::ptrdiff_t(std::size_t(nr) * Dv), 0.0f);
    std::fill(s.lvec.begin(), s.lvec.begin() + std::ptrdiff_t(std::size_t(nr) * kLanes), 0.0f);
    std::fill(s.m.begin(), s.m.begin() + nr, kNegInf);
    const std::int64_t block_last = sh.last_key(i0 + nr - 1);  // the largest of the block
    const std::int64_t c_begin = chunk * kChunkKeys;
    const std::int64_t c_end = std::min<std::int64_t>(c_begin + kChunkKeys, block_last + 1);
    for (std::int64_t t0 = c_begin; t0 < c_end; t0 += kTileKeys) {
        const int nk = int(std::min<std::int64_t>(kTileKeys, c_end - t0));
        // A prepacked tile may hold keys past the block's last one (real keys of later rows):
        // their lanes are replaced by -inf before any arithmetic, so the bits are the same.
        const float* kt = hd.kt_packed ? hd.kt_packed + (t0 / kTileKeys) * sh.Dk * kTileKeys
                                       : s.kt.data();
        // A single query block (a decode step) reads each key and value once, straight from
        // memory, tile after tile in address order: the hardware's stream prefetchers follow
        // that. A software prefetch of the whole next tile (512 lines of K and V) made the step
        // slower: kernel decode at kv 4096, alternating calls, 0.79x with K/V in the L3 and 0.90x
        // streaming 670 MB from DRAM; the `base` decode step at ctx 1024 0.94x (Xeon, AVX-512).
        // pack_key_tile prefetches one block of keys ahead instead (16 on AVX-512, 8 on AVX2),
        // into the next tile up to c_end, the end of what this chunk reads.
        if (!hd.kt_packed)
            pack_key_tile(hd.k, hd.k_rs, sh.Dk, t0, nk, int(std::min<std::int64_t>(kTileKeys, c_end - t0 - nk)),
                          s.kt.data());
        for_micro_blocks(
            nr, sh.Dv, [&](std::int64_t lr0, int R) { return sh.last_key(i0 + lr0 + R - 1) >= t0; },
            [&]<int R>(int lr0) { tile_softmax<R>(hd, sh, i0, lr0, t0, nk, kt, s); },
            [&]<int R>(int lr0, std::int64_t dv0, int cols) { tile_pv<R>(hd, sh, lr0, t0, dv0, cols, s); });
    }
    for (int r = 0; r < nr; ++r) s.lsum[r] = vreduce_add(vload(s.lvec.data() + std::size_t(r) * kLanes));
}

std::int64_t chunks_for(std::int64_t last_key) {  // chunks that hold keys 0 .. last_key
    return last_key < 0 ? 0 : last_key / kChunkKeys + 1;
}

// Scratch for the split decode path's partials, on the calling thread: [tasks, rows, Dv + 2].
thread_local AlignedVector<float> t_partials;
// Key tiles packed up front for a multi-block prefill, on the calling thread: [B*H, tiles, Dk, 64]
// (the size of k itself; nothing proportional to Tq * Tk).
thread_local AlignedVector<float> t_packed;
// The values of such a prefill, when their rows are not contiguous or do not start on cache
// lines: [B*H, Tk, Dv].
thread_local AlignedVector<float> t_values;

// One call of the kernel: its problem, its tensors and the sizes every work split uses.
struct Call {
    const attncheck_problem& p;
    const float* q;
    const float* k;
    const float* v;
    float* out;
    const Strides& st;
    Shape base;                  // valid_last not set: per head, see head_at()
    std::int64_t B, H;
    std::int64_t n_qblocks;      // query blocks per (sequence, head)
    std::int64_t n_chunks_max;   // key chunks of kv_len

    Call(const attncheck_problem& p_, const Strides& st_, const float* q_, const float* k_, const float* v_,
         float* out_)
        : p(p_), q(q_), k(k_), v(v_), out(out_), st(st_),
          base{p_.q_len, p_.kv_len, p_.head_dim, p_.value_dim, p_.q_offset, p_.causal != 0, p_.scale},
          B(p_.batch), H(p_.heads), n_qblocks((base.Tq + kQueryBlock - 1) / kQueryBlock),
          n_chunks_max((base.Tk + kChunkKeys - 1) / kChunkKeys) {}

    // Offset of (sequence, head) number bh in a view of strides s (one of st's).
    std::int64_t head_offset(const std::int64_t (&s)[3], std::int64_t bh) const {
        return bh / H * s[0] + bh % H * s[1];
    }
    // Keys of sequence b that are not padding.
    std::int64_t valid(std::int64_t b) const { return p.kv_valid_len ? p.kv_valid_len[b] : base.Tk; }
    // (sequence, head) number bh: its tensors, and its shape in sh.
    Head head_at(std::int64_t bh, Shape& sh) const {
        Head hd{q + head_offset(st.q, bh), k + head_offset(st.k, bh), v + head_offset(st.v, bh),
                out + head_offset(st.out, bh), st.q[2], st.k[2], st.v[2], st.out[2], valid(bh / H)};
        if (st.k_tiled) hd.kt_packed = hd.k;
        sh = base;
        sh.valid_last = hd.valid - 1;
        return hd;
    }
};

// Runs task(t, scratch) for t in [0, n) on an OpenMP team. Every thread of the team sizes its
// scratch first (reserve_thread_scratch), whether or not the schedule then hands it a task; a
// thread whose allocation failed sets `failed` and runs no task. Dynamic: one task at a time,
// for tasks of uneven cost; otherwise a static schedule.
template <bool Dynamic, class Task>
void for_each_task(std::int64_t n, const Shape& base, bool& failed, Task&& task) {
#pragma omp parallel
    {
        const bool ready = reserve_thread_scratch(base.Dk, base.Dv, failed);
        if constexpr (Dynamic) {
#pragma omp for schedule(dynamic, 1)
            for (std::int64_t t = 0; t < n; ++t)
                if (ready) task(t, t_scratch);
        } else {
#pragma omp for schedule(static)
            for (std::int64_t t = 0; t < n; ++t)
                if (ready) task(t, t_scratch);
        }
    }  // omp parallel
}

// The running (m, l, o) of rows [0, nr) before their first chunk: nothing seen.
void reset_totals(Scratch& s, int nr, std::size_t Dv) {
    std::fill(s.o_tot.begin(), s.o_tot.begin() + std::ptrdiff_t(std::size_t(nr) * Dv), 0.0f);
    std::fill(s.m_tot.begin(), s.m_tot.begin() + nr, kNegInf);
    std::fill(s.l_tot.begin(), s.l_tot.begin() + nr, 0.0f);
}

// Merges one chunk's partials of rows [0, nr) (max m_c [nr], sum l_c [nr], accumulator
// o_c [nr, Dv]) into the running totals of s.
void merge_rows(Scratch& s, int nr, const float* m_c, const float* l_c, const float* o_c, std::size_t Dv) {
    for (int r = 0; r < nr; ++r)
        merge_partial(m_c[r], l_c[r], o_c + std::size_t(r) * Dv, s.m_tot[std::size_t(r)], s.l_tot[std::size_t(r)],
                      s.o_tot.data() + std::size_t(r) * Dv, std::int64_t(Dv));
}

// out [nr, Dv] (rows out_rs floats apart) = the running totals of rows [0, nr), normalized.
void finalize_rows(const Scratch& s, int nr, float* out, std::int64_t out_rs, std::size_t Dv) {
    for (int r = 0; r < nr; ++r)
        finalize_row(s.o_tot.data() + std::size_t(r) * Dv, s.l_tot[std::size_t(r)], out + r * out_rs,
                     std::int64_t(Dv));
}

// Whether every row of a view at base (strides st, in floats) starts on a cache line.
bool lines_aligned(const float* base, const std::int64_t (&st)[3]) {
    constexpr std::int64_t kLine = std::int64_t(kCacheLineBytes / sizeof(float));
    return reinterpret_cast<std::uintptr_t>(base) % kCacheLineBytes == 0 && st[0] % kLine == 0 &&
           st[1] % kLine == 0 && st[2] % kLine == 0;
}

// With several query blocks per head every key tile is used by several tasks: packs each once,
// up front, into t_packed [B*H, n_tiles, Dk, 64] (packing is a transpose, about as costly as a
// sixth of a tile's arithmetic for one 64-row block). Values are copied beside them into
// t_values [B*H, Tk, Dv] (values null otherwise) unless their rows are contiguous and every
// row starts on a cache line (lines_aligned), and a task copies its block's query rows
// (run_query_blocks).
// - Rows far apart (a decoder's [T, 3d] rows are 6 KiB apart in `base`) fall into few sets of
//   the L1, which then cannot keep a tile's values or a block's rows while every micro-block
//   reads them. A `base` prefill (T = 512) reading both in place was 0.98-1.00x as fast as one
//   through copies of q, k, v and out; with these two copies 1.01-1.02x (AMD EPYC Zen 3,
//   in-process alternation, 9 pairs).
// - Values whose rows do not start on a cache line (a std::vector's data is 16-byte aligned)
//   make half of the P V loop's 32-byte loads cross a line. The kernel on 8 heads, Dk = Dv =
//   64, causal T = 512 and 2048, 1 and 2 threads (AMD EPYC Zen 3, in-process alternation, 12
//   rounds): values 16 bytes off a line took 1.03-1.08x the time of aligned ones read in place,
//   and 1.01-1.03x copied here. Aligning the scratch and the packed tiles (with values
//   aligned) made it 1.02-1.11x as fast (alternating processes, 8 pairs each).
// The copy reads Tk x Dv floats per head, against the Tq x Tk x (Dk + Dv) FMAs of at least
// two query blocks. May throw (caught by the caller).
float* pack_all_key_tiles(const Call& c, std::int64_t n_tiles, std::size_t tile_floats, float*& values) {
    // Keys already tiled (Strides::k_tiled) are read where they are: only the values may move.
    const bool keys = !c.st.k_tiled;
    if (keys) t_packed.resize(std::size_t(c.B * c.H * n_tiles) * tile_floats);
    float* packed = keys ? t_packed.data() : nullptr;
    const std::int64_t Dv = c.base.Dv, v_rs = c.st.v[2];
    values = nullptr;
    if (v_rs != Dv || !lines_aligned(c.v, c.st.v)) {
        t_values.resize(std::size_t(c.B * c.H * c.base.Tk * Dv));
        values = t_values.data();
    }
    if (!keys && !values) return nullptr;
#pragma omp parallel for schedule(static)
    for (std::int64_t t = 0; t < c.B * c.H * n_tiles; ++t) {
        const std::int64_t bh = t / n_tiles, t0 = (t % n_tiles) * kTileKeys;
        // Keys past the last row's last visible key (padding, or the future of a causal call)
        // are never used: don't read them.
        const std::int64_t valid = c.valid(bh / c.H);
        const std::int64_t used = c.base.causal ? std::min(valid, c.base.q_offset + c.base.Tq) : valid;
        const int nk = int(std::clamp<std::int64_t>(used - t0, 0, kTileKeys));
        if (nk <= 0) continue;  // a tile of padding only is never used
        if (keys)
            pack_key_tile(c.k + c.head_offset(c.st.k, bh), c.st.k[2], c.base.Dk, t0, nk,
                          int(std::clamp<std::int64_t>(used - t0 - nk, 0, kTileKeys)),
                          packed + std::size_t(t) * tile_floats);
        if (!values) continue;
        const float* src = c.v + c.head_offset(c.st.v, bh);
        float* dst = values + (bh * c.base.Tk + t0) * Dv;
        for (std::int64_t j = 0; j < nk; ++j) std::copy_n(src + (t0 + j) * v_rs, Dv, dst + j * Dv);
    }
    return packed;
}

// Tasks (sequence, head, query block), each walking its chunks in order on one thread.
int run_query_blocks(const Call& c) {
    const std::int64_t n_tiles = (c.base.Tk + kTileKeys - 1) / kTileKeys;
    const std::size_t tile_floats = std::size_t(c.base.Dk) * kTileKeys;
    float* values = nullptr;
    float* packed = c.n_qblocks > 1 ? pack_all_key_tiles(c, n_tiles, tile_floats, values) : nullptr;
    const std::int64_t tasks = c.B * c.H * c.n_qblocks;
    bool failed = false;  // an allocation failed on some thread (no exception crosses OpenMP)
    for_each_task<true>(tasks, c.base, failed, [&](std::int64_t t, Scratch& s) {
        const std::int64_t bh = t / c.n_qblocks;
        const std::int64_t qb = c.n_qblocks - 1 - t % c.n_qblocks;  // long causal blocks first
        Shape sh;
        Head hd = c.head_at(bh, sh);
        // Else the caller's tiles (Strides::k_tiled, set by head_at), or none: packed per tile.
        if (packed) hd.kt_packed = packed + std::size_t(bh * n_tiles) * tile_floats;
        if (values) {
            hd.v = values + bh * sh.Tk * sh.Dv;
            hd.v_rs = sh.Dv;
        }
        const std::int64_t i0 = qb * kQueryBlock;
        const int nr = int(std::min<std::int64_t>(kQueryBlock, sh.Tq - i0));
        if (hd.q_rs != sh.Dk) {  // the block's rows side by side (see pack_all_key_tiles)
            for (int r = 0; r < nr; ++r)
                std::copy_n(hd.q + (i0 + r) * hd.q_rs, sh.Dk, s.q.data() + std::size_t(r) * std::size_t(sh.Dk));
            hd.q = s.q.data();
            hd.q_rs = sh.Dk;
            hd.q_i0 = i0;
        }
        const std::size_t Dv = std::size_t(sh.Dv);
        reset_totals(s, nr, Dv);
        const std::int64_t nch = chunks_for(sh.last_key(i0 + nr - 1));
        for (std::int64_t ch = 0; ch < nch; ++ch) {
            process_chunk(hd, sh, i0, nr, ch, s);
            merge_rows(s, nr, s.m.data(), s.lsum.data(), s.o.data(), Dv);
        }
        finalize_rows(s, nr, hd.out + i0 * hd.out_rs, hd.out_rs, Dv);
    });
    return failed ? ATTNCHECK_UNSUPPORTED : ATTNCHECK_OK;
}

// One query block (all Tq rows), its chunks across threads: tasks (sequence, head, chunk) write
// partials, then a second loop merges each head's partials in chunk order. Partial layout per
// task: [nr, Dv] accumulator, then [nr] max, then [nr] sum. May throw (caught by the caller).
int run_split_chunks(const Call& c) {
    const int nr = int(c.base.Tq);
    const std::size_t Dv = std::size_t(c.base.Dv);
    const std::size_t per_task = std::size_t(nr) * (Dv + 2);
    const std::int64_t tasks = c.B * c.H * c.n_chunks_max;
    t_partials.resize(std::size_t(tasks) * per_task);
    float* partials = t_partials.data();
    bool failed = false;  // an allocation failed on some thread (no exception crosses OpenMP)
    for_each_task<true>(tasks, c.base, failed, [&](std::int64_t t, Scratch& s) {
        const std::int64_t bh = t / c.n_chunks_max, ch = t % c.n_chunks_max;
        Shape sh;
        const Head hd = c.head_at(bh, sh);
        float* part = partials + std::size_t(t) * per_task;
        if (ch < chunks_for(sh.last_key(nr - 1))) {
            process_chunk(hd, sh, 0, nr, ch, s);
            std::copy(s.o.begin(), s.o.begin() + std::ptrdiff_t(std::size_t(nr) * Dv), part);
            std::copy(s.m.begin(), s.m.begin() + nr, part + std::size_t(nr) * Dv);
            std::copy(s.lsum.begin(), s.lsum.begin() + nr, part + std::size_t(nr) * Dv + std::size_t(nr));
        } else {  // past every row's last key: an empty partial
            std::fill(part + std::size_t(nr) * Dv, part + std::size_t(nr) * Dv + std::size_t(nr), kNegInf);
        }
    });
    if (failed) return ATTNCHECK_UNSUPPORTED;
    for_each_task<false>(c.B * c.H, c.base, failed, [&](std::int64_t bh, Scratch& s) {
        Shape sh;
        const Head hd = c.head_at(bh, sh);
        reset_totals(s, nr, Dv);
        for (std::int64_t ch = 0; ch < c.n_chunks_max; ++ch) {
            const float* part = partials + std::size_t(bh * c.n_chunks_max + ch) * per_task;
            merge_rows(s, nr, part + std::size_t(nr) * Dv, part + std::size_t(nr) * Dv + std::size_t(nr), part, Dv);
        }
        finalize_rows(s, nr, hd.out, hd.out_rs, Dv);
    });
    return failed ? ATTNCHECK_UNSUPPORTED : ATTNCHECK_OK;
}

}  // namespace

// This target's kernel, on a problem already validated (may throw std::bad_alloc).
int run_target(const attncheck_problem& p, const Strides& st, const float* q, const float* k, const float* v,
               float* out) {
    const Call c(p, st, q, k, v, out);
    // Split the keys of a single query block across threads only when there are too few
    // (sequence, head) tasks to keep the threads busy: splitting costs a second OpenMP region
    // (the merge) and its wake-ups, which a decode step over 8 heads on 2 threads does not need.
    // Either way the bits are the same (see the determinism note at the top).
    const std::int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const bool split = c.n_qblocks == 1 && c.n_chunks_max > 1 && c.B * c.H < 2 * threads;
    return split ? run_split_chunks(c) : run_query_blocks(c);
}

void exp_nonpositive_target(const float* x, float* y, std::size_t n) {
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) vstore(y + i, vexp(vload(x + i)));
    if (i < n) vstore_n(y + i, vexp(vload_n(x + i, int(n - i))), int(n - i));
}

}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attncheck::optimized::attention_detail {

HWY_EXPORT(run_target);
HWY_EXPORT(exp_nonpositive_target);

void exp_nonpositive(const float* x, float* y, std::size_t n) {
    isa_choice();  // ATTNCHECK_ISA is applied before the first dispatch
    HWY_DYNAMIC_DISPATCH(exp_nonpositive_target)(x, y, n);
}

int run_v1(const attncheck_problem& p, const Strides& st, const float* q, const float* k, const float* v, float* out) {
    isa_choice();
    return HWY_DYNAMIC_DISPATCH(run_target)(p, st, q, k, v, out);
}

}  // namespace attncheck::optimized::attention_detail
#endif  // HWY_ONCE
