// optimized/attention_v2.hpp — internals of attncheck_optimized_kernel_v2 that tests look at.
//
// The kernel itself is declared in attncheck/kernels.hpp. Here: its float16 conversion, which
// must give exactly attncheck::f16_to_float's bits (tested on all 65536 patterns), in a form
// without branches so that a loop over a row of float16 vectorizes.
#pragma once

#include <cstdint>

#include "attncheck/problem_v2.hpp"

namespace attncheck::optimized::attention_detail {
// What a caller inside the library can hand the kernel beyond the ABI.
struct RunOptions {
    // p.k holds each (sequence, kv head)'s keys already in the kernel's key tiles (dense only):
    // head (b, hk) at k + b * k.stride[0] + hk * k.stride[1] is [ceil(Tk / 64), Dk, 64], float32,
    // as attention_kernel.hpp's Strides::k_tiled describes (a decoder Session's cache).
    bool k_tiled = false;
};
// The one fused attention kernel, behind both entry points (attncheck_optimized_kernel_v2 and
// attncheck_optimized_kernel), on the best instruction set: any well-formed problem whose sizes
// fit (attention_v2.cpp; may throw std::bad_alloc).
int run_v2(const attncheck_problem_v2& p, const RunOptions& options = {});
}  // namespace attncheck::optimized::attention_detail

namespace attncheck::optimized::attention_v2_detail {

// IEEE binary16 bits to float32, exactly. The magnitude bits shifted into a float32's place
// read as 2^-112 times the value (normal halves become normal floats, subnormal halves
// subnormal ones), and the product by 2^112 is exact; Inf and NaN (exponent all ones) keep
// their payload under an all-ones float32 exponent, chosen by a mask instead of a branch.
inline float f16_to_float_branchless(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t em = h & 0x7fffu;
    const float magnitude = bits_to_float(em << 13) * 0x1p112f;
    const std::uint32_t special = 0u - std::uint32_t(em >= 0x7c00u);  // all ones for Inf and NaN
    const std::uint32_t bits = (((em << 13) | 0x7f800000u) & special) | (float_to_bits(magnitude) & ~special);
    return bits_to_float(bits | sign);
}

}  // namespace attncheck::optimized::attention_v2_detail
