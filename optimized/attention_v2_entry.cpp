// optimized/attention_v2_entry.cpp — attncheck_optimized_kernel_v2, the fused attention kernel of
// kernel ABI version 2 (attncheck/kernel_abi_v2.h): its argument checks, then the kernel
// (attention_v2.cpp), the same one version 1's entry points run (attention_kernel_entry.cpp).
#include <cstdint>

#include "attncheck/kernel_abi_v2.h"
#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_v2.hpp"

namespace attncheck::optimized::attention_v2_detail {
namespace {

// Products of sizes that index a tensor must fit int64 with room; the ABI's int32 fields keep
// each factor small, but B * H * T * D could still overflow in a hostile problem.
bool sizes_fit(const attncheck_problem_v2& p) {
    const unsigned __int128 limit = (unsigned __int128)INT64_MAX / 4;
    const unsigned __int128 b = unsigned(p.batch), h = unsigned(p.q_heads);
    for (const std::int32_t rows : {p.q_len, p.kv_len})
        for (const std::int32_t width : {p.head_dim, p.value_dim})
            if (b * h * unsigned(rows) * unsigned(width) > limit) return false;
    return true;
}

}  // namespace
}  // namespace attncheck::optimized::attention_v2_detail

extern "C" int attncheck_optimized_kernel_v2(const attncheck_problem_v2* p) {
    namespace detail = attncheck::optimized::attention_v2_detail;
    if (!p) return ATTNCHECK_UNSUPPORTED;
    // No exception may cross the C boundary: a failed allocation reports "unsupported".
    try {
        if (!attncheck::problem_v2_error(*p).empty() || !detail::sizes_fit(*p)) return ATTNCHECK_UNSUPPORTED;
        return attncheck::optimized::attention_detail::run_v2(*p);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
