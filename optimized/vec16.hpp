// optimized/vec16.hpp — the 16-float vector of the attention kernel (attention_kernel.cpp), for
// each target of simd_targets.hpp: AVX-512 intrinsics (one __m512), two Highway vectors of 8 floats
// (AVX2), or a plain struct of 16 floats (scalar).
//
// Each operation is one instruction (or one lane-wise loop) with no fused rounding the caller did
// not ask for: vfma is the only multiply-add. vexp is the kernel's exp for x <= 0. The AVX-512
// and AVX2 versions give the same bits for every operation (vexp and vreduce_add included).
//
// Included once per target by a file that includes hwy/foreach_target.h (the include guard
// toggles with HWY_TARGET_TOGGLE, Highway's convention for per-target headers).
// g++ 12's AVX-512 headers initialise "undefined" vectors from themselves (_mm512_undefined_ps),
// which -Wuninitialized reports at every intrinsic that uses one (max, roundscale, scalef,
// reductions). The pragma must precede the first include of <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <immintrin.h>

#include "optimized/attention_kernel.hpp"  // kExpFlushBelow
#include "optimized/simd_targets.hpp"
#include <hwy/highway.h>

#ifndef ATTNCHECK_OPTIMIZED_VEC16_COMMON_
#define ATTNCHECK_OPTIMIZED_VEC16_COMMON_
namespace attncheck::optimized::attention_detail {
inline constexpr int kLanes = 16;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace attncheck::optimized::attention_detail
#endif

#if defined(ATTNCHECK_OPTIMIZED_VEC16_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNCHECK_OPTIMIZED_VEC16_HPP_
#undef ATTNCHECK_OPTIMIZED_VEC16_HPP_
#else
#define ATTNCHECK_OPTIMIZED_VEC16_HPP_
#endif

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {


#if HWY_TARGET <= HWY_AVX3
struct vf {
    __m512 r;
};
inline __mmask16 first_n(int n) {  // lanes 0 .. n-1, n in [0, 16]
    return n >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << std::max(n, 0)) - 1u);
}
inline vf vzero() { return {_mm512_setzero_ps()}; }
inline vf vset1(float x) { return {_mm512_set1_ps(x)}; }
inline vf vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline vf vload_n(const float* p, int n) { return {_mm512_maskz_loadu_ps(first_n(n), p)}; }
inline void vstore(float* p, vf a) { _mm512_storeu_ps(p, a.r); }
inline void vstore_n(float* p, vf a, int n) { _mm512_mask_storeu_ps(p, first_n(n), a.r); }
inline vf vfma(vf a, vf b, vf c) { return {_mm512_fmadd_ps(a.r, b.r, c.r)}; }  // a*b + c
inline vf vmul(vf a, vf b) { return {_mm512_mul_ps(a.r, b.r)}; }
inline vf vadd(vf a, vf b) { return {_mm512_add_ps(a.r, b.r)}; }
inline vf vsub(vf a, vf b) { return {_mm512_sub_ps(a.r, b.r)}; }
inline vf vdiv(vf a, vf b) { return {_mm512_div_ps(a.r, b.r)}; }
inline vf vmax(vf a, vf b) { return {_mm512_max_ps(a.r, b.r)}; }
// Lanes >= n replaced by -inf (the mask of keys past a row's last visible key).
inline vf vmask_after(vf a, int n) {
    return {_mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), first_n(n), a.r)};
}
// Lanes < n replaced by -inf (keys before a row's first visible key: a sliding window).
inline vf vmask_before(vf a, int n) {
    return {_mm512_mask_mov_ps(a.r, first_n(n), _mm512_set1_ps(kNegInf))};
}
inline float vreduce_max(vf a) { return _mm512_reduce_max_ps(a.r); }
inline float vreduce_add(vf a) { return _mm512_reduce_add_ps(a.r); }
inline void vpin(vf&) {}  // see the AVX2 version

