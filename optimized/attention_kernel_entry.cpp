// optimized/attention_kernel_entry.cpp — the version 1 entry points of the built-in fast attention
// kernel: attncheck_optimized_kernel on contiguous tensors and strided_kernel on views, each
// checking the problem, its sizes and its views, then posing it as the version 2 problem it is
// (float32, one kv head per head, q_pos = q_offset for every sequence, kv_valid_len as kv_lens)
// for the one kernel behind both ABIs (attention_v2.cpp).
#include <cstdint>
#include <vector>

#include "attncheck/abi_v1.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernels.hpp"
#include "attncheck/problem.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/attention_v2.hpp"

namespace attncheck::optimized::attention_detail {
namespace {

// True when the last element of every view (the largest offset, strides being non-negative)
// fits in int64 with room, so no index wraps.
bool views_fit(const attncheck_problem& p, const Strides& st) {
    const unsigned __int128 limit = (unsigned __int128)INT64_MAX / 4;
    const auto last = [&](const std::int64_t (&s)[3], std::int32_t rows, std::int32_t width) {
        return (unsigned __int128)(p.batch - 1) * (unsigned __int128)s[0] +
               (unsigned __int128)(p.heads - 1) * (unsigned __int128)s[1] +
               (unsigned __int128)(rows - 1) * (unsigned __int128)s[2] + (unsigned __int128)(width - 1);
    };
    // Tiled keys: a head's [ceil(Tk / 64), Dk, 64] floats from its first.
    const bool k_fits = st.k_tiled ? (unsigned __int128)(p.batch - 1) * (unsigned __int128)st.k[0] +
                                             (unsigned __int128)(p.heads - 1) * (unsigned __int128)st.k[1] +
                                             (unsigned __int128)tiled_key_floats(p.kv_len, p.head_dim) <=
                                         limit
                                   : last(st.k, p.kv_len, p.head_dim) <= limit;
    return last(st.q, p.q_len, p.head_dim) <= limit && k_fits &&
           last(st.v, p.kv_len, p.value_dim) <= limit && last(st.out, p.q_len, p.value_dim) <= limit;
}

}  // namespace

int run_v1(const attncheck_problem& p, const Strides& st, const float* q, const float* k, const float* v, float* out) {
    thread_local std::vector<std::int32_t> q_pos;  // kept between calls: a decoder's step allocates nothing
    q_pos.assign(std::size_t(p.batch), p.q_offset);
    attncheck_problem_v2 v2 = v2_fields_of(p, q_pos.data());
    const auto view = [](attncheck_tensor_v2& t, const void* data, const std::int64_t (&s)[3]) {
        t.data = const_cast<void*>(data);
        t.stride[0] = s[0], t.stride[1] = s[1], t.stride[2] = s[2], t.stride[3] = 1;
    };
    view(v2.q, q, st.q);
    view(v2.k, k, st.k);
    view(v2.v, v, st.v);
    view(v2.out, out, st.out);
    return run_v2(v2, {.k_tiled = st.k_tiled});
}

}  // namespace attncheck::optimized::attention_detail

extern "C" int attncheck_optimized_kernel(const attncheck_problem* p, const float* q, const float* k,
                                          const float* v, float* out) {
    namespace detail = attncheck::optimized::attention_detail;
    if (!p || !q || !k || !v || !out) return ATTNCHECK_UNSUPPORTED;
    // No exception may cross the C boundary: a failed allocation reports "unsupported".
    try {
        if (!attncheck::problem_error(*p).empty()) return ATTNCHECK_UNSUPPORTED;
        if (!attncheck::element_counts_fit(*p)) return ATTNCHECK_UNSUPPORTED;
        const std::int64_t Tq = p->q_len, Tk = p->kv_len, H = p->heads, Dk = p->head_dim, Dv = p->value_dim;
        const detail::Strides dense{.q = {H * Tq * Dk, Tq * Dk, Dk},
                                    .k = {H * Tk * Dk, Tk * Dk, Dk},
                                    .v = {H * Tk * Dv, Tk * Dv, Dv},
                                    .out = {H * Tq * Dv, Tq * Dv, Dv}};
        return detail::run_v1(*p, dense, q, k, v, out);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}

namespace attncheck::optimized::attention_detail {

int strided_kernel(const attncheck_problem& p, const Strides& st, const float* q, const float* k, const float* v,
                   float* out) {
    if (!q || !k || !v || !out) return ATTNCHECK_UNSUPPORTED;
    try {
        if (!attncheck::problem_error(p).empty()) return ATTNCHECK_UNSUPPORTED;
        for (const std::int64_t* s : {st.q, st.k, st.v, st.out})
            if (s[0] < 0 || s[1] < 0 || s[2] < 0) return ATTNCHECK_UNSUPPORTED;
        if (!attncheck::element_counts_fit(p) || !views_fit(p, st)) return ATTNCHECK_UNSUPPORTED;
        return run_v1(p, st, q, k, v, out);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}

}  // namespace attncheck::optimized::attention_detail
