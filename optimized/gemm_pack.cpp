// optimized/gemm_pack.cpp — what linear() needs that is the same on every instruction set:
// packing the weights at load time (pack_weights) and x per call (pack_micro_panel, pack_x_unit),
// the per-thread scratch, the tile plan (busiest_thread_panels, panels_per_tile), and the scalar
// specification (activate32, linear_naive). The per-target tiles and drivers are gemm.cpp.
#include "optimized/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // SSE (x86-64's baseline) for pack_micro_panel
#endif

namespace attncheck::optimized {

namespace gemm_detail {

// The depth of a K block of the GEMM on AVX2's tiles (avx2_tiles) or the others.
//
// AVX2's 6 x 16 tiles: K in equal blocks of at most 512, the weight micro-panel [kc, 32] (64 KiB)
// coming from L2 rather than L1. A step reads 64 bytes of weights per 12 FMAs, ~11 bytes a
// cycle, well within what L2 feeds L1 (32 bytes a cycle on AMD Zen, 64 on Intel), and the
// hardware prefetcher follows the panel's fixed stride; the x micro-panel [kc, 12] (24 KiB)
// needs ~2 bytes a cycle. Measured on AMD EPYC Zen 3 (32 KiB L1, 512 KiB L2), in-process
// alternation against the L1 rule below (kc = 128), `base` products of 512 rows: 1.04-1.11x
// on 1 thread, 1.02-1.10x on 2, the prefill 1.07-1.08x (alternating processes, BM_Prefill
// T=512: 1.04x on 1 thread, 1.03x on 2); kc = 1024 as 512, 2048 slower (0.97x on the prefill),
// 384 (two unequal blocks for K = 512) 0.96-0.98x of 512. Not measured on an Intel AVX2 CPU.
//
// The weight micro-panel [kc, 32] takes at most half of the L1 data cache, the rest left to the
// x micro-panel [kc, 12] streaming past it and the tile's rows of y (BLIS's rule). 192 with a
// 48 KiB L1 (Intel since Ice Lake), 128 with a 32 KiB one. Measured with the AVX-512 tile on a
// 48 KiB-L1 Xeon: 192 and 256 alike (in-process alternation, 0.99x); larger blocks, which pay
// on AVX2 (above), not measured with it.
int k_block(int K, bool avx2_tiles) {
    if (avx2_tiles) {
        constexpr int kMaxKc = 512;
        const int blocks = std::max(1, (K + kMaxKc - 1) / kMaxKc);
        const int kc = (K + blocks - 1) / blocks;
        return std::max(8, (kc + 7) / 8 * 8);  // a multiple of the tile's unroll
    }
    static const int kc = [] {
        long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
        if (l1 <= 0) l1 = 32 * 1024;  // unknown: the smallest L1 of an x86-64-v3 CPU
        const long fit = l1 / 2 / long(kNR * sizeof(float));
        return int(std::clamp<long>(fit / 32 * 32, 64, 256));
    }();
    return kc;
}

// Per-thread scratch, grown on first use and kept (OpenMP threads persist in the pool): `which`
// 0 a tile's own packed x block, 1 a tile's partial sums, 2 the shared packed x. Throws
// std::bad_alloc when it cannot grow.
float* thread_scratch(std::size_t n, int which) {
    static thread_local AlignedVector<float> buffers[3];
    AlignedVector<float>& b = buffers[which];
    if (b.size() < n) {
        b = AlignedVector<float>();  // the old buffer goes first: never both at once
        b.resize(n);
    }
    return b.data();
}

// The micro-panel [kc, kMR] of rows i0 .. i0 + kMR of x (rows past m zero), columns k0 .. k0 + kc,
// at dst.
void pack_micro_panel(const float* x, int m, int ldx, int i0, int k0, int kc, float* dst) {
#if defined(__x86_64__) || defined(__i386__)
    // A micro-panel of kMR whole rows goes through 4 x 4 transposes in SSE registers (x86-64's
    // baseline, so on every path): 4 loads, 8 shuffles and 4 stores per 16 floats. One float at
    // a time it took ~9% of a 512-column product with K = 2048 (fc2 of `base`, 1 thread).
    static_assert(kMR % 4 == 0);
    if (i0 + kMR <= m) {
        int c = 0;
        for (; c + 4 <= kc; c += 4)
            for (int g = 0; g < kMR; g += 4) {
                const float* src = x + std::size_t(i0 + g) * ldx + k0 + c;
                __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + ldx);
                __m128 r2 = _mm_loadu_ps(src + 2 * std::size_t(ldx)), r3 = _mm_loadu_ps(src + 3 * std::size_t(ldx));
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                _mm_storeu_ps(dst + (c + 0) * kMR + g, r0);
                _mm_storeu_ps(dst + (c + 1) * kMR + g, r1);
                _mm_storeu_ps(dst + (c + 2) * kMR + g, r2);
                _mm_storeu_ps(dst + (c + 3) * kMR + g, r3);
            }
        for (; c < kc; ++c)
            for (int r = 0; r < kMR; ++r) dst[c * kMR + r] = x[std::size_t(i0 + r) * ldx + k0 + c];
        return;
    }
#endif
    for (int r = 0; r < kMR; ++r) {
        const int i = i0 + r;
        if (i < m) {
            const float* src = x + std::size_t(i) * ldx + k0;
            for (int c = 0; c < kc; ++c) dst[c * kMR + r] = src[c];
        } else {
            for (int c = 0; c < kc; ++c) dst[c * kMR + r] = 0.0f;
        }
    }
}

// x packed once per call, for every tile: row block ib (kMC rows), K block kb (kc_block deep)
// is micro-panels [kc, kMR] (rows past m zero) at apack + ib * kMC * K + k0 * kMC; micro-panel
// ip of it at + ip * kc * kMR. Packing it per tile instead would redo it for every column
// block: 32 times over for the logits (V = 8192 columns), ~8% of a prefill. (Where K has
// several blocks and there are at most 2 column blocks, each tile does pack its own: see gemm.)
void pack_x_unit(const float* x, int m, int ldx, int K, int kc_block, int ib, int k0, int ip, float* apack) {
    const int kc = std::min(kc_block, K - k0);
    float* dst = apack + std::size_t(ib) * kMC * std::size_t(K) + std::size_t(k0) * kMC +
                 std::size_t(ip) * std::size_t(kc) * kMR;
    pack_micro_panel(x, m, ldx, ib * kMC + ip * kMR, k0, kc, dst);
}

}  // namespace gemm_detail

