// attncheck/kernels.hpp — the built-in attention kernels' C entry points.
//
// The first two follow attncheck/kernel_abi.h, the last attncheck/kernel_abi_v2.h. The registry that names them (with the mutant zoo) is
// kernels/registry.hpp: what `attncheck fuzz` iterates over and `--kernel NAME` looks up.
#pragma once

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
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
// The fast kernel for all of version 2 (f16/bf16, strides, GQA, varlen, windows, softcap, ALiBi,
// paged K/V, lse); a problem version 1 can express goes to attncheck_optimized_kernel unchanged.
// Returns ATTNCHECK_UNSUPPORTED for a malformed problem (problem_v2_error() not empty).
int attncheck_optimized_kernel_v2(const attncheck_problem_v2* p);

// Backward passes (kernel_abi_v2.h, attncheck_grads_v2). Return ATTNCHECK_UNSUPPORTED for a
// malformed call (grads_v2_error() not empty).
// The float64 oracle's gradients (reference/attention_grad.hpp) rounded to the dtype.
int attncheck_reference_kernel_v2_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g);
// FlashAttention-2's backward on a CPU: P recomputed from lse, dS = P (dP - D); OpenMP over key
// blocks for dk and dv and over query blocks for dq, no atomics: deterministic.
int attncheck_optimized_kernel_v2_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g);
}
