// optimized/gemm.cpp — the register-blocked micro-kernel, the GEMM and GEMV drivers, per
// instruction set (packing and the tile plan: gemm_pack.cpp).
//
// See gemm.hpp for the layout and the determinism argument. One micro-kernel template,
// tile<MR, NP>, computes MR rows x NP panels (NP*32 columns) over a slice of the reduction:
// the GEMM uses tile<12, 1> on packed x, the GEMV uses tile<m, NP> with several panels at once
// directly on the row-major x (NP*2*m independent FMA chains hide the FMA latency while the
// weights stream from memory). Compiled once per target of simd_targets.hpp (Highway's
// foreach_target.h) and dispatched at run time: AVX-512 intrinsics, Highway vectors of 8 floats
// on AVX2 (tiles split into row groups that fit 16 registers: tile_rows), or scalar std::fma.
// Every path makes the same FMAs in the same order, so all give the same bits.
// g++ 12's AVX-512 headers initialise "undefined" vectors from themselves, which
// -Wuninitialized reports; the pragma must precede the first include of <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "optimized/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <new>

#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // AVX-512 for the avx512 tiles
#endif

#include "optimized/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimized/gemm.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::HWY_NAMESPACE {
namespace {

using gemm_detail::pack_micro_panel;
using gemm_detail::pack_x_unit;
using gemm_detail::thread_scratch;

// Where a tile's accumulators come from and go to. Before the last K block the exact partial
// sums go to c_out (a scratch tile) and come back through c_in; in the last block the epilogue
// (bias, ReLU, residual) is applied in registers on the way to y.
struct TileIO {
    const float* c_in = nullptr;  // partial sums to continue from, or null (start at 0)
    std::ptrdiff_t ld_in = 0;
    float* c_out = nullptr;
    std::ptrdiff_t ld_out = 0;
    const float* bias = nullptr;      // final block only: bias of the tile's first column
    const float* residual = nullptr;  // final block only
    std::ptrdiff_t ld_res = 0;
    bool relu = false;  // final block only
    int m_valid = 0;    // rows to load/store (<= MR)
    int n_valid = 0;    // columns to load/store (<= NP*32)
};

#if HWY_TARGET <= HWY_AVX3

inline __mmask16 column_mask(int n_valid, int vec) {
    const int v = std::clamp(n_valid - 16 * vec, 0, 16);
    return __mmask16((1u << v) - 1u);
}

// acc[r][j] += sum_{k < kc} a(r, k) * b_panel(j / 2)[k][16 * (j % 2) ..]
//   a(r, k) = a[r * a_rs + k * a_ks]; panel p of b starts at b + p * b_ps, rows of 32 floats.
template <int MR, int NP, bool Unroll = false>
void tile(int kc, const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_ks, const float* b,
          std::ptrdiff_t b_ps, const TileIO& io) {
    constexpr int NV = 2 * NP;  // 16-float vectors per row
    __m512 acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_ps();
    // Loops over r always run to the compile-time MR (with a test inside) so that acc stays in
    // registers: a runtime bound would force the array to the stack.
    if (io.c_in) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
            if (r < io.m_valid)
#pragma GCC unroll 16
                for (int j = 0; j < NV; ++j)
                    acc[r][j] = _mm512_maskz_loadu_ps(column_mask(io.n_valid, j),
                                                      io.c_in + r * io.ld_in + 16 * j);
    }
    // One step of the reduction: row k of each panel, a broadcast of a(r, k) per row, MR x NV
    // FMAs.
    const auto step = [&](int k) __attribute__((always_inline)) {
        __m512 bv[NV];
#pragma GCC unroll 16
        for (int p = 0; p < NP; ++p) {
            bv[2 * p] = _mm512_loadu_ps(b + p * b_ps + std::ptrdiff_t(k) * kNR);
            bv[2 * p + 1] = _mm512_loadu_ps(b + p * b_ps + std::ptrdiff_t(k) * kNR + 16);
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const __m512 av = _mm512_set1_ps(a[r * a_rs + k * a_ks]);
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
        }
    };
    // The GEMM's tiles (Unroll) unroll the K loop 8 times. In-process alternation against the
    // loop as written, `base` linear products of 512 rows: on an AMD EPYC Zen 3 (AVX2) 1.03-1.14x
    // on 1 and 2 threads and the prefill 1.01-1.06x; on an Emerald Rapids Xeon 1.00-1.02x on
    // avx512 (prefill 1.04-1.05x) and 1.01-1.08x on avx2. The GEMV's tiles (K up to the model's
    // width, the weights streaming from memory) keep the loop.
    if constexpr (Unroll) {
#pragma GCC unroll 8
        for (int k = 0; k < kc; ++k) step(k);
    } else {
        for (int k = 0; k < kc; ++k) step(k);
    }
    __mmask16 masks[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) masks[j] = column_mask(io.n_valid, j);
    if (io.bias) {
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) {
            const __m512 bj = _mm512_maskz_loadu_ps(masks[j], io.bias + 16 * j);
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) acc[r][j] = _mm512_add_ps(acc[r][j], bj);
        }
    }
    if (io.relu)
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_max_ps(acc[r][j], _mm512_setzero_ps());
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
        if (r < io.m_valid)
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) {
                __m512 v = acc[r][j];
                if (io.residual)
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(masks[j], io.residual + r * io.ld_res + 16 * j));
                _mm512_mask_storeu_ps(io.c_out + r * io.ld_out + 16 * j, masks[j], v);
            }
}

