// reference/error_bound.hpp — NUMERICS.md version 2: for every number a float32 attention kernel
// or decoder returns, an a-priori bound on the error of ANY correct float32 evaluation of it,
// computed in float64 from the exact values' magnitudes (never from a second float32 run).
//
// "Any correct evaluation": any summation order or blocking, FMA or not; one-pass online softmax
// or split-KV with a merge; the scale folded into q or into an exp2 base (log2 e); exp, exp2,
// erf, tanh, sin, cos accurate to a few ulps; accumulation in float32 or wider. The derivation,
// with every constant, is docs/numerics.md; the comments below name each term.
//
// A candidate agrees when |candidate - value| <= bound element by element (test ratio <= 1,
// tolerance.hpp's check_against_bound).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/model.hpp"

namespace attncheck::reference {

// Unit roundoff of float32 (round to nearest), the smallest normal float32, and gamma_n =
// n u / (1 - n u), Higham's bound on the relative error of n roundings (e.g. an n-term dot
// product summed in any order).
inline constexpr double kUnitRoundoff32 = 0x1p-24;
inline constexpr double kMinNormal32 = 0x1p-126;
double gamma32(double n);

// A kernel may split a row's n visible keys into chunks and merge them the way flash-decoding
// does: each chunk returns its normalised output o_c and a float32 lse_c, and the result is
// sum_c exp(lse_c - lse) o_c with lse = log sum_c exp(lse_c). Nothing divides by a sum of those
// weights, so the float32 errors of the lse_c, of lse and of the exponents reach the output
// uncancelled, relative to the weights. docs/numerics.md (1.1, step 3b) derives what such a
// merge adds for a row of n visible keys and log-sum-exp lse, in units of u:
//   output: (6n + 16 |lse| + 24 ln n + 16) sum_j p_j |v_jc| + 10 ln n max_j |v_jc|
//   lse:    n + 16 |lse| + 30 ln n + 8
struct SplitMerge {
    double magnitude;  // the factor of sum_j p_j |v_jc|
    double largest;    // the factor of max_j |v_jc|
};
SplitMerge split_merge_output(double n, double lse);
double split_merge_lse_term(double n, double lse);

// Row-major matrix of float64 values with, element by element, a bound on the error of a float32
// evaluation (0 for exact inputs).
struct BoundedMatrix {
    std::size_t rows = 0, cols = 0;
    std::vector<double> value, bound;
    BoundedMatrix() = default;
    BoundedMatrix(std::size_t r, std::size_t c) : rows(r), cols(c), value(r * c, 0.0), bound(r * c, 0.0) {}
    double& x(std::size_t i, std::size_t j) { return value[i * cols + j]; }
    double x(std::size_t i, std::size_t j) const { return value[i * cols + j]; }
    double& e(std::size_t i, std::size_t j) { return bound[i * cols + j]; }
    double e(std::size_t i, std::size_t j) const { return bound[i * cols + j]; }
};

// One head of masked attention (reference::key_visible's rule) on bounded inputs:
// q [Tq, Dk], k [Tk, Dk], v [Tk, Dv] -> out [Tq, Dv], out.bound covering both the float32
// kernel's own rounding and the propagation of the inputs' bounds. scale_error bounds the
// relative error of the scale the kernel receives (0 at kernel level, where the problem's float
// scale is exact by definition). A row with no visible key has value 0 and bound 0.
BoundedMatrix attend_head_bounded(const BoundedMatrix& q, const BoundedMatrix& k, const BoundedMatrix& v,
                                  std::int64_t q_offset, bool causal, std::int64_t valid_len, double scale,
                                  double scale_error = 0.0);

// The ABI problem: out [B, H, Tq, Dv] in float64 and its bound, from exact float32 inputs.
struct BoundedOutput {
    std::vector<double> value, bound;
};
BoundedOutput attention_bounded(const attncheck_problem& p, const float* q, const float* k, const float* v);

// The decoder of MODEL.md (reference/decoder.hpp's Decoder) in float64 with a running error
// bound per activation, so that each teacher-forced logit [T, V] gets its own bound for any
// correct float32 decoder, whatever attention kernel it plugs in. Incremental (KV-cached)
// evaluation computes the same function and meets the same bound.
class DecoderBound {
public:
    explicit DecoderBound(const Model& m);
    // Logits [T, V] (flattened) and their bounds. Inputs as Decoder::forward (checked there).
    BoundedOutput forward(const std::vector<int>& tokens, const std::optional<Memory>& memory = std::nullopt) const;

private:
    const Model& model_;
};

}  // namespace attncheck::reference
