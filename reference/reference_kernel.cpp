// reference/reference_kernel.cpp — the built-in "reference" kernel: attention.hpp behind the C ABI.
//
// The textbook computation (scores, -inf mask, softmax with the row maximum subtracted, P V) in
// float32, accumulating exactly as attention<float>() does, i.e. the float32 baseline of
// NUMERICS.md packaged as an attncheck_kernel_fn. It is the kernel every other one is compared
// with when the suite runs a kernel through the decoder, and a simple example of the ABI.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernels.hpp"
#include "reference/attention.hpp"

namespace {

// True when B*H*Tq*Dk, B*H*Tk*Dk, B*H*Tk*Dv and B*H*Tq*Dv all fit in size_t. The fields are
// int32, so a hostile problem could otherwise wrap the element counts and make the reference
// index past the caller's buffers.
bool element_counts_fit(const attncheck_problem& p) {
    const unsigned __int128 bh = (unsigned __int128)p.batch * (unsigned __int128)p.heads;
    const unsigned __int128 limit = (unsigned __int128)SIZE_MAX / 4;  // also bytes of float fit
    for (const int32_t rows : {p.q_len, p.kv_len})
        for (const int32_t width : {p.head_dim, p.value_dim})
            if (bh * (unsigned __int128)rows * (unsigned __int128)width > limit) return false;
    return true;
}

}  // namespace

extern "C" int attncheck_reference_kernel(const attncheck_problem* p, const float* q,
                                          const float* k, const float* v, float* out) {
    if (!p || !q || !k || !v || !out) return ATTNCHECK_UNSUPPORTED;
    // An exception must not cross the C boundary: anything that throws (an allocation that
    // fails for an absurd but well-formed size) is reported as unsupported.
    try {
        if (!attncheck::problem_error(*p).empty() || !element_counts_fit(*p))
            return ATTNCHECK_UNSUPPORTED;
        // out [B, H, Tq, Dv], computed into its own buffer first so that out is written only
        // once the whole result exists, and only within its B*H*Tq*Dv elements.
        const std::vector<float> result = attncheck::reference::attention<float>(*p, q, k, v);
        std::copy(result.begin(), result.end(), out);
        return ATTNCHECK_OK;
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
