// optimized/attention_backward_plan.cpp — the plan of a call of
// attncheck_optimized_kernel_v2_backward (attention_backward.cpp): each sequence's lengths and
// blocks and where they lie in the packed buffers, the intervals of rows and keys a block's
// pairs span, and the work that chooses between the two work splits. Compiled once, not per
// target: nothing here touches a tensor's elements (declarations in attention_backward.hpp).
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys
// of a sequence, Dk = head_dim, Dv = value_dim.
#include "optimized/attention_backward.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem_v2.hpp"

namespace attncheck::optimized::backward_detail {

std::int64_t blocks_of(std::int64_t n) { return (n + kBlock - 1) / kBlock; }

Interval keys_of_rows(const attncheck_problem_v2& p, const Seq& s, std::int64_t i0, std::int64_t i1) {
    Interval all{std::numeric_limits<std::int64_t>::max(), -1};
    for (std::int64_t i = i0; i < std::min(i1, s.Tq); ++i) {
        const Interval k = keys_of_row(p, s.Tk, s.pos + i);
        if (k.empty()) continue;
        all.lo = std::min(all.lo, k.lo);
        all.hi = std::max(all.hi, k.hi);
    }
    return all;
}

Interval rows_of_keys(const attncheck_problem_v2& p, const Seq& s, std::int64_t j0, std::int64_t j1) {
    Interval all{std::numeric_limits<std::int64_t>::max(), -1};
    for (std::int64_t j = j0; j < std::min(j1, s.Tk); ++j) {
        const Interval r = rows_of_key(p, s.Tq, s.Tk, s.pos, j);
        if (r.empty()) continue;
        all.lo = std::min(all.lo, r.lo);
        all.hi = std::max(all.hi, r.hi);
    }
    return all;
}

double visible_pairs(const attncheck_problem_v2& p, const Seq& s) {
    double n = 0;
    for (std::int64_t i = 0; i < s.Tq; ++i) {
        const Interval k = keys_of_row(p, s.Tk, s.pos + i);
        if (!k.empty()) n += double(k.hi - k.lo + 1);
    }
    return n;
}

Plan make_plan(const attncheck_problem_v2& p) {
    Plan plan;
    plan.lay = {p.head_dim, p.value_dim};
    plan.G = p.q_heads / p.kv_heads;
    plan.seq.resize(std::size_t(p.batch));
    for (int b = 0; b < p.batch; ++b) {
        Seq& s = plan.seq[std::size_t(b)];
        s.Tq = q_len_of(p, b);
        s.Tk = kv_len_of(p, b);
        s.pos = p.q_pos[b];
        s.kv_rows = kv_rows_of(p, b);
        s.nqb = blocks_of(s.Tq);
        s.nkb = blocks_of(s.Tk);
        s.nkb_rows = blocks_of(s.kv_rows);
        s.qfirst = plan.qblocks;
        s.kfirst = plan.kblocks;
        plan.qblocks += s.nqb;
        plan.kblocks += s.nkb;
    }
    return plan;
}

bool fused_balances(std::vector<double> w, int threads) {
    if (threads <= 1) return true;
    double total = 0;
    for (const double x : w) total += x;
    if (total <= 0) return true;
    std::sort(w.begin(), w.end(), [](double a, double b) { return a > b; });
    std::vector<double> load(std::size_t(threads), 0.0);
    for (const double x : w) *std::min_element(load.begin(), load.end()) += x;
    return *std::max_element(load.begin(), load.end()) <= 1.25 * total / threads;
}

Split choose_split(const attncheck_problem_v2& p, const Plan& plan, int schedule, int threads) {
    const int Hk = p.kv_heads, G = plan.G;
    Split split;
    std::vector<double> work;  // per (sequence, kv head)
    for (int b = 0; b < p.batch; ++b) {
        const Seq& s = plan.seq[std::size_t(b)];
        split.dqt_floats = std::max(split.dqt_floats, G * s.nqb * plan.lay.Dk * kBlock);
        const double w = visible_pairs(p, s) * G;
        for (int hk = 0; hk < Hk; ++hk) work.push_back(w);
    }
    split.fused = split.dqt_floats <= kFusedScratchFloats && fused_balances(work, threads);
    if (schedule == int(Schedule::fused)) split.fused = true;
    if (schedule == int(Schedule::two_phase)) split.fused = false;
    if (split.fused) {
        split.order.resize(work.size());
        for (std::size_t n = 0; n < split.order.size(); ++n) split.order[n] = n;
        std::stable_sort(split.order.begin(), split.order.end(),
                         [&](std::size_t a, std::size_t c) { return work[a] > work[c]; });
    }
    return split;
}

namespace {
bool by_weight(const Task& a, const Task& c) { return a.weight > c.weight; }
}  // namespace

std::vector<Task> dkdv_tasks(const attncheck_problem_v2& p, const Plan& plan) {
    std::vector<Task> tasks;
    for (int b = 0; b < p.batch; ++b) {
        const Seq& s = plan.seq[std::size_t(b)];
        for (std::int64_t kb = 0; kb < s.nkb_rows; ++kb) {
            const Interval rows = rows_of_keys(p, s, kb * kBlock, (kb + 1) * kBlock);
            for (int hk = 0; hk < p.kv_heads; ++hk)
                tasks.push_back({b, hk, kb, rows.empty() ? 0 : rows.hi - rows.lo + 1});
        }
    }
    std::stable_sort(tasks.begin(), tasks.end(), by_weight);
    return tasks;
}

std::vector<Task> dq_tasks(const attncheck_problem_v2& p, const Plan& plan) {
    std::vector<Task> tasks;
    for (int b = 0; b < p.batch; ++b) {
        const Seq& s = plan.seq[std::size_t(b)];
        for (std::int64_t qb = 0; qb < s.nqb; ++qb) {
            const Interval keys = keys_of_rows(p, s, qb * kBlock, (qb + 1) * kBlock);
            for (int h = 0; h < p.q_heads; ++h)
                tasks.push_back({b, h, qb, keys.empty() ? 0 : keys.hi - keys.lo + 1});
        }
    }
    std::stable_sort(tasks.begin(), tasks.end(), by_weight);
    return tasks;
}

}  // namespace attncheck::optimized::backward_detail
