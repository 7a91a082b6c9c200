// tests/zoo/correct_kernels.hpp — correct attention kernels that differ legitimately in how they
// evaluate in float32: the false-alarm side of NUMERICS.md version 2.
//
// A tolerance is only as good as its worst verdict on a CORRECT kernel. Each kernel here computes
// exactly the function of KERNEL_ABI.md (refuses an unknown abi_version or a malformed problem,
// gives 0 on a row with no visible key, deterministic, writes only out), but in an order or a
// formulation that real kernels use: another summation order, blocking, one-pass online softmax,
// split-KV with a log-sum-exp merge, the scale folded into q or into an exp2 base, float64
// accumulation, FMA. The bound of reference/error_bound.hpp must cover every one of them
// (tests/zoo/correct_kernels_test.cpp at a fixed slice, bench/bound_campaign at 10^6 cases).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"

namespace attncheck::zoo {

struct CorrectKernel {
    std::string name;  // short name, e.g. "online" (the campaign's --kernels filter)
    attncheck_kernel_fn fn;
    std::string how;   // what makes its float32 evaluation different
};

// Every correct kernel, (a) to (h) of correct_kernels.cpp.
const std::vector<CorrectKernel>& correct_kernels();

}  // namespace attncheck::zoo
