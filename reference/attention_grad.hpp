// reference/attention_grad.hpp — the float64 oracle of the backward pass of kernel ABI version 2
// (attncheck_grads_v2 in attncheck/kernel_abi_v2.h), with the bound any correct evaluation in the
// problem's dtype meets (docs/numerics.md, "The backward pass").
//
// attention_grad_oracle() computes the exact gradients of the forward the ABI defines, in float64
// from the inputs as stored: the probabilities, the output and D = dout . out are recomputed
// exactly, not taken from the out and lse the call carries. Those two are what a kernel reads,
// so the bound charges their actual distance from the exact values (a kernel fed the oracle's
// rounded out and lse gets a bound that is nearly all arithmetic; one fed its own forward's gets
// the forward's error on top).
//
// Results are in logical order: dq rows as the forward oracle's rows (OracleV2::row), dk and dv
// rows (b, hk, j) at first_key[b] + hk * key_rows[b] + j, where key_rows[b] = kv_rows_of(p, b):
// every row of a dense k / v (padding included, where the gradient is 0) or a varlen sequence's
// packed rows.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq(b), Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstddef>
#include <vector>

#include "attncheck/kernel_abi_v2.h"
#include "reference/attention_v2.hpp"

namespace attncheck::reference {

// The same declared kernel behaviour as the forward's: P (and dS) rounded to the dtype before the
// products that take them (FlashAttention does for float16 / bfloat16), and the kernel's tanh
// accuracy.
using GradOracleOptions = OracleV2Options;

struct GradOracle {
    int head_dim = 0, value_dim = 0;
    std::vector<std::size_t> first_row;  // B + 1: dq row (b, h, i) at first_row[b] + h * q_len[b] + i
    std::vector<int> q_len;              // Tq(b)
    std::vector<std::size_t> first_key;  // B + 1: dk / dv row (b, hk, j) at first_key[b] + hk * key_rows[b] + j
    std::vector<int> key_rows;           // kv_rows_of(p, b)
    std::vector<double> dq, dq_bound;    // [rows, Dk]
    std::vector<double> dk, dk_bound;    // [key rows, Dk]
    std::vector<double> dv, dv_bound;    // [key rows, Dv]
    std::vector<int> key_seen;           // [key rows]: 1 when some row of some query head of the group sees the key
    std::vector<double> dsinks, dsinks_bound;  // [Hq] with sinks (float32 in the ABI), empty without

    std::size_t rows() const { return first_row.back(); }
    std::size_t key_rows_total() const { return first_key.back(); }
    std::size_t row(int b, int h, int i) const {
        return first_row[std::size_t(b)] + std::size_t(h) * std::size_t(q_len[std::size_t(b)]) + std::size_t(i);
    }
    std::size_t key(int b, int hk, int j) const {
        return first_key[std::size_t(b)] + std::size_t(hk) * std::size_t(key_rows[std::size_t(b)]) + std::size_t(j);
    }
};

// The gradients for dout (indexed as out) and the bounds. p.out and p.lse are read as the
// kernel reads them (lse must not be null). Throws std::invalid_argument naming the problem for a
// malformed one (grads_v2_error with the given dout).
GradOracle attention_grad_oracle(const attncheck_problem_v2& p, const attncheck_tensor_v2& dout,
                                 const GradOracleOptions& options = {});

}  // namespace attncheck::reference
