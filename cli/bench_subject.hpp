// cli/bench_subject.hpp — what `attncheck bench` calls and how it checks a kernel before timing
// it: a Subject is one kernel on one shape, called on the shape's float32 version 1 problem or on
// its version 2 view in the kernel's dtype (ProblemV2), forward or backward; check() and
// check_backward() compare one call with the float64 oracles (reference/attention_v2.hpp,
// reference/attention_grad.hpp) on the checked heads and throw Refusal for a disagreement.
//
// Dimension legend: B = batch (1), H = heads, Tq / Tk = rows, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem_v2.hpp"
#include "cli/bench_run.hpp"
#include "perf/kernel_shapes.hpp"

namespace attncheck::cli::bench {

// The float64 oracle with its error bound costs far more than the kernel: about a second per head
// of prefill-2048 on a 2020s Xeon core (9 s for all 8; the backward's three times that), so
// problems with more (query, key) pairs per head than this are checked on their first and last
// heads only, of the same call's output. Every head of the other standard shapes is checked
// (prefill-512: 0.07 s a head).
inline constexpr double kFullCheckPairs = 1 << 20;

// The heads of a problem the oracle checks: all of them, or the first and the last.
std::vector<int> checked_heads(const attncheck_problem& p);
// "all 8 heads", "heads 0 and 7 of 8".
std::string describe_heads(const std::vector<int>& checked, int heads);

// n elements of a dtype in float-aligned storage.
struct Elements {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    std::vector<float> slots;
    Elements() = default;
    Elements(std::int32_t dt, std::size_t n) : dtype(dt), slots((n * dtype_size(dt) + 3) / 4) {}
    void* data() { return slots.data(); }
    float at(std::size_t i) const;
    void set(std::size_t i, float x);
    // NaN in every element, so that one a kernel leaves unwritten fails the check.
    void poison();
};

// A version 2 kernel's problem on a shape: the version 1 problem's values rounded to the kernel's
// dtype (f32: the same buffers), [B, H, T, D] dense, one kv head per query head, q_pos = the
// shape's q_offset (every standard shape is bottom-right aligned: q_offset + Tq = Tk). For the
// backward it owns out and lse, which the kernel's own forward writes and its backward reads,
// dout (uniform in [-1, 1) from a fixed seed, rounded to the dtype), dq, dk and dv.
struct ProblemV2 {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    bool backward = false;
    Elements q, k, v;          // f16 / bf16 only (f32 reads the version 1 problem's)
    Elements out;              // f16 / bf16, or the backward's
    Elements dout, dq, dk, dv; // the backward's
    std::vector<float> lse;    // [B, H, Tq], the backward's
    std::int32_t q_pos = 0;
    attncheck_problem_v2 p{};  // on_copy() sets the data pointers and q_pos
    attncheck_grads_v2 g{};    // grads() sets the data pointers

    ProblemV2(const perf::KernelProblem& pr, std::int32_t dt, bool backward);
    // The problem on K/V copy `copy` (pr holds the float32 storage and the copy count).
    const attncheck_problem_v2& on_copy(perf::KernelProblem& pr, int copy);
    const attncheck_grads_v2& grads();
    // Element i of out ([B, H, Tq, Dv], its storage order) as a float.
    float out_at(const perf::KernelProblem& pr, std::size_t i) const;
    void poison_out(perf::KernelProblem& pr);
};

// The float64 oracle of one head of a problem and the bound any correct evaluation meets: [Tq, Dv].
struct HeadOracle {
    std::vector<double> value, bound;
};

// One kernel on one shape: what it is called with (the version 1 problem, or its version 2 view).
struct Subject {
    const Kernel* kernel;
    perf::KernelProblem* pr;
    bool backward;
    std::unique_ptr<ProblemV2> v2;
    Subject(const Kernel& k, perf::KernelProblem& problem, bool backward);
    int forward(int copy);
    // What is timed: the forward on K/V copy `copy`, or the backward (on copy 0, after a forward).
    int call(int copy);
    // The K/V bytes a forward call must read, in the kernel's dtype.
    double kv_bytes() const;
};

std::string shape_line(const perf::KernelShape& s);
// "kernel K returned RC ..." (K's backward for the backward pass).
Refusal refused(const Kernel& k, const perf::KernelShape& s, int rc, bool backward);

// A version 2 kernel whose declaration rules the shape out is refused before any call.
void check_declared(Subject& sub, const perf::KernelShape& s);
// The forward oracle of each checked head for what the subject reads.
std::vector<HeadOracle> oracles_of(Subject& sub, const std::vector<int>& heads);
// Whether two subjects read the same inputs with the same bound (then one forward oracle serves both).
bool same_oracle(const Subject& a, const Subject& b);
// One forward call on copy 0 compared with the oracle of each checked head (oracles[i] of
// heads[i]); returns the worst test ratio, or throws Refusal. For the backward, this call's out
// and lse are what the backward reads.
double check(Subject& sub, const perf::KernelShape& s, const std::vector<int>& heads,
             const std::vector<HeadOracle>& oracles);
// One backward call (after check()) compared with the gradient oracle of each checked head for
// the out and lse the kernel's forward wrote, every element of dq, dk and dv written; returns the
// worst test ratio, or throws Refusal.
double check_backward(Subject& sub, const perf::KernelShape& s, const std::vector<int>& heads);

}  // namespace attncheck::cli::bench
