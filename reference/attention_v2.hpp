// reference/attention_v2.hpp — the float64 oracle of kernel ABI version 2, with the bound any
// correct evaluation in the problem's dtype meets (docs/numerics.md, "Version 2").
//
// attention_v2_oracle() reads a problem exactly as the ABI defines it (attncheck/problem_v2.hpp:
// strides, varlen packing, pages, GQA head mapping, q_pos, window, softcap, ALiBi) and computes
// every output element and every row's log-sum-exp in float64 from the input values as stored
// (so float16 / bfloat16 inputs are exact). Its results are in "logical" order: rows (b, h, i)
// with b outermost, then the query head, then the row, whatever the tensors' layout is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/kernel_abi_v2.h"

namespace attncheck::reference {

struct OracleV2Options {
    // The kernel rounds the probabilities to the problem's dtype before multiplying them by v
    // (FlashAttention does, for float16 / bfloat16): the bound then includes that rounding.
    bool probabilities_rounded = false;
    // Accuracy of the kernel's float32 tanh (softcap), in ulps. 2 covers glibc's tanhf and
    // correctly rounded ones; a GPU kernel on tanh.approx.f32 (relative error 2^-11) declares
    // 4096 (the declaration item tanh_ulps=4096, attncheck/declaration.hpp, sets this).
    double tanh_ulps = 2.0;
    // The values only, bounds left empty: what the reference kernels store (they call the oracle
    // for its values, and the suite computes the bound of its own oracle call).
    bool values_only = false;
};

struct OracleV2 {
    int value_dim = 0;
    // first_row[b]: the logical row of (b, h = 0, i = 0); row (b, h, i) is
    // first_row[b] + h * Tq(b) + i. first_row has B + 1 entries (the last is the row count).
    std::vector<std::size_t> first_row;
    std::vector<int> q_len;           // Tq(b), B entries
    std::vector<double> out;          // [rows, Dv]
    std::vector<double> out_bound;    // [rows, Dv]: |kernel - oracle| <= this for any correct kernel
    std::vector<double> lse;          // [rows]: natural log of the softmax denominator; -inf for an empty row
    std::vector<double> lse_bound;    // [rows]
    std::vector<int> visible;         // [rows]: visible keys of the row
    std::vector<double> max_score;    // [rows]: the row's largest score (-inf when empty)

    std::size_t rows() const { return first_row.empty() ? 0 : first_row.back(); }
    std::size_t row(int b, int h, int i) const { return first_row[std::size_t(b)] + std::size_t(h) * std::size_t(q_len[std::size_t(b)]) + std::size_t(i); }
};

// Throws std::invalid_argument naming the problem when problem_v2_error(p) is not empty.
OracleV2 attention_v2_oracle(const attncheck_problem_v2& p, const OracleV2Options& options = {});

// The score of key j for (sequence b, query head h, row i) in float64 (s0 = scale q.k, then
// softcap and ALiBi as the ABI defines them), with the bound on its float32 evaluation up to,
// not including, the exponential's stage (docs/numerics.md, "Version 2"): the oracle's and the
// gradient oracle's (attention_grad.hpp) first step.
struct ScoreV2 {
    double s0 = 0;        // scale q.k
    double s = 0;         // the score
    double e = 0;         // |a float32 kernel's score - s| <= e
    double e_capped = 0;  // the same for the softcapped score before ALiBi (e without ALiBi)
};

// The keys and values of (sequence b, kv head hk) as float64: the oracles read each stored
// element once per (sequence, kv head), not once per row that sees it. load() reads them when
// (b, hk) changes. The keys are kept transposed, kt [Dk, Tk], so that dots() scores kBlock
// neighbouring keys at once (and, when row_major_keys is set, also as k [Tk, Dk], for key());
// the values, v [Tk, Dv], have their rows zero-padded to a multiple of kColumns, so that a row's
// output can be summed kColumns columns at once.
struct KeysValues {
    static constexpr int kBlock = 16, kColumns = 32;
    bool row_major_keys = false;
    int b = -1, hk = -1;
    int head_dim = 0;
    std::size_t kt_stride = 0, v_stride = 0;  // kt's row: Tk + kBlock keys; v's row: Dv rounded up to kColumns
    std::vector<double> k, kt, v;
    void load(const attncheck_problem_v2& p, int b, int hk);
    const double* key(int j) const { return k.data() + std::size_t(j) * std::size_t(head_dim); }
    const double* value(int j) const { return v.data() + std::size_t(j) * v_stride; }
    // dot[t] = q.k_{lo+t} and, when mag is not null, mag[t] = sum_d |q_d k_{lo+t,d}|, for t < n
    // (keys lo .. lo+n-1 of the loaded ones): each summed in d order (d = 0 first, a rounded
    // product added at each step), kBlock keys at a time as independent chains.
    void dots(const double* q, int lo, int n, double* dot, double* mag) const;
};

// The scores of keys lo, lo + 1, ..., lo + n - 1 of kv for (sequence b, query head h, row i),
// into scores[0 .. n), from the row's Dk query elements q as float64 (load_query_row) and the
// dot products of KeysValues::dots(). Without bounds (with_bounds false) each e and e_capped is
// meaningless.
void score_span(const attncheck_problem_v2& p, double tanh_ulps, int b, int h, int i, const double* q,
                const KeysValues& kv, int lo, int n, bool with_bounds, std::vector<ScoreV2>& scores);

// Row i of sequence b, query head h, as float64.
void load_query_row(const attncheck_problem_v2& p, int b, int h, int i, std::vector<double>& q);

// x rounded to nearest even in `dtype` (ATTNCHECK_DTYPE_*) directly from float64, as a float:
// what the reference kernel stores (no double rounding through float32).
float round_double_to(std::int32_t dtype, double x);

}  // namespace attncheck::reference

extern "C" {
// The reference kernel of version 2: attention_v2_oracle's values, rounded to the problem's
// dtype into out (and lse when asked). Returns nonzero for a malformed problem.
int attncheck_reference_kernel_v2(const attncheck_problem_v2* p);
}
