// optimized/attention_v2_entry.cpp — attncheck_optimized_kernel_v2, the fused attention kernel of
// kernel ABI version 2 (attncheck/kernel_abi_v2.h): its argument checks, its fast path, and the
// general path (attention_v2.cpp) for everything else.
//
// Fast path. A problem that version 1 can express but for its layout (float32, Hq = Hk, one
// q_pos for every sequence, equal Tq, kv_lens as v1 padding, and no window, softcap, ALiBi,
// pages, varlen or lse), its tensors' rows contiguous at any (sequence, head, row) strides, goes
// to attncheck_optimized_kernel's arithmetic on the views themselves (strided_kernel): a
// decoder's q, k and v read in place from its [T, 3d] projection rows, and out written into
// its [T, d] rows, with no copy.
#include <cstdint>

#include "attncheck/abi_v1.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/attention_v2.hpp"

namespace attncheck::optimized::attention_v2_detail {
namespace {

// Whether view t's rows of `width` elements are contiguous (a stride of an extent-1 dimension is
// never used, so any value is accepted there).
bool rows_contiguous(const attncheck_tensor_v2& t, std::int64_t width) { return width == 1 || t.stride[3] == 1; }

// Whether p says nothing that version 1 cannot say, and its tensors' rows are contiguous.
bool v1_expressible(const attncheck_problem_v2& p) {
    return !attncheck::beyond_v1_features(p) && rows_contiguous(p.q, p.head_dim) && rows_contiguous(p.k, p.head_dim) &&
           rows_contiguous(p.v, p.value_dim) && rows_contiguous(p.out, p.value_dim);
}

attncheck::optimized::attention_detail::Strides strides_of(const attncheck_problem_v2& p) {
    const auto three = [](const attncheck_tensor_v2& t, std::int64_t (&s)[3]) {
        for (int d = 0; d < 3; ++d) s[d] = t.stride[d];
    };
    attncheck::optimized::attention_detail::Strides st{};
    three(p.q, st.q);
    three(p.k, st.k);
    three(p.v, st.v);
    three(p.out, st.out);
    return st;
}

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
        if (detail::v1_expressible(*p)) {
            const attncheck_problem v1 = attncheck::v1_fields_of(*p);
            return attncheck::optimized::attention_detail::strided_kernel(
                v1, detail::strides_of(*p), static_cast<const float*>(p->q.data),
                static_cast<const float*>(p->k.data), static_cast<const float*>(p->v.data),
                static_cast<float*>(p->out.data));
        }
        return attncheck::optimized::attention_detail::run_v2(*p);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
