// optimized/element_rows.hpp — one row of a tensor of kernel ABI version 2 between its dtype
// (float32, bfloat16, float16) and float32, at any element stride: load_row for the inputs that
// attention_v2.cpp and attention_backward.cpp convert once, store_row for the gradients that
// attention_backward.cpp rounds once when it writes them.
//
// Per target, like attention_tile.hpp (included once per target of simd_targets.hpp by a file that
// includes hwy/foreach_target.h): the loops are compiled, and auto-vectorized, for each target.
#include <cstdint>

#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_v2.hpp"
#include "optimized/simd_targets.hpp"
#include <hwy/highway.h>

#if defined(ATTNCHECK_OPTIMIZED_ELEMENT_ROWS_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNCHECK_OPTIMIZED_ELEMENT_ROWS_HPP_
#undef ATTNCHECK_OPTIMIZED_ELEMENT_ROWS_HPP_
#else
#define ATTNCHECK_OPTIMIZED_ELEMENT_ROWS_HPP_
#endif

HWY_BEFORE_NAMESPACE();
namespace attncheck::optimized::attention_detail::HWY_NAMESPACE {
// Internal linkage: each kernel's file has its own copy.
namespace {

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
        load_elements<std::uint16_t>(data, offset, stride, n, dst, [](std::uint16_t h) {
            return attention_v2_detail::f16_to_float_branchless(h);
        });
        break;
    default: load_elements<float>(data, offset, stride, n, dst, [](float x) { return x; });
    }
}

// Element offset + c * stride of data = src[c] rounded to the dtype (to nearest even), c < n.
// (attention_v2.cpp writes its output with loops of its own: unused there.)
[[maybe_unused]] void store_row(std::int32_t dtype, void* data, std::int64_t offset, std::int64_t stride,
                                std::int64_t n, const float* src) {
    if (dtype == ATTNCHECK_DTYPE_F32) {
        float* dst = static_cast<float*>(data) + offset;
        for (std::int64_t c = 0; c < n; ++c) dst[c * stride] = src[c];
    } else if (dtype == ATTNCHECK_DTYPE_BF16) {
        std::uint16_t* dst = static_cast<std::uint16_t*>(data) + offset;
        for (std::int64_t c = 0; c < n; ++c) dst[c * stride] = float_to_bf16(src[c]);
    } else {
        std::uint16_t* dst = static_cast<std::uint16_t*>(data) + offset;
        for (std::int64_t c = 0; c < n; ++c) dst[c * stride] = float_to_f16(src[c]);
    }
}

}  // namespace
}  // namespace attncheck::optimized::attention_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNCHECK_OPTIMIZED_ELEMENT_ROWS_HPP_