// exp(x) for x <= 0: n = round(x / ln2), r = x - n ln2 (Cody-Waite, |r| <= ln2/2), degree-7
// Taylor polynomial (truncation error r^8/8! < 0.05 ulp) by Horner with FMA, then scalef
// (2^n). Measured: max 0.93 ulp, rms 0.30 ulp over [-87, 0] against exp in double (glibc's
// expf: rms 0.29 ulp); the test demands <= 2 ulp. Below 2^-126 the result is +0 (see
// kExpFlushBelow).
inline vf vexp(vf x) {
    // Clamp -inf to -104 so that r stays finite (such lanes are flushed to +0 below).
    // max_ps returns its second operand when either is NaN, so NaN propagates.
    const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-104.0f), x.r);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);  // n * ln2_hi is exact
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    // Lanes whose exp is below 2^-126 (x < kExpFlushBelow, -inf included: a masked score, or the
    // running max of a row that has seen no key yet) are flushed to +0 by the mask: a vscalefps
    // whose result is subnormal or underflows takes a microcode assist, ~84 ns against ~1 ns
    // (Emerald Rapids), and every diagonal tile and chunk merge had one. NUMERICS allows the
    // flush (an absolute error under 2^-126 per weight). NaN is "not < c", so it propagates.
    const __mmask16 live = _mm512_cmp_ps_mask(x.r, _mm512_set1_ps(kExpFlushBelow), _CMP_NLT_UQ);
    return {_mm512_maskz_scalef_ps(live, p, n)};
}
#elif HWY_TARGET == HWY_AVX2
namespace hn = hwy::HWY_NAMESPACE;
using D8 = hn::ScalableTag<float>;
using V8 = hn::Vec<D8>;
inline constexpr int kParts = kLanes / int(hn::MaxLanes(D8()));  // 2 vectors of 8 floats
static_assert(kParts * int(hn::MaxLanes(D8())) == kLanes);
struct vf {
    V8 r[kParts];
};
#define ATTNCHECK_PARTWISE(name, op)               \
    inline vf name(vf a, vf b) {                   \
        vf c;                                      \
        for (int i = 0; i < kParts; ++i) c.r[i] = op(a.r[i], b.r[i]); \
        return c;                                  \
    }