#elif HWY_TARGET == HWY_AVX2

namespace hn = hwy::HWY_NAMESPACE;

// The same tile in Highway vectors of L = 8 floats (a panel row is kNR / L = 4 of them): the
// same FMAs in the same order, so the same bits as the AVX-512 tile. NC < kNR: a tile of NC
// columns inside one panel, b pointing at its first column in the panel's row 0.
template <int MR, int NP, bool Unroll = false, int NC = NP * kNR>
void tile(int kc, const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_ks, const float* b,
          std::ptrdiff_t b_ps, const TileIO& io) {
    const hn::ScalableTag<float> d;
    using V = hn::Vec<decltype(d)>;
    constexpr int L = int(hn::MaxLanes(d));
    constexpr int NV = NC / L;  // vectors per tile row
    // Panel vectors are kept in registers when they fit beside the accumulators (g++ would
    // otherwise fold their loads into the FMAs and load each one MR times).
    constexpr bool pin = MR > 1 && MR * NV + NV + 1 <= 16;
    const auto mask = [&](int j) { return hn::FirstN(d, std::size_t(std::clamp(io.n_valid - L * j, 0, L))); };
    // Full-width tiles load and store whole vectors: AVX2's masked store (vmaskmovps) is
    // microcoded on AMD Zen, many times the cost of a plain store, and a tile stores MR * NV
    // vectors per K block. Only a product's last, partial panel takes the masked forms.
    const bool full = io.n_valid >= NC;
    const auto load = [&](int j, const float* p) { return full ? hn::LoadU(d, p) : hn::MaskedLoad(mask(j), d, p); };
    const auto store = [&](V v, int j, float* p) {
        if (full)
            hn::StoreU(v, d, p);
        else
            hn::BlendedStore(v, mask(j), d, p);
    };
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) acc[r][j] = hn::Zero(d);
    if (io.c_in) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
            if (r < io.m_valid)
#pragma GCC unroll 16
                for (int j = 0; j < NV; ++j) acc[r][j] = load(j, io.c_in + r * io.ld_in + L * j);
    }
    const auto step = [&](int k) __attribute__((always_inline)) {
        V bv[NV];
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) {
            auto raw = hn::LoadU(d, b + (j * L / kNR) * b_ps + std::ptrdiff_t(k) * kNR + (j * L) % kNR).raw;
            if constexpr (pin) asm("" : "+x"(raw));
            bv[j].raw = raw;
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const V av = hn::Set(d, a[r * a_rs + k * a_ks]);
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) acc[r][j] = hn::MulAdd(av, bv[j], acc[r][j]);
        }
    };
    if constexpr (Unroll) {  // as in the AVX-512 tile
#pragma GCC unroll 8
        for (int k = 0; k < kc; ++k) step(k);
    } else {
        for (int k = 0; k < kc; ++k) step(k);
    }
    if (io.bias) {
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) {
            const V bj = load(j, io.bias + L * j);
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) acc[r][j] = hn::Add(acc[r][j], bj);
        }
    }
    if (io.relu)
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) acc[r][j] = hn::Max(acc[r][j], hn::Zero(d));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
        if (r < io.m_valid)
