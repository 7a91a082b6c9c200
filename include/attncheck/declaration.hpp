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
// The built-in kernels declare nothing (every problem, zero, deterministic). A kernel loaded with
// `attncheck fuzz --kernel-lib` may export, with C linkage, a NUL-terminated string named after its
// symbol, `<symbol>_declaration` (a `const char[]` variable, or a function returning
// `const char*`); command-line flags override it item by item. Implemented in attncheck::properties.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"

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
    bool allows_head_dim(int d) const;
    bool allows_value_dim(int value_dim, int head_dim) const;
};

}  // namespace attncheck
