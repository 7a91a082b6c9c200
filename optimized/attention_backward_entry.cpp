// optimized/attention_backward_entry.cpp — attncheck_optimized_kernel_v2_backward, the backward
// pass of kernel ABI version 2 (attncheck/kernel_abi_v2.h, attncheck_grads_v2): its argument
// checks, the switch between its work splits that tests set, and the call of the pass itself
// (attention_backward.cpp) on the instruction set of this CPU, and the sinks' gradients.
#include <atomic>
#include <cmath>
#include <cstdint>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_backward.hpp"

namespace attncheck::optimized::backward_detail {
namespace {
std::atomic<int> g_schedule{int(Schedule::automatic)};

// Products of sizes that index a tensor, and the packed blocks' floats, must fit int64 with room;
// the ABI's int32 fields keep each factor small, but their products could still overflow.
bool sizes_fit(const attncheck_problem_v2& p) {
    const unsigned __int128 limit = (unsigned __int128)INT64_MAX / 16;
    const unsigned __int128 b = unsigned(p.batch), h = unsigned(p.q_heads);
    const unsigned __int128 width = unsigned(p.head_dim) + unsigned(p.value_dim) + 1;
    for (const std::int32_t rows : {p.q_len, p.kv_len})
        if (b * h * (unsigned(rows) + unsigned(kBlock)) * 2 * width > limit) return false;
    return true;
}

// dsinks[h] = -sum over the rows of query head h of exp(sinks[h] - lse) D, D = dout . out, in
// float32, the rows of every sequence in order (the same bits on any thread count). A row with no
// visible key has out = 0, so D = 0: it adds nothing.
void sink_gradients(const attncheck_problem_v2& p, const attncheck_grads_v2& g) {
    for (int h = 0; h < p.q_heads; ++h) {
        float acc = 0.0f;
        for (int b = 0; b < p.batch; ++b)
            for (int i = 0; i < q_len_of(p, b); ++i) {
                float D = 0.0f;
                for (int c = 0; c < p.value_dim; ++c)
                    D += load_element(p.dtype, g.dout.data, q_offset_v2(p, g.dout, b, h, i, c)) *
                         load_element(p.dtype, p.out.data, q_offset_v2(p, p.out, b, h, i, c));
                if (D != 0.0f) acc -= std::exp(p.sinks[h] - p.lse[lse_offset_v2(p, b, h, i)]) * D;
            }
        g.dsinks[h] = acc;
    }
}
}  // namespace

void set_schedule_for_test(Schedule s) { g_schedule.store(int(s)); }

int run_backward(const attncheck_problem_v2& p, const attncheck_grads_v2& g) {
    const int rc = attention_detail::run_backward_dispatched(p, g, g_schedule.load());
    if (rc == ATTNCHECK_OK && p.sinks) sink_gradients(p, g);
    return rc;
}
}  // namespace attncheck::optimized::backward_detail

extern "C" int attncheck_optimized_kernel_v2_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g) {
    namespace bd = attncheck::optimized::backward_detail;
    if (!p || !g) return ATTNCHECK_UNSUPPORTED;
    // No exception may cross the C boundary: a failed allocation reports "unsupported".
    try {
        if (!attncheck::grads_v2_error(*p, *g).empty() || !bd::sizes_fit(*p)) return ATTNCHECK_UNSUPPORTED;
        return bd::run_backward(*p, *g);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