#pragma GCC unroll 16
            for (int j = 0; j < NV; ++j) {
                V v = acc[r][j];
                if (io.residual) v = hn::Add(v, load(j, io.residual + r * io.ld_res + L * j));
                store(v, j, io.c_out + r * io.ld_out + L * j);
            }
}

// The GEMM's micro-panel (MR = 12 rows x one 32-column panel) as 6 x 16 tiles, the classic
// AVX2 shape: 12 accumulators, 2 panel vectors and a broadcast in the 16 registers, 8 loads per
// 12 FMAs. The same FMAs per element as one 12 x 32 tile, so the same bits.
// Tried on an AMD EPYC Zen 3 and dropped (K blocks of 512, `base` products of 512 rows):
//   - panels stored as two contiguous strips [K, 16], so that a tile reads one stream of whole
//     lines rather than every other line of 128-byte rows: 1.06-1.10x in a microbenchmark of
//     this loop alone (micro-panel in L2, in-process alternation), but 0.98-1.00x in BM_Linear
//     and BM_Prefill on 1 thread (alternating processes, 6-8 pairs; 0.88-1.02x on 2, noisier);
//   - the micro-panel in K chunks of 128 or 256, its partial sums in an L1 buffer between
//     chunks, so that its four tiles read each chunk of weights from L1 (row halves outer, or
//     column halves outer so that a strip's chunk is reused at once): 0.89-0.99x in-process;
//   - an L1 prefetch of the weight row 8, 16 or 32 steps ahead: 0.91-0.98x in-process.
template <int MR, bool Unroll>
void tile_6x16(int kc, const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_ks, const float* b,
               std::ptrdiff_t b_ps, const TileIO& io) {
    for (int r0 = 0; r0 < MR && r0 < io.m_valid; r0 += 6)
        for (int c0 = 0; c0 < kNR && c0 < io.n_valid; c0 += 16) {
            TileIO t = io;
            t.m_valid = std::min(6, io.m_valid - r0);
            t.n_valid = std::min(16, io.n_valid - c0);
            if (t.c_in) t.c_in += r0 * io.ld_in + c0;
            t.c_out += r0 * io.ld_out + c0;
            if (t.bias) t.bias += c0;
            if (t.residual) t.residual += r0 * io.ld_res + c0;
            tile<6, 1, Unroll, 16>(kc, a + r0 * a_rs, a_rs, a_ks, b + c0, b_ps, t);
        }
}

#else  // scalar: the same order of operations with std::fma

template <int MR, int NP, bool Unroll = false>  // Unroll: a hint of the vector tiles only
void tile(int kc, const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_ks, const float* b,
          std::ptrdiff_t b_ps, const TileIO& io) {
    constexpr int NC = NP * kNR;
    float acc[MR][NC] = {};
    // m_valid <= MR and n_valid <= NC always; the bounds say so to the compiler too (g++ 12
    // otherwise warns of the copy below past acc in tile<1, 1>).
    const int m_valid = std::min(io.m_valid, MR), n_valid = std::min(io.n_valid, NC);
    if (io.c_in)
        for (int r = 0; r < m_valid; ++r)
            for (int j = 0; j < n_valid; ++j) acc[r][j] = io.c_in[r * io.ld_in + j];
    for (int k = 0; k < kc; ++k)
        for (int r = 0; r < MR; ++r) {
            const float av = a[r * a_rs + k * a_ks];
            for (int j = 0; j < NC; ++j)
                acc[r][j] = std::fma(av, b[(j / kNR) * b_ps + std::ptrdiff_t(k) * kNR + j % kNR], acc[r][j]);
        }
    for (int r = 0; r < m_valid; ++r)
        for (int j = 0; j < n_valid; ++j) {
            float v = acc[r][j];
            if (io.bias) v += io.bias[j];
            if (io.relu) v = v > 0.0f ? v : 0.0f;
            if (io.residual) v += io.residual[r * io.ld_res + j];
            io.c_out[r * io.ld_out + j] = v;
        }
}

#endif

