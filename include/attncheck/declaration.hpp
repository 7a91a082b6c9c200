// attncheck/declaration.hpp — what an attention kernel declares about itself (NUMERICS.md "What a
// kernel may declare"; KERNEL_ABI.md "capabilities"): the problems it supports and the conventions
// it follows. The suite then generates supported problems (and sends a few unsupported ones, which
// the kernel must refuse), reads its empty rows by its own convention, and does not demand bitwise
// repeatability from a kernel that says it is not deterministic. Everything else is still checked.
//
// A declaration is a line of `key=value` items separated by ';' (spaces ignored):
//
//     head_dim=64,128; value_dim=same; max_kv_len=4096; empty_rows=nan; deterministic=no
//
//   head_dim, value_dim  comma list of widths or ranges (`64,128`, `16..256`, `8..64,96`);
//                        value_dim also `same` (value_dim must equal head_dim). Default: any.
//   max_kv_len, max_q_len  the longest key / query sequence supported. Default: any.
//   max_batch, max_heads   the largest batch / head count supported. Default: any.
//   mask                 `any` (default), `causal` (causal problems only) or `none` (non-causal only)
//   padding              `yes` (default: kv_valid_len honoured) or `no` (kv_valid_len must be null)
//   empty_rows           `zero` (default, the ABI's rule: a row with no visible key gives 0) or
//                        `nan` (PyTorch's convention: such a row gives NaN)
//   deterministic        `yes` (default: the same call gives bitwise the same out) or `no`
//
// Version 2 items (attncheck/kernel_abi_v2.h). Default: everything the ABI has. A version 1
// kernel is checked on the version 2 problems version 1 can pose (attncheck/abi_v1.hpp): its
// declaration is limited to them (limit_to_abi_v1()), and these items are then version 1's
// limits, not declarations.
//   dtype                comma list of f32, f16, bf16 (default: all three)
//   gqa                  `yes` (kv_heads < q_heads supported) or `no` (kv_heads = q_heads only)
//   layout               `any` (any strides, gaps between rows, heads and sequences) or
//                        `contiguous` (every tensor, lse included, densely packed [B,H,T,D])
//   positions            `any` (any q_pos[b] >= 0), `bottom_right` (q_pos[b] = Tk(b) - Tq(b):
//                        the query rows are the last rows of the sequence, as FlashAttention has it)
//                        or `shared` (one q_pos for every sequence of a call: a kernel that takes a
//                        single offset, as version 1's q_offset)
//   varlen, paged        `yes` or `no`: packed variable-length batches; a paged KV cache
//   dense                `yes` or `no`: `no` for a kernel that takes only packed variable-length
//                        batches (cu_seqlens_q and cu_seqlens_k, FlashAttention's varlen entry
//                        point); every case is then packed
//   block_size           comma list or ranges of the paged block sizes supported (default: any;
//                        only with paged=yes)
//   window, softcap, alibi, lse   `yes` or `no`: sliding windows, softcapping, ALiBi slopes,
//                        the log-sum-exp output
//   rounds_probabilities `no` (default) or `yes`: the kernel rounds the probabilities to the
//                        problem's dtype before multiplying them by v (FlashAttention does for
//                        f16 / bf16); the agreement bound then includes that rounding
//   tanh_ulps            a positive integer k: the softcap's tanh errs by at most k 2^-23 |tanh x|
//                        (relative, in float32 epsilons; default 2: glibc 2.36's tanhf reads 1.42
//                        on every float, 2.19 in ulps of its result). tanh.approx.f32 (relative
//                        error up to 2^-11) declares 4096; the agreement bound then allows it
//   sinks                `no` (default) or `yes`: attention sinks (kernel_abi_v2.h, a field appended
//                        after the first version 2 kernels were written: a kernel must say it reads
//                        it; the suite never poses sinks to one that does not, nor probes its refusal)
//   padding_values       `any` (default: memory no row reads - padding past a sequence's keys,
//                        gaps, unused blocks - may hold NaN or Inf, as uninitialised memory does)
//                        or `finite` (the kernel needs finite numbers there, e.g. it multiplies
//                        them by a zero weight): the suite then puts large finite garbage there
//                        instead, and poison_invisible's report says NaN and Inf were not tried
//
// The backward pass (attncheck_grads_v2 in kernel_abi_v2.h), checked when the kernel has one:
//   backward             `yes` (a kernel library must then export `<symbol>_backward`: its absence
//                        is an error) or `no` (an exported backward is not checked). Unsaid: the
//                        backward is checked when there is one
//   deterministic_backward  `yes` (default: the same call gives bitwise the same dq, dk, dv, on
//                        any thread count) or `no` (e.g. dq accumulated with atomics)
//
// A declaration that contradicts itself (block_size with paged=no, an empty dtype list) is
// rejected as malformed. mask=none with positions=bottom_right is accepted: positions still
// matter to a non-causal problem through its window and ALiBi.
//
// The built-in kernels declare nothing (every problem, zero, deterministic). A kernel loaded with
// `attncheck fuzz --kernel-lib` may export, with C linkage, a NUL-terminated string named after its
// symbol, `<symbol>_declaration` (a `const char[]` variable, or a function returning
// `const char*`); command-line flags override it item by item. Implemented in attncheck::properties.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"

