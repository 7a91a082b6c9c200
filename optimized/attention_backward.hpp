// optimized/attention_backward.hpp — internals of attncheck_optimized_kernel_v2_backward (the
// kernel itself is declared in attncheck/kernels.hpp). What its tests look at: the visibility
// intervals its blocking rests on, and a switch between its two work splits, which must give the
// same bits. What its three files share: the plan of a call (attention_backward_plan.cpp,
// compiled once), and the dispatched pass (attention_backward.cpp) that its entry
// (attention_backward_entry.cpp) calls.
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys
// of a sequence, Dk = head_dim, Dv = value_dim.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/problem_v2.hpp"

namespace attncheck::optimized::backward_detail {

// Query rows per query block and keys per key block: the unit of packing, of skipping and of a
// task. Equal to the forward's key tile (attention_kernel.hpp, kTileKeys): the score kernel it
// shares computes 64 columns at a time.
inline constexpr int kBlock = 64;

// A closed interval of rows or keys, empty when lo > hi.
using Interval = attncheck::KeyInterval;

// The keys [lo, hi] that the row at absolute position a sees among Tk keys (the ABI's rule,
// visible_v2(), as one interval).
inline Interval keys_of_row(const attncheck_problem_v2& p, std::int64_t Tk, std::int64_t a) {
    return visible_keys_v2(p, Tk, a);
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

// ---- the plan of a call (attention_backward_plan.cpp): compiled once, read by every target ----

// One sequence of the call: its lengths, and where its blocks are in the packed buffers.
struct Seq {
    std::int64_t Tq = 0, Tk = 0, pos = 0;
    std::int64_t kv_rows = 0;  // dk / dv rows written (kv_rows_of(): padding included)
    std::int64_t nqb = 0;      // query blocks, ceil(Tq / 64)
    std::int64_t nkb = 0;      // key blocks of the keys, ceil(Tk / 64): the packed ones
    std::int64_t nkb_rows = 0; // key blocks of the dk / dv rows, ceil(kv_rows / 64)
    std::int64_t qfirst = 0, kfirst = 0;  // its first query / key block among all sequences'
};

// Floats of a packed query block: Q [64, Dk], Q^T [Dk, 64], dO [64, Dv], dO^T [Dv, 64],
// lse [64], D [64]; of a packed key block: K [64, Dk], K^T [Dk, 64], V [64, Dv]. Every part is
// a multiple of 16 floats, so each starts on a cache line when the block does.
struct Layout {
    std::int64_t Dk, Dv;
    std::int64_t qchunk() const { return 2 * kBlock * (Dk + Dv) + 2 * kBlock; }
    std::int64_t kchunk() const { return 2 * kBlock * Dk + kBlock * Dv; }
    std::int64_t q_t() const { return kBlock * Dk; }
    std::int64_t dout() const { return 2 * kBlock * Dk; }
    std::int64_t dout_t() const { return 2 * kBlock * Dk + kBlock * Dv; }
    std::int64_t lse() const { return 2 * kBlock * (Dk + Dv); }
    std::int64_t d() const { return lse() + kBlock; }
    std::int64_t k_t() const { return kBlock * Dk; }
    std::int64_t v() const { return 2 * kBlock * Dk; }
};

struct Plan {
    std::vector<Seq> seq;
    std::int64_t qblocks = 0, kblocks = 0;  // packed blocks of all sequences (per head)
    Layout lay{};
    int G = 1;
};

std::int64_t blocks_of(std::int64_t n);

// The keys seen by rows [i0, i1) of sequence s, one interval (see rows_of_key).
Interval keys_of_rows(const attncheck_problem_v2& p, const Seq& s, std::int64_t i0, std::int64_t i1);

// The rows that see keys [j0, j1) of sequence s, one interval.
Interval rows_of_keys(const attncheck_problem_v2& p, const Seq& s, std::int64_t j0, std::int64_t j1);

// Visible (row, key) pairs of sequence s for one query head: its work.
double visible_pairs(const attncheck_problem_v2& p, const Seq& s);

Plan make_plan(const attncheck_problem_v2& p);

// Whether the fused split's B * Hk tasks, work w each (largest first, each to the least loaded
// of `threads`), finish within 1.25x of a perfect split: the two-phase split does 7/5 of the
// work, so below that the fused one is faster.
bool fused_balances(std::vector<double> w, int threads);

// The fused split keeps each task's dQ^T (G heads x the sequence's query blocks) in its scratch:
// at most this many floats (16 MiB) per thread, else two_phase.
inline constexpr std::int64_t kFusedScratchFloats = std::int64_t(4) << 20;

// The split of a call: fused when `schedule` (an int(Schedule)) says so, or, when it says
// automatic, where the fused split's dQ^T fits kFusedScratchFloats and its B * Hk tasks balance
// over `threads` (fused_balances); else two_phase.
struct Split {
    bool fused = false;
    std::vector<std::size_t> order;  // fused: tasks (sequence b, kv head hk) as b * Hk + hk, heaviest first
    std::int64_t dqt_floats = 0;     // fused: a task's dQ^T floats at most, G * nqb * Dk * 64
};
Split choose_split(const attncheck_problem_v2& p, const Plan& plan, int schedule, int threads);

// A task of the two-phase split: block blk of head `head` of sequence b, and its weight.
struct Task {
    int b, head;
    std::int64_t blk;
    std::int64_t weight;
};
// dk, dv: tasks (sequence, kv head, key block), weighted by the rows that see its keys, those
// seen by the most rows first (under causality, the first key blocks).
std::vector<Task> dkdv_tasks(const attncheck_problem_v2& p, const Plan& plan);
// dq: tasks (sequence, query head, query block), weighted by the keys its rows see, those that
// see the most keys first.
std::vector<Task> dq_tasks(const attncheck_problem_v2& p, const Plan& plan);

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

namespace attncheck::optimized::attention_detail {
// The backward pass on the instruction set isa_choice() picks (attention_backward.cpp, per
// target), under the work split int(backward_detail::Schedule) `schedule`; what run_backward()
// calls, with the same contract.
int run_backward_dispatched(const attncheck_problem_v2& p, const attncheck_grads_v2& g, int schedule);
}  // namespace attncheck::optimized::attention_detail
