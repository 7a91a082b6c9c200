// optimized/attention_backward.hpp — internals of attncheck_optimized_kernel_v2_backward (the
// kernel itself is declared in attncheck/kernels.hpp) that its tests look at: the visibility
// intervals its blocking rests on, and a switch between its two work splits, which must give the
// same bits.
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys
// of a sequence, Dk = head_dim, Dv = value_dim.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attncheck/kernel_abi_v2.h"

namespace attncheck::optimized::backward_detail {

// Query rows per query block and keys per key block: the unit of packing, of skipping and of a
// task. Equal to the forward's key tile (attention_kernel.hpp, kTileKeys): the score kernel it
// shares computes 64 columns at a time.
inline constexpr int kBlock = 64;

// A closed interval of rows or keys, empty when lo > hi.
struct Interval {
    std::int64_t lo, hi;
    bool empty() const { return lo > hi; }
};

// The keys [lo, hi] that the row at absolute position a sees among Tk keys (the ABI's rule,
// visible_v2(), as one interval).
inline Interval keys_of_row(const attncheck_problem_v2& p, std::int64_t Tk, std::int64_t a) {
    Interval r{0, Tk - 1};
    if (p.causal)
        r.hi = std::min(r.hi, a);
    else if (p.window_right >= 0)
        r.hi = std::min(r.hi, a + p.window_right);
    if (p.window_left >= 0) r.lo = std::max(r.lo, a - p.window_left);
    return r;
}

// The rows [lo, hi] of a sequence (Tq rows, row 0 at position pos, Tk keys) that see key j: the
// same rule solved for the row. Each row's keys are an interval that moves right by at most one
// key per row, so the rows of a key are an interval too.
inline Interval rows_of_key(const attncheck_problem_v2& p, std::int64_t Tq, std::int64_t Tk, std::int64_t pos,
                            std::int64_t j) {
    if (j < 0 || j >= Tk) return {0, -1};
    Interval r{0, Tq - 1};
    if (p.causal)
        r.lo = std::max(r.lo, j - pos);
    else if (p.window_right >= 0)
        r.lo = std::max(r.lo, j - p.window_right - pos);
    if (p.window_left >= 0) r.hi = std::min(r.hi, j + p.window_left - pos);
    return r;
}

// The two work splits (attention_backward.cpp): `fused`, one task per (sequence, kv head) that
// computes dq, dk and dv in one pass; `two_phase`, dk and dv per (sequence, kv head, key block),
// then dq per (sequence, query head, query block). Both give the same bits; `automatic` picks by
// the thread count and the balance of the tasks.
enum class Schedule { automatic, fused, two_phase };
// For tests: the split every later call uses (not thread-safe against running kernels).
void set_schedule_for_test(Schedule s);

// The backward pass on the best instruction set, on a call already checked (grads_v2_error()
// empty, sizes that fit); may throw std::bad_alloc.
int run_backward(const attncheck_problem_v2& p, const attncheck_grads_v2& g);

}  // namespace attncheck::optimized::backward_detail