// Accumulators a tile may hold in registers on this target (of 32 AVX-512 registers, of 16 AVX2
// ones, leaving room for the panel row and the broadcast), in 16- or 8-float vectors.
#if HWY_TARGET <= HWY_AVX3
constexpr int kMaxAccumulators = 24, kVectorFloats = 16;
#elif HWY_TARGET == HWY_AVX2
constexpr int kMaxAccumulators = 12, kVectorFloats = 8;
#else
constexpr int kMaxAccumulators = 1 << 20, kVectorFloats = 1;  // plain arrays: no register limit
#endif

// tile<MR, NP> in row groups that fit the registers: rows [0, MR) of a (and of io's c_in, c_out,
// residual) as tile<R, NP> calls of at most kMaxAccumulators / (NP * kNR / kVectorFloats) rows.
// Every output element still gets the same FMAs in the same order, so the split changes no bit.
// Unroll: the K loop unrolled (the GEMM's tiles; see the AVX-512 tile).
template <int MR, int NP, bool Unroll = false>
void tile_rows(int kc, const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_ks, const float* b,
               std::ptrdiff_t b_ps, const TileIO& io) {
    constexpr int per = std::max(1, kMaxAccumulators / (NP * kNR / kVectorFloats));
#if HWY_TARGET == HWY_AVX2
    if constexpr (NP == 1 && MR % 6 == 0) {  // the GEMM's micro-panels (a is packed and padded)
        tile_6x16<MR, Unroll>(kc, a, a_rs, a_ks, b, b_ps, io);
        return;
    }
#endif
    if constexpr (MR <= per) {
        tile<MR, NP, Unroll>(kc, a, a_rs, a_ks, b, b_ps, io);
    } else {
        TileIO first = io;
        first.m_valid = std::min(io.m_valid, per);
        tile<per, NP, Unroll>(kc, a, a_rs, a_ks, b, b_ps, first);
        if (io.m_valid <= per) return;  // the other rows are padding
        TileIO rest = io;
        rest.m_valid = io.m_valid - per;
        if (rest.c_in) rest.c_in += per * io.ld_in;
        rest.c_out += per * io.ld_out;
        if (rest.residual) rest.residual += per * io.ld_res;
        tile_rows<MR - per, NP, Unroll>(kc, a + per * a_rs, a_rs, a_ks, b, b_ps, rest);
    }
}

// GEMM blocking (kMC: gemm.hpp): an x block [kMC, kc] stays in L2, a weight micro-panel [kc, 32] in L1 (in L2
// on AVX2, whose K blocks are larger: k_block); a
// tile of the output covers up to kNCP panels (256 columns): fewer where 8 would leave threads
// idle (panels_per_tile), as a 512-column product of 4 row blocks (8 tiles) on 16 threads.
// Row blocks of equal size instead (512 rows as 132, 132, 132, 116 rather than 3 x 144 + 80, so
// that 2 threads' tiles are alike) measured the same: 0.98-1.03x on `base` products and the
// prefill, 1 and 2 threads (AMD EPYC Zen 3, in-process alternation). Tiles of 4 or 2 panels
// where K has several blocks (fc2 of `base`: a scratch of partial sums a half or a quarter as
// large beside the x block in L2): 0.96-0.98x on that product, 1 and 2 threads.
constexpr int kNCP = 8;
constexpr int kFloatsPerLine = 64 / int(sizeof(float));  // a cache line

// The K block kc. K blocks keep the exact partial sums, so kc changes no bit; each block costs
// every micro-tile a load and a store of its partial sums and the tile's entry and exit.
// The K block of the GEMM (gemm_detail::k_block: AVX2's tiles take larger ones).
int k_block(int K) { return gemm_detail::k_block(K, HWY_TARGET == HWY_AVX2); }