PackedMatrix pack_weights(const std::vector<WeightPart>& parts, int k) {
    PackedMatrix pm;
    pm.k = k;
    bool any_bias = false;
    for (const WeightPart& part : parts) {
        pm.n += part.n;
        any_bias = any_bias || part.bias != nullptr;
    }
    pm.panels = AlignedVector<float>(std::size_t(pm.num_panels()) * std::size_t(k) * kNR);  // zeroed
    if (any_bias) pm.bias.assign(std::size_t(pm.n), 0.0f);
    int row0 = 0;  // first output row of this part in the concatenation
    for (const WeightPart& part : parts) {
        for (int r = 0; r < part.n; ++r) {
            const int j = row0 + r;  // output column of the packed matrix
            float* panel = pm.panels.data() + std::size_t(j / kNR) * std::size_t(k) * kNR;
            const float* src = part.w + std::size_t(r) * std::size_t(k);
            for (int c = 0; c < k; ++c) panel[std::size_t(c) * kNR + std::size_t(j % kNR)] = src[c];
            if (part.bias) pm.bias[std::size_t(j)] = part.bias[r];
        }
        row0 += part.n;
    }
    return pm;
}

PackedMatrix pack_weights(const float* w, int n, int k, const float* bias) {
    return pack_weights(std::vector<WeightPart>{{w, n, bias}}, k);
}

void pack_weights_transposed(const float* wt, int n, int k, int ldw, PackedMatrix& pm) {
    pm.n = n;
    pm.k = k;
    pm.bias.clear();
    const int panels = pm.num_panels();
    const std::size_t size = std::size_t(panels) * std::size_t(k) * kNR;
    if (pm.panels.size() < size) pm.panels = AlignedVector<float>(size);
#pragma omp parallel for schedule(static) if (std::size_t(n) * std::size_t(k) >= (1u << 16))
    for (int p = 0; p < panels; ++p) {
        const int j0 = p * kNR, width = std::min(kNR, n - j0);
        float* panel = pm.panels.data() + std::size_t(p) * std::size_t(k) * kNR;
        for (int c = 0; c < k; ++c) {
            float* dst = panel + std::size_t(c) * kNR;
            std::copy_n(wt + std::size_t(c) * std::size_t(ldw) + std::size_t(j0), width, dst);
            std::fill(dst + width, dst + kNR, 0.0f);  // the last panel's padding columns
        }
    }
}

long busiest_thread_panels(int panels, int row_blocks, int threads, int np) {
    threads = std::max(threads, 1);
    row_blocks = std::max(row_blocks, 1);
    np = std::max(np, 1);
    // The full tiles come first (column block by column block) and go round the threads; the
    // narrower tiles of the last column block, if any, then to the least loaded.
    const long full = long(row_blocks) * (panels / np);
    const int rest = panels % np;
    // Kept per thread: a decode step's GEMVs allocate nothing after the first.
    static thread_local std::vector<long> load;
    load.assign(std::size_t(threads), full / threads * np);
    for (long t = 0; t < full % threads; ++t) load[std::size_t(t)] += np;
    if (rest > 0)
        for (int r = 0; r < row_blocks; ++r) *std::min_element(load.begin(), load.end()) += rest;
    return *std::max_element(load.begin(), load.end());
}

int panels_per_tile(int panels, int row_blocks, int threads, int max_np) {
    int best = std::max(max_np, 1);
    long best_load = busiest_thread_panels(panels, row_blocks, threads, best);
    for (int np = best / 2; np >= 1; np /= 2) {
        const long load = busiest_thread_panels(panels, row_blocks, threads, np);
        if (5 * load <= 4 * best_load) best = np, best_load = load;
    }
    return best;
}

float activate32(Activation32 a, float v) {
    switch (a) {
        case Activation32::none:
            return v;
        case Activation32::relu:
            return v > 0.0f ? v : 0.0f;
        case Activation32::gelu:
            return 0.5f * v * (1.0f + std::erf(v * float(std::numbers::sqrt2 / 2)));
        case Activation32::gelu_tanh: {
            const float c = float(std::sqrt(2.0 / std::numbers::pi));
            return 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
        }
    }
    return v;
}

void linear_naive(const float* w, const float* bias, int n, int k, const float* x, int m, int ldx,
                  float* y, int ldy, Activation32 act, const float* residual, int ldr) {
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int c = 0; c < k; ++c)
                acc = std::fma(x[std::size_t(i) * ldx + c], w[std::size_t(j) * k + c], acc);
            if (bias) acc += bias[j];
            acc = activate32(act, acc);
            if (residual) acc += residual[std::size_t(i) * ldr + j];
            y[std::size_t(i) * ldy + j] = acc;
        }
}

}  // namespace attncheck::optimized