ATTNCHECK_PARTWISE(vmul, hn::Mul)
ATTNCHECK_PARTWISE(vadd, hn::Add)
ATTNCHECK_PARTWISE(vsub, hn::Sub)
ATTNCHECK_PARTWISE(vdiv, hn::Div)
ATTNCHECK_PARTWISE(vmax, hn::Max)  // vmaxps: the second operand when either is NaN, like AVX-512
#undef ATTNCHECK_PARTWISE
inline vf vzero() {
    vf a;
    for (int i = 0; i < kParts; ++i) a.r[i] = hn::Zero(D8());
    return a;
}
inline vf vset1(float x) {
    vf a;
    for (int i = 0; i < kParts; ++i) a.r[i] = hn::Set(D8(), x);
    return a;
}
inline vf vload(const float* p) {
    vf a;
    for (int i = 0; i < kParts; ++i) a.r[i] = hn::LoadU(D8(), p + i * hn::MaxLanes(D8()));
    return a;
}
// Lanes n .. 15 are zero and their memory is never read (vmaskmovps does not fault on them).
inline vf vload_n(const float* p, int n) {
    constexpr int L = int(hn::MaxLanes(D8()));
    vf a;
    for (int i = 0; i < kParts; ++i)
        a.r[i] = hn::MaskedLoad(hn::FirstN(D8(), std::size_t(std::clamp(n - i * L, 0, L))), D8(), p + i * L);
    return a;
}
inline void vstore(float* p, vf a) {
    for (int i = 0; i < kParts; ++i) hn::StoreU(a.r[i], D8(), p + i * hn::MaxLanes(D8()));
}
inline void vstore_n(float* p, vf a, int n) {
    constexpr int L = int(hn::MaxLanes(D8()));
    for (int i = 0; i < kParts; ++i)
        hn::BlendedStore(a.r[i], hn::FirstN(D8(), std::size_t(std::clamp(n - i * L, 0, L))), D8(), p + i * L);
}
inline vf vfma(vf a, vf b, vf c) {  // a*b + c, one rounding (vfmadd)
    vf d;
    for (int i = 0; i < kParts; ++i) d.r[i] = hn::MulAdd(a.r[i], b.r[i], c.r[i]);
    return d;
}
inline vf vmask_after(vf a, int n) {
    constexpr int L = int(hn::MaxLanes(D8()));
    vf b;
    for (int i = 0; i < kParts; ++i)
        b.r[i] = hn::IfThenElse(hn::FirstN(D8(), std::size_t(std::clamp(n - i * L, 0, L))), a.r[i],
                                hn::Set(D8(), kNegInf));
    return b;
}
inline vf vmask_before(vf a, int n) {
    constexpr int L = int(hn::MaxLanes(D8()));
    vf b;
    for (int i = 0; i < kParts; ++i)
        b.r[i] = hn::IfThenElse(hn::FirstN(D8(), std::size_t(std::clamp(n - i * L, 0, L))), hn::Set(D8(), kNegInf),
                                a.r[i]);
    return b;
}
inline float vreduce_max(vf a) {
    V8 m = a.r[0];
    for (int i = 1; i < kParts; ++i) m = hn::Max(m, a.r[i]);
    return hn::GetLane(hn::MaxOfLanes(D8(), m));
}
// Keeps a loaded vector in registers: g++ otherwise folds the load into each FMA that uses it,
// and a key or value row used by two query rows is then loaded twice (the loads, not the FMAs,
// would bound the kernel). An empty asm the value must pass through forbids the folding.
inline void vpin(vf& a) {
    for (int i = 0; i < kParts; ++i) {
        auto x = a.r[i].raw;
        asm("" : "+x"(x));
        a.r[i].raw = x;
    }
}
// The pairwise tree of _mm512_reduce_add_ps (lanes l + l+8, then + l+4, + l+2, + l+1), so that
// a sum has the same bits on this path and the AVX-512 one.
inline float vreduce_add(vf a) {
    float t[kLanes];
    vstore(t, a);
    for (int w = kLanes / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) t[l] = t[l] + t[l + w];
    return t[0];
}
// The AVX-512 path's exp, step for step: the same reduction, polynomial and FMAs, and 2^n
// applied as one exact power-of-two factor, so that p * 2^n is rounded once, as vscalefps rounds
// it: the same bits on both paths. 2^n is a normal float for every lane that is not flushed
// (x >= kExpFlushBelow gives n >= -126); a flushed lane's factor is an exact 0. (Two factors
// 2^(n/2) and 2^(n - n/2), normal down to n = -150, give the same bits for every float x <= 0
// (compared for all 2^31 of them), with 5 more vector operations per 8 exps.)
inline vf vexp(vf x) {
    const D8 d;
    const hn::RebindToSigned<D8> di;
    vf y;
    for (int i = 0; i < kParts; ++i) {
        const V8 xc = hn::Max(hn::Set(d, -104.0f), x.r[i]);
        const V8 n = hn::Round(hn::Mul(xc, hn::Set(d, 1.44269504088896341f)));
        V8 r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), xc);
        r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
        V8 p = hn::Set(d, 1.0f / 5040.0f);
        p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720.0f));
        p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
        p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
        p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
        p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
        p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
        p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
        // n is an integer in [-150, 0] (NaN lanes: see below), so the plain truncating
        // conversion is exact; Highway's ConvertTo adds four operations that fix up lanes
        // beyond the int range. Causal prefill T = 2048: 1.01-1.02x as fast (AMD
        // EPYC Zen 3, in-process alternation, 20 rounds).
        const hn::Vec<decltype(di)> ni{_mm256_cvttps_epi32(n.raw)};
        // Lanes whose exp is below 2^-126 multiply by an exact 0, as the AVX-512 path flushes
        // them: a subnormal or underflowing product takes a microcode assist (~50 ns against
        // ~1.4 ns, Emerald Rapids). NaN is not < kExpFlushBelow.
        const auto dead = hn::Lt(x.r[i], hn::Set(d, kExpFlushBelow));
        const V8 s = hn::IfThenZeroElse(dead, hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(ni, hn::Set(di, 127)))));
        // A NaN input gives a NaN p (and a garbage n, whose factor is never a NaN: its
        // mantissa bits are 0): the product stays p's NaN, as with vscalefps.
        y.r[i] = hn::Mul(p, s);
    }
    return y;
}
#elif HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
struct vf {
    float r[kLanes];
};
inline vf vzero() { return vf{}; }
inline vf vset1(float x) {
    vf a;
    for (int l = 0; l < kLanes; ++l) a.r[l] = x;
    return a;
}
inline vf vload(const float* p) {
    vf a;
    for (int l = 0; l < kLanes; ++l) a.r[l] = p[l];
    return a;
}
inline vf vload_n(const float* p, int n) {
    vf a{};
    for (int l = 0; l < std::min(n, kLanes); ++l) a.r[l] = p[l];
    return a;
}
inline void vstore(float* p, vf a) {
    for (int l = 0; l < kLanes; ++l) p[l] = a.r[l];
}
inline void vstore_n(float* p, vf a, int n) {
    for (int l = 0; l < std::min(n, kLanes); ++l) p[l] = a.r[l];
}
#define ATTNCHECK_LANEWISE(name, expr)             \
    inline vf name(vf a, vf b) {                   \
        vf c;                                      \
        for (int l = 0; l < kLanes; ++l) c.r[l] = expr; \
        return c;                                  \
    }