// `threads`: the team the parallel region below will have (1 inside another parallel region).
void gemm(int threads, const PackedMatrix& W, const float* x, int m, int ldx, float* y, int ldy, bool relu,
          const float* residual, int ldr) {
    const int K = W.k, P = W.num_panels();
    const int row_blocks = (m + kMC - 1) / kMC;
    const int ncp = panels_per_tile(P, row_blocks, threads, kNCP);
    const int col_blocks = (P + ncp - 1) / ncp;
    const int kKC = k_block(K);
    const int k_blocks = (K + kKC - 1) / kKC;
    const int tiles = row_blocks * col_blocks;
    const std::ptrdiff_t panel_stride = std::ptrdiff_t(K) * kNR;
    // Where K has several blocks and the tiles come in at most 2 column blocks (fc2 of `base`:
    // K = 2048, 512 columns), each tile packs its own x block, one K block at a time, into a
    // per-thread buffer [kMC, kc] that the tile's panels then read from L2, rather than reading
    // the shared packed x (4 MiB at fc2's shape) back from the L3: at most twice the packing,
    // and the same bits. fc2 alone 1.03x as fast on 1 thread and 1.06x on 2, the prefill
    // 1.01x on both (AMD EPYC Zen 3, in-process alternation, 10-20 rounds). The o-projection
    // (one K block, 512 columns) packed per tile measured 1.00x, so a single K block keeps the
    // shared packing.
    const bool pack_per_tile = k_blocks > 1 && col_blocks <= 2;
    // The calling thread's buffer (its pointer is shared with the team below).
    float* apack = pack_per_tile ? nullptr : thread_scratch(std::size_t(row_blocks) * kMC * std::size_t(K), 2);
    const int units = pack_per_tile ? 0 : row_blocks * k_blocks * (kMC / kMR);  // (row block, K block, micro-panel)
    bool failed = false;  // a thread's scratch could not be allocated (no exception crosses OpenMP)
#pragma omp parallel if (tiles > 1)
    {
        // Every thread of the team sizes its scratch before any tile, whether or not the schedule
        // then hands it one; a thread without it takes no tile, and the call throws below.
        float* ctile = nullptr;  // a tile's partial sums [kMC, kNCP*32]
        float* own = nullptr;    // a tile's own packed x block [kMC, kc]
        try {
            ctile = thread_scratch(std::size_t(kMC) * kNCP * kNR, 1);
            if (pack_per_tile) own = thread_scratch(std::size_t(kMC) * std::size_t(kKC), 0);
        } catch (const std::bad_alloc&) {
            ctile = nullptr;
#pragma omp atomic write
            failed = true;
        }
#pragma omp for schedule(static)
        for (int u = 0; u < units; ++u) {
            const int ip = u % (kMC / kMR), kb = (u / (kMC / kMR)) % k_blocks, ib = u / (kMC / kMR) / k_blocks;
            if (ib * kMC + ip * kMR < m) pack_x_unit(x, m, ldx, K, kKC, ib, kb * kKC, ip, apack);
        }
        // (the implicit barrier of the loop above: x is packed before any tile reads it)
        // Dynamic: a tile is one thread's from its first K block to its last, so which thread
        // takes it changes no bit. On a shared host one vCPU is often slowed by another tenant;
        // with a static split the other thread then waited at the end of every product (base
        // prefill T=512 on 2 vCPUs, forwards alternating in one process: dynamic 1.06-1.10x by
        // the median, two runs of 25-30 pairs).
#pragma omp for schedule(dynamic)
        for (int t = 0; t < tiles; ++t) {
            if (!ctile) continue;
            // Column block outermost: consecutive tiles share a column block of the weights.
            const int cb = t / row_blocks, ib = t % row_blocks;
            const int i0 = ib * kMC, mc = std::min(kMC, m - i0);
            const int p0 = cb * ncp, np = std::min(ncp, P - p0);
            const int micro_panels = (mc + kMR - 1) / kMR;
            constexpr std::ptrdiff_t ldc = kNCP * kNR;
            for (int k0 = 0; k0 < K; k0 += kKC) {
                const int kc = std::min(kKC, K - k0);
                const bool first = k0 == 0, last = k0 + kc == K;
                const float* ablock;
                if (pack_per_tile) {
                    for (int ip = 0; ip < micro_panels; ++ip)
                        pack_micro_panel(x, m, ldx, i0 + ip * kMR, k0, kc,
                                         own + std::size_t(ip) * std::size_t(kc) * kMR);
                    ablock = own;
                } else {
                    ablock = apack + std::size_t(ib) * kMC * std::size_t(K) + std::size_t(k0) * kMC;
                }
                for (int p = p0; p < p0 + np; ++p) {
                    const int j0 = p * kNR;
                    const float* bp = W.panels.data() + std::size_t(p) * panel_stride + std::size_t(k0) * kNR;
                    // The weight block this tile reads after this one (the next panel, else the
                    // first panel of the next K block) is fetched into L2 while this one is
                    // used, a share of its lines before each micro-tile. The hardware's
                    // prefetchers stop at each 4 KiB page of a block that comes from the L3.
                    const float* next = nullptr;
                    int next_kc = kc;
                    if (p + 1 < p0 + np) {
                        next = bp + panel_stride;
                    } else if (!last) {
                        next = W.panels.data() + std::size_t(p0) * panel_stride + std::size_t(k0 + kc) * kNR;
                        next_kc = std::min(kKC, K - k0 - kc);
                    }
                    const int next_lines = next ? next_kc * kNR / kFloatsPerLine : 0;
                    const int lines_per_tile = (next_lines + micro_panels - 1) / micro_panels;
                    for (int ip = 0; ip < micro_panels; ++ip) {
                        const int l_end = std::min(next_lines, (ip + 1) * lines_per_tile);
                        for (int l = ip * lines_per_tile; l < l_end; ++l)
                            __builtin_prefetch(next + std::ptrdiff_t(l) * kFloatsPerLine, 0, 2);
                        const int r0 = i0 + ip * kMR;  // first row of the micro-tile in y
                        TileIO io;
                        io.m_valid = std::min(kMR, m - r0);
                        io.n_valid = std::min(kNR, W.n - j0);
                        float* ct = ctile + std::ptrdiff_t(ip * kMR) * ldc + (p - p0) * kNR;
                        if (!first) {
                            io.c_in = ct;
                            io.ld_in = ldc;
                        }
                        if (last) {
                            io.c_out = y + std::ptrdiff_t(r0) * ldy + j0;
                            io.ld_out = ldy;
                            if (!W.bias.empty()) io.bias = W.bias.data() + j0;
                            if (residual) {
                                io.residual = residual + std::ptrdiff_t(r0) * ldr + j0;
                                io.ld_res = ldr;
                            }
                            io.relu = relu;
                        } else {
                            io.c_out = ct;
                            io.ld_out = ldc;
                        }
                        tile_rows<kMR, 1, /*Unroll=*/true>(kc, ablock + std::size_t(ip) * std::size_t(kc) * kMR,
                                                           1, kMR, bp, panel_stride, io);
                    }
                }
            }
        }
    }
    if (failed) throw std::bad_alloc();
}

