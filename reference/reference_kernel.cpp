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

#include "attncheck/abi_v1.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernels.hpp"
#include "reference/attention.hpp"

extern "C" int attncheck_reference_kernel(const attncheck_problem* p, const float* q,
                                          const float* k, const float* v, float* out) {
    if (!p || !q || !k || !v || !out) return ATTNCHECK_UNSUPPORTED;
    // An exception must not cross the C boundary: anything that throws (an allocation that
    // fails for an absurd but well-formed size) is reported as unsupported.
    try {
        if (!attncheck::problem_error(*p).empty() || !attncheck::element_counts_fit(*p))
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
