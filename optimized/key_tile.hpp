// optimized/key_tile.hpp — moving keys into the attention kernel's tiles (attention_v2.cpp):
// the transpose of a tile of keys into Kt [Dk, 64]. Per target, like vec16.hpp (an in-register
// transpose on AVX-512 and AVX2, a plain loop on scalar).
#include <algorithm>
#include <cstdint>

#include "optimized/attention_kernel.hpp"
#include "optimized/vec16.hpp"

#if defined(ATTNCHECK_OPTIMIZED_KEY_TILE_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNCHECK_OPTIMIZED_KEY_TILE_HPP_
#undef ATTNCHECK_OPTIMIZED_KEY_TILE_HPP_
#else
#define ATTNCHECK_OPTIMIZED_KEY_TILE_HPP_
#endif

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {
// Internal linkage, as for the rest of the kernel's pieces: each kernel file has its own copy.
namespace {

// Asks for key rows [j0, j1) of src (Dk floats each, k_rs apart) in the L1 data cache.
inline void prefetch_key_rows(const float* src, std::int64_t k_rs, std::int64_t Dk, std::int64_t j0,
                              std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j) {
        const float* row = src + j * k_rs;
        for (std::int64_t c = 0; c < Dk; c += 16) __builtin_prefetch(row + c, 0, 3);
        __builtin_prefetch(row + Dk - 1, 0, 3);  // a row that does not start on a line ends on one more
    }
}

// Kt[c, jj] = k[t0 + jj, c] for jj < nk, 0 for nk <= jj < 64, key rows k_rs floats apart (keys
// past the last visible one are never read: they may be padding garbage). The `ahead` keys after
// the tile (t0 + nk ..), which the caller reads next, exist and may be prefetched.
//
// Each block of keys is transposed while the next block's rows are prefetched into the L1 (the
// last block of a tile prefetches the next tile's first), and whole blocks take plain loads. A
// decode step packs every key it reads, once, straight from memory, and most of its time went to
// waiting for those rows. The kernel's decode at kv 4096 (8 heads, K and V rotated over 64 MiB),
// alternating calls in one process against the loop without the prefetch and with masked loads
// on AVX-512:
// - AMD EPYC Zen 5 (2 vCPUs): AVX-512 1.73-2.48x as fast on 1 thread (4 runs), 1.89-1.97x on 2;
//   AVX2 1.15-1.58x on 1 thread (4 runs), 1.25x on 2. Plain loads alone gave AVX-512 1.30-1.55x.
// - Emerald Rapids Xeon (16 cores), where the 64 MiB stay in its 300 MiB L3: 0.98-1.04x on 1, 2
//   and 16 threads, both paths.
// A prefill packs each tile once before many rows use it: 1.00-1.04x. A prefetch of the tile's
// values too (its 256 lines at once, before the keys) measured 0.93x of this on AVX-512 and
// 1.12x on AVX2 (Zen 5, 1 thread): not taken.
void pack_key_tile(const float* k, std::int64_t k_rs, std::int64_t Dk, std::int64_t t0, int nk, int ahead,
                   float* kt) {
    const float* src = k + t0 * k_rs;
    const std::int64_t readable = std::int64_t(nk) + std::max(ahead, 0);  // rows of src that exist
#if HWY_TARGET <= HWY_AVX3
    // 16 keys x 16 columns at a time through an in-register transpose (64 shuffles per 256
    // floats instead of 256 scalar stores): a decode step packs every tile it reads, so this is
    // on its critical path. Missing keys and columns are zero (masked loads never read past
    // the last key or the row's end).
    for (int jj0 = 0; jj0 < kTileKeys; jj0 += kLanes) {
        prefetch_key_rows(src, k_rs, Dk, jj0 + kLanes, std::min<std::int64_t>(jj0 + 2 * kLanes, readable));
        for (std::int64_t c0 = 0; c0 < Dk; c0 += kLanes) {
            const int ncol = int(std::min<std::int64_t>(kLanes, Dk - c0));
            const __mmask16 colmask = first_n(ncol);
            __m512 r[16], t[16];
            if (ncol == kLanes && jj0 + kLanes <= nk) {  // a whole block: plain loads
                for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + (jj0 + i) * k_rs + c0);
            } else {
                for (int i = 0; i < 16; ++i)
                    r[i] = jj0 + i < nk ? _mm512_maskz_loadu_ps(colmask, src + (jj0 + i) * k_rs + c0)
                                        : _mm512_setzero_ps();
            }
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int g = 0; g < 16; g += 4) {  // per 4 rows: u0..u3 = columns 4k+0 .. 4k+3
                const __m512d a0 = _mm512_castps_pd(t[g]), a1 = _mm512_castps_pd(t[g + 1]);
                const __m512d a2 = _mm512_castps_pd(t[g + 2]), a3 = _mm512_castps_pd(t[g + 3]);
                r[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
                r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
                r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
                r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
            }
            for (int m = 0; m < 4; ++m) {  // gather 128-bit lanes: column 4k+m from 4 row groups
                const __m512 v0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
                const __m512 w0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
                const __m512 v1 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
                const __m512 w1 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
                const __m512 col[4] = {_mm512_shuffle_f32x4(v0, v1, 0x88),
                                       _mm512_shuffle_f32x4(w0, w1, 0x88),
                                       _mm512_shuffle_f32x4(v0, v1, 0xDD),
                                       _mm512_shuffle_f32x4(w0, w1, 0xDD)};
                for (int kq = 0; kq < 4; ++kq) {
                    const int c = 4 * kq + m;
                    if (c < ncol) _mm512_storeu_ps(kt + (c0 + c) * kTileKeys + jj0, col[kq]);
                }
            }
        }
    }
#elif HWY_TARGET == HWY_AVX2
    // 8 keys x 8 columns at a time through the usual in-register 8 x 8 transpose (unpack,
    // shuffle, swap 128-bit halves). Masked loads read nothing past the last key or the row's end;
    // whole blocks take plain loads: AVX2's masked load (vmaskmovps) is slower on AMD Zen, and a
    // decode step packs every key it reads (Zen 3, `base` decode step ctx 1024: 1.14-1.22x).
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int jj0 = 0; jj0 < kTileKeys; jj0 += 8) {
        prefetch_key_rows(src, k_rs, Dk, jj0 + 8, std::min<std::int64_t>(jj0 + 16, readable));
        for (std::int64_t c0 = 0; c0 < Dk; c0 += 8) {
            const int ncol = int(std::min<std::int64_t>(8, Dk - c0));
            const __m256i colmask = _mm256_cmpgt_epi32(_mm256_set1_epi32(ncol), lane);
            __m256 r[8], t[8];
            if (ncol == 8 && jj0 + 8 <= nk) {  // a whole block: plain loads
                for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (jj0 + i) * k_rs + c0);
            } else {
                for (int i = 0; i < 8; ++i)
                    r[i] = jj0 + i < nk ? _mm256_maskload_ps(src + (jj0 + i) * k_rs + c0, colmask)
                                        : _mm256_setzero_ps();
            }
            for (int i = 0; i < 8; i += 2) {
                t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int g = 0; g < 8; g += 4) {
                r[g] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
                r[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
                r[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
                r[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
            }
            for (int c = 0; c < 4; ++c) {  // columns c and c + 4: the low and high halves
                if (c < ncol) _mm256_storeu_ps(kt + (c0 + c) * kTileKeys + jj0, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
                if (c + 4 < ncol)
                    _mm256_storeu_ps(kt + (c0 + c + 4) * kTileKeys + jj0, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
            }
        }
    }
#else
    (void)readable;
    for (int jj = 0; jj < nk; ++jj)
        for (std::int64_t c = 0; c < Dk; ++c) kt[c * kTileKeys + jj] = src[jj * k_rs + c];
    if (nk < kTileKeys)
        for (std::int64_t c = 0; c < Dk; ++c)
            std::fill(kt + c * kTileKeys + nk, kt + (c + 1) * kTileKeys, 0.0f);
#endif
}

}  // namespace
}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNCHECK_OPTIMIZED_KEY_TILE_HPP_