// The GEMV for m <= kSmallM rows: NP panels per tile, full K, x read in place.
template <int MR, int NP>
void gemv_rows(const PackedMatrix& W, const float* x, int ldx, float* y, int ldy, bool relu,
               const float* residual, int ldr) {
    const int K = W.k, P = W.num_panels();
    const int groups = (P + NP - 1) / NP;
    const std::ptrdiff_t panel_stride = std::ptrdiff_t(K) * kNR;
    auto io_for = [&](int p, int n_panels) {
        TileIO io;
        const int j0 = p * kNR;
        io.m_valid = MR;
        io.n_valid = std::min(n_panels * kNR, W.n - j0);
        io.c_out = y + j0;
        io.ld_out = ldy;
        if (!W.bias.empty()) io.bias = W.bias.data() + j0;
        if (residual) {
            io.residual = residual + j0;
            io.ld_res = ldr;
        }
        io.relu = relu;
        return io;
    };
    // Each group is a contiguous run of panels; a static schedule gives each thread a
    // contiguous range of the weights to stream.
#pragma omp parallel for schedule(static) if (groups > 1)
    for (int g = 0; g < groups; ++g) {
        const int p0 = g * NP;
        const float* bp = W.panels.data() + std::size_t(p0) * panel_stride;
        if (p0 + NP <= P) {
            tile_rows<MR, NP>(K, x, ldx, 1, bp, panel_stride, io_for(p0, NP));
        } else {
            for (int p = p0; p < P; ++p)
                tile_rows<MR, 1>(K, x, ldx, 1, W.panels.data() + std::size_t(p) * panel_stride,
                            panel_stride, io_for(p, 1));
        }
    }
}

