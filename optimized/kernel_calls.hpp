// optimized/kernel_calls.hpp — the one place the decoder calls an attention kernel: the problems
// of the model's shape (version 1 and 2), the calls, and what they do for a kernel's declared
// conventions (KernelRef: NaN on empty rows read as 0, exact kv_len one sequence at a time).
// Internal to optimized/.
#pragma once

#include <cstdint>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "optimized/attention_kernel.hpp"
#include "optimized/attention_policy.hpp"

namespace attncheck::optimized {

// ---- version 1 (KernelRef::fn) ----
// A float32 problem of the model's shape (scale and widths from P).
attncheck_problem make_problem(const PackedWeights& P, int batch, int heads, int q_len, int kv_len, int q_offset,
                               bool causal, const int32_t* kv_valid_len);
// The kernel on [B, H, T, D] tensors; KernelError when it returns nonzero ("for the <where> problem").
void call_kernel(const KernelRef& kernel, const attncheck_problem& p, const float* q, const float* k, const float* v,
                 float* out, const char* where);
// The built-in kernel on views of the decoder's own rows (KernelRef::builtin).
void call_builtin(const attncheck_problem& p, const attention_detail::Strides& st, const float* q, const float* k,
                  const float* v, float* out, const char* where);

// ---- version 2 (KernelRef::fn_v2) ----
// A float32 problem of the model's shape, tensors to be set by the caller.
attncheck_problem_v2 problem_v2(const PackedWeights& P, int batch, int q_heads, int kv_heads, int q_len, int kv_len,
                                const int32_t* q_pos, const int32_t* kv_lens, bool causal, int window);
// A contiguous [*, heads, rows, dk] tensor at data.
attncheck_tensor_v2 dense_tensor(const float* data, int heads, int rows, int dk);
// Cross-attention of q_len rows of `batch` sequences against the memory K/V [batch, H, S, dk] of
// one layer (valid_len per sequence), not causal; q and out to be set by the caller.
attncheck_problem_v2 memory_problem_v2(const PackedWeights& P, int batch, int q_len, const int32_t* q_pos,
                                       const float* k, const float* v, int S, const int32_t* valid);
// Layer l of a version 2 cache as the problem's k and v: paged through its table (sequences
// [b0, b0 + batch) of it), or dense.
void set_cache(attncheck_problem_v2& p, const PagedCache& pool, int l, int b0, int hkv, int dk);
// The kernel on p (KernelError when it returns nonzero); under KernelRef::exact_kv_len a dense
// call with kv_lens is made one sequence at a time with kv_len = its keys.
void call_kernel_v2(const KernelRef& kernel, const attncheck_problem_v2& p, const char* where);

}  // namespace attncheck::optimized