ATTNCHECK_LANEWISE(vmul, a.r[l] * b.r[l])
ATTNCHECK_LANEWISE(vadd, a.r[l] + b.r[l])
ATTNCHECK_LANEWISE(vsub, a.r[l] - b.r[l])
ATTNCHECK_LANEWISE(vdiv, a.r[l] / b.r[l])
ATTNCHECK_LANEWISE(vmax, (std::isnan(a.r[l]) || std::isnan(b.r[l])) ? b.r[l] : std::max(a.r[l], b.r[l]))
#undef ATTNCHECK_LANEWISE
inline vf vfma(vf a, vf b, vf c) {
    vf d;
    for (int l = 0; l < kLanes; ++l) d.r[l] = std::fma(a.r[l], b.r[l], c.r[l]);
    return d;
}
inline vf vmask_after(vf a, int n) {  // a select on every lane, like the AVX-512 blend
    vf b;
    for (int l = 0; l < kLanes; ++l) b.r[l] = l < n ? a.r[l] : kNegInf;
    return b;
}
inline vf vmask_before(vf a, int n) {
    vf b;
    for (int l = 0; l < kLanes; ++l) b.r[l] = l < n ? kNegInf : a.r[l];
    return b;
}
inline float vreduce_max(vf a) {
    float m = a.r[0];
    for (int l = 1; l < kLanes; ++l) m = std::max(m, a.r[l]);
    return m;
}
inline float vreduce_add(vf a) {  // the same pairwise tree on every call
    for (int w = kLanes / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) a.r[l] = a.r[l] + a.r[l + w];
    return a.r[0];
}
inline void vpin(vf&) {}  // see the AVX2 version
// The portable path uses the C library's exp (correctly rounded or within 1 ulp in glibc).
inline vf vexp(vf x) {
    vf y;
    for (int l = 0; l < kLanes; ++l) y.r[l] = std::exp(x.r[l]);
    return y;
}
#else
#error "vec16.hpp: a target simd_targets.hpp does not compile (see HWY_DISABLED_TARGETS)"
#endif

// exp of one scalar through the same vector routine, so that scalar and vector uses agree.
inline float sexp(float x) {
    float tmp[kLanes];
    vstore(tmp, vexp(vset1(x)));
    return tmp[0];
}

}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNCHECK_OPTIMIZED_VEC16_HPP_