// gemv_rows with np panels per tile, np one of NP, NP/2, ..., 1.
template <int MR, int NP>
void gemv_np(int np, const PackedMatrix& W, const float* x, int ldx, float* y, int ldy, bool relu,
             const float* residual, int ldr) {
    if constexpr (NP > 1) {
        if (np < NP) return gemv_np<MR, NP / 2>(np, W, x, ldx, y, ldy, relu, residual, ldr);
    }
    gemv_rows<MR, NP>(W, x, ldx, y, ldy, relu, residual, ldr);
}

// The GEMV with at most NP panels per tile, fewer where NP would leave some of `threads` idle.
template <int MR, int NP>
void gemv(int threads, const PackedMatrix& W, const float* x, int ldx, float* y, int ldy, bool relu,
          const float* residual, int ldr) {
    gemv_np<MR, NP>(panels_per_tile(W.num_panels(), 1, threads, NP), W, x, ldx, y, ldy, relu, residual, ldr);
}

}  // namespace

void linear_target(const PackedMatrix& W, const float* x, int m, int ldx, float* y, int ldy,
                   Activation32 act, const float* residual, int ldr) {
    const bool relu = act == Activation32::relu;
    // The GELUs are applied after the product (they need erf/tanh); a residual is only ever
    // combined with no activation, so the two never need ordering against each other here.
    const bool post_act = act == Activation32::gelu || act == Activation32::gelu_tanh;
    const float* res = post_act ? nullptr : residual;
    // Panels per GEMV tile at most: enough independent FMA chains to hide the latency while the
    // weights stream, few enough for the registers (AVX2: 8 to 12 accumulators of 8 floats;
    // tile_rows splits 4 rows into tiles of 3 and 1, the second reading the panel again from
    // cache). Fewer when that leaves threads idle (panels_per_tile). One row on AVX2 takes 4
    // panels, 16 accumulators: g++ 12 keeps two of them on the stack (a load and a store each per
    // step), and still the four weight streams at once ran faster than two. The `base` decode
    // step at ctx 1024, in-process alternation against 2 panels (30 rounds of 15 steps): 1.03-1.06x
    // on an AMD EPYC Zen 5 (2 threads, 4 runs), 0.99-1.02x on an Emerald Rapids Xeon (1, 2 and 16
    // threads); 3 panels gave 1.01-1.02x on the Zen 5. Not measured on a Zen 3.
    constexpr bool narrow = HWY_TARGET == HWY_AVX2;
    // The team of the product's parallel region (run serially inside another one): the GEMV's
    // and the GEMM's tile widths are chosen for it.
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    switch (m) {
        case 1: gemv<1, narrow ? 4 : 8>(threads, W, x, ldx, y, ldy, relu, res, ldr); break;
        case 2: gemv<2, narrow ? 1 : 4>(threads, W, x, ldx, y, ldy, relu, res, ldr); break;
        case 3: gemv<3, narrow ? 1 : 3>(threads, W, x, ldx, y, ldy, relu, res, ldr); break;
        case 4: gemv<4, narrow ? 1 : 3>(threads, W, x, ldx, y, ldy, relu, res, ldr); break;
        default: gemm(threads, W, x, m, ldx, y, ldy, relu, res, ldr); break;
    }
    if (post_act) {
        const std::ptrdiff_t n = W.n;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(m) * n > 4096)
        for (int i = 0; i < m; ++i) {
            float* row = y + std::ptrdiff_t(i) * ldy;
            const float* rrow = residual ? residual + std::ptrdiff_t(i) * ldr : nullptr;
            for (std::ptrdiff_t j = 0; j < n; ++j) {
                row[j] = activate32(act, row[j]);
                if (rrow) row[j] += rrow[j];
            }
        }
    }
}

}  // namespace attncheck::optimized::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attncheck::optimized {

HWY_EXPORT(linear_target);

void linear(const PackedMatrix& W, const float* x, int m, int ldx, float* y, int ldy,
            Activation32 act, const float* residual, int ldr) {
    if (m <= 0 || W.n <= 0) return;
    isa_choice();  // ATTNCHECK_ISA is applied before the first dispatch
    HWY_DYNAMIC_DISPATCH(linear_target)(W, x, m, ldx, y, ldy, act, residual, ldr);
}

}  // namespace attncheck::optimized
#endif  // HWY_ONCE
