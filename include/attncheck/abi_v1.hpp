// attncheck/abi_v1.hpp — version 1 of the kernel ABI (kernel_abi.h) as what it is: version 2
// (kernel_abi_v2.h) restricted to the problems version 1 can pose. The suite has one problem type,
// attncheck_problem_v2; a version 1 kernel is called on it through v1_call(), which poses the
// problem in version 1's terms or refuses it, as FlashAttention fills one parameter struct from
// every entry point.
//
// Version 1 can pose a version 2 problem when it is float32, kv_heads = q_heads, dense (no
// cu_seqlens, no block table), every tensor contiguous [B, H, T, D] (k and v with kv_len rows per
// sequence: kv_lens, when given, become kv_valid_len), one position for every sequence (q_pos[b]
// all equal: q_offset), and has no window, softcap, ALiBi or lse. The properties generate such
// problems for a version 1 kernel (KernelDeclaration::limit_to_abi_v1()).
#pragma once

#include <cstdint>
#include <string>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"

namespace attncheck {

// The tensors of a version 1 call.
struct V1Call {
    attncheck_problem problem{};
    const float *q = nullptr, *k = nullptr, *v = nullptr;
    float* out = nullptr;
};

// The version 1 problem of p's fields, whatever its layout and features: batch, q_heads as heads,
// lengths, widths, q_pos[0] as q_offset, causal, kv_lens as kv_valid_len, scale, abi_version 1.
// Only meaningful when version 1 can pose p (v1_call_of() checks).
attncheck_problem v1_fields_of(const attncheck_problem_v2& p);

// The version 2 problem of a version 1 problem's fields, its tensors' data aside (the caller's
// to set): float32, kv_heads = heads, q_pos = the given B positions (each q_offset; the caller
// owns them), kv_valid_len as kv_lens, no window, softcap, ALiBi, lse or sinks, and the tensors'
// strides version 1's contiguous [B, H, T, D] (meaningful when element_counts_fit(p)). The built-in
// optimized kernel runs a version 1 call as this problem (on its own strides when it reads views).
attncheck_problem_v2 v2_fields_of(const attncheck_problem& p, const std::int32_t* q_pos);

// Null when version 1 can say everything p says, its tensors' strides aside (float32, kv_heads =
// q_heads, dense, one q_pos for every sequence, no window, softcap, ALiBi or lse), else the first
// thing it cannot (a static string). v1_call_of() adds the layout.
const char* beyond_v1_features(const attncheck_problem_v2& p);

// "" and `call` filled when version 1 can pose p, else the first reason it cannot ("a dtype other
// than float32", "q is not contiguous [B, H, Tq, Dk]", ...). The version numbers map:
// a well-formed version 2 problem is version 1's ATTNCHECK_ABI_VERSION, and any other
// abi_version one version 1 does not know either (0 below 2, 2 above), so a kernel's refusal of
// unknown versions is tested through the adapter.
std::string v1_call_of(const attncheck_problem_v2& p, V1Call& call);

// True when each tensor's element count (B*H*Tq*Dk, B*H*Tk*Dk, B*H*Tk*Dv, B*H*Tq*Dv) of a version
// 1 problem fits in int64 with room for its bytes. The fields are int32, so a hostile but
// well-formed problem could otherwise wrap a kernel's element counts and make it index past the
// caller's buffers. The built-in kernels' version 1 entries check it after problem_error().
bool element_counts_fit(const attncheck_problem& p);

// fn on p as version 1 poses it: its return code, or ATTNCHECK_UNSUPPORTED when version 1
// cannot pose p (the kernel is then not called).
int v1_call(attncheck_kernel_fn fn, const attncheck_problem_v2& p);

}  // namespace attncheck
