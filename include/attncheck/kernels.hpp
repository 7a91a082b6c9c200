// attncheck/kernels.hpp — the built-in attention kernels, by registry name.
//
// Every kernel here follows attncheck/kernel_abi.h. The registry is what `attncheck fuzz`
// iterates over and what `--kernel NAME` looks up.
#pragma once

#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/problem.hpp"

extern "C" {
// The textbook kernel: scores, masked softmax with max-subtraction, probabilities times values,
// in float32 (the reference decoder's attention in float). Returns nonzero for a malformed
// problem (wrong abi_version, a non-positive size, q_offset < 0, a kv_valid_len outside
// [0, kv_len]).
int attncheck_reference_kernel(const attncheck_problem* p, const float* q, const float* k,
                               const float* v, float* out);
// The fast kernel of optimized/: fused online softmax over key tiles, OpenMP, deterministic.
int attncheck_optimized_kernel(const attncheck_problem* p, const float* q, const float* k,
                               const float* v, float* out);
}

namespace attncheck {

struct KernelEntry {
    std::string name;
    attncheck_kernel_fn fn;
    std::string description;
    // What the kernel declares (attncheck/declaration.hpp); "": every problem, empty rows 0,
    // deterministic (both built-ins).
    std::string declaration;
};

// reference, optimized (in that order).
const std::vector<KernelEntry>& builtin_kernels();
// nullptr when there is no built-in kernel of that name.
const KernelEntry* find_builtin_kernel(const std::string& name);

}  // namespace attncheck
