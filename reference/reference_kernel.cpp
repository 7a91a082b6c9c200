// reference/reference_kernel.cpp — the built-in "reference" kernel of version 1 of the ABI: the
// reference kernel of version 2 (attention_v2.cpp) behind version 1's entry point.
//
// A version 1 call is posed as the version 2 problem it is (abi_v1.hpp: float32, one kv head per
// head, q_pos = q_offset for every sequence, kv_valid_len as kv_lens, contiguous [B, H, T, D])
// and answered by the float64 oracle's values rounded to float32: one reference implementation
// behind both entry points, as the built-in optimized kernel is one. It is the kernel every other
// one is compared with when the suite runs a kernel through the decoder, and a simple example of
// the ABI. (The float32 textbook evaluation NUMERICS.md calls the float32 baseline is
// attention<float>() of attention.hpp, which the reference decoder runs.)
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/abi_v1.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernels.hpp"
#include "attncheck/problem.hpp"
#include "reference/attention_v2.hpp"

extern "C" int attncheck_reference_kernel(const attncheck_problem* p, const float* q, const float* k,
                                          const float* v, float* out) {
    if (!p || !q || !k || !v || !out) return ATTNCHECK_UNSUPPORTED;
    // An exception must not cross the C boundary: anything that throws (an allocation that
    // fails for an absurd but well-formed size) is reported as unsupported.
    try {
        if (!attncheck::problem_error(*p).empty() || !attncheck::element_counts_fit(*p)) return ATTNCHECK_UNSUPPORTED;
        const std::vector<std::int32_t> q_pos(std::size_t(p->batch), p->q_offset);
        attncheck_problem_v2 v2 = attncheck::v2_fields_of(*p, q_pos.data());
        v2.q.data = const_cast<float*>(q);
        v2.k.data = const_cast<float*>(k);
        v2.v.data = const_cast<float*>(v);
        v2.out.data = out;
        // The version 2 kernel writes out only once the whole result exists, and only within
        // its B*H*Tq*Dv elements.
        return attncheck_reference_kernel_v2(&v2);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