namespace attncheck {

struct KernelDeclaration {
    struct Range {
        int lo = 1, hi = 0;  // inclusive; hi < lo never occurs in a parsed declaration
    };
    std::vector<Range> head_dims;   // empty: any
    std::vector<Range> value_dims;  // empty: any (unless value_dim_same)
    bool value_dim_same = false;
    int max_kv_len = 0, max_q_len = 0, max_batch = 0, max_heads = 0;  // 0: any
    bool causal = true, non_causal = true;  // which masks are supported
    bool padding = true;
    bool empty_rows_nan = false;
    bool deterministic = true;

    // Version 2 (every one true / empty by default: all the ABI has).
    bool dtype_f32 = true, dtype_f16 = true, dtype_bf16 = true;
    bool gqa = true;
    bool layout_any = true;     // false: layout=contiguous
    bool positions_any = true;  // false: positions=bottom_right
    bool varlen = true, paged = true;
    bool dense = true;  // false: dense=no, query rows always packed (cu_seqlens_q)
    std::vector<Range> block_sizes;  // empty: any
    bool window = true, softcap = true, alibi = true, lse = true;
    bool sinks = false;  // sinks=yes
    bool rounds_probabilities = false;
    // The float32 ulps of the softcap's tanh (reference::OracleV2Options::tanh_ulps).
    static constexpr int kDefaultTanhUlps = 2;
    int tanh_ulps = kDefaultTanhUlps;
    bool padding_finite = false;  // padding_values=finite
    bool positions_shared = false;  // positions=shared: q_pos[b] equal for every b

    // The backward pass.
    enum class Said { unsaid, yes, no };
    Said backward_said = Said::unsaid;  // the item backward=yes|no
    bool deterministic_backward = true;
    // Whether the kernel's backward pass is checked: it has one and does not declare backward=no.
    // Not an item: set where the kernel is loaded (set_backward), false for a version 1 kernel.
    bool backward = false;
    void set_backward(bool has_entry_point) { backward = has_entry_point && backward_said != Said::no; }

    // A version 1 kernel's declaration (limit_to_abi_v1()): float32, no GQA, contiguous dense
    // tensors, shared positions, no window, softcap, ALiBi or lse, finite padding (version 1 put
    // ordinary keys there; NaN there is version 2's rule). to_string() leaves these limits out.
    bool abi_v1 = false;
    void limit_to_abi_v1();

    // True when the declaration says nothing beyond the ABI's defaults.
    bool is_default() const;
    // Applies the items of `text` on top of this declaration. Throws std::invalid_argument naming
    // the item and what is wrong ("declaration item 'head_dim=0': widths are >= 1").
    void apply(const std::string& text);
    static KernelDeclaration parse(const std::string& text);
    // The canonical line (parse(to_string()) gives back an equal declaration); "" for the default.
    std::string to_string() const;
    // "" when p is within the declaration, else the first reason it is not ("head_dim 48 is not
    // declared (head_dim=64,128)").
    std::string unsupported_reason(const attncheck_problem& p) const;
    // The same for a version 2 problem: the v1 items read through per-sequence lengths (max_kv_len
    // against the longest sequence's keys, padding against kv_lens of a dense cache), then the
    // dtype and every v2 feature. p must be well formed (problem_v2_error(p) empty).
    std::string unsupported_reason(const attncheck_problem_v2& p) const;
    bool allows_dtype(std::int32_t dtype) const;
    bool allows_block_size(int block_size) const;
    bool allows_head_dim(int d) const;
    bool allows_value_dim(int value_dim, int head_dim) const;
};

}  // namespace attncheck
