// attncheck/tolerance.hpp — the one tolerance model of the project (../shared/spec/NUMERICS.md).
//
// A float32 candidate agrees with the float64 oracle when, element by element,
//
//     |candidate_i - oracle_i| <= k * baseline_error(row of i) + atol
//
// - baseline is the float32 reference on the same inputs, and baseline_error(row) is the largest
//   |baseline_j - oracle_j| over the row that holds element i (Tolerance::row_length elements
//   along the last axis; by default the whole tensor is one row, the FlashAttention tests' rule);
// - atol = atol_ulps * eps32 * scale, scale = max(max_i |oracle_i|, Tolerance::scale_floor).
//
// Why the baseline's error is taken over a row and not at element i alone: rounding errors are
// random per element. Where the float32 baseline happens to land on the oracle (error 0, or far
// below its typical error) a bare k * |baseline_i - oracle_i| would demand that the candidate be
// exact there too, which no reordered float32 computation can promise: the candidate's error
// and the baseline's are two draws of the same size, and their ratio at one element exceeds any
// k now and then. The largest baseline error over elements that share one computation (a row of
// probabilities, one position's logits, the whole output) is the "what plain float32 gets
// wrong" of FlashAttention's test suite; it stays a bound on every element, and the worst
// element is the one reported.
//
// Why the scale floor: an attention output is a weighted average of value rows; where the
// average cancels to nearly 0 every float32 summation order still errs by ~eps32 * max |v|, far
// above a few ulps of the tiny output. Callers that know the natural scale (max |v| for
// attention) pass it as scale_floor.
//
// Every constant is here, named, and none is loosened to make a failing case pass.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck {

struct Tolerance {
    // Multiple of the float32 baseline's error a candidate may have (NUMERICS.md: 2 to 4).
    double k = 3.0;
    // Absolute floor, in float32 ulps (eps32) of the output's scale.
    double atol_ulps = 4.0;
    // The output's scale is at least this (0: the largest |oracle| alone). See above.
    double scale_floor = 0.0;
    // Elements per row along the last axis over which the baseline's error is taken; 0 means
    // the whole tensor is one row. It must divide the tensor's size.
    std::size_t row_length = 0;
};

inline constexpr double kEps32 = std::numeric_limits<float>::epsilon();  // 2^-23

struct Agreement {
    bool ok = true;
    std::size_t checked = 0;        // elements compared
    std::size_t worst_index = 0;    // flat index of the element with the largest error / bound
    double candidate = 0, oracle = 0, baseline = 0;  // the three values there
    double error = 0;               // |candidate - oracle| there
    double bound = 0;               // the bound there
    double worst_ratio = 0;         // max_i error_i / bound_i (<= 1 when ok)
    bool non_finite = false;        // candidate has NaN/Inf where the oracle is finite
    std::string describe() const {  // one line for a failure message
        std::ostringstream s;
        s.precision(9);
        s << "worst element [" << worst_index << "]: candidate " << candidate << ", oracle "
          << oracle << ", float32 baseline " << baseline << ", |error| " << error << " > bound "
          << bound << " (error/bound " << worst_ratio << ")";
        if (non_finite) s << " [non-finite candidate]";
        return s.str();
    }
};

// The largest error of the float32 baseline over n elements (NaN in the baseline is skipped).
template <class BaselineT>
double baseline_max_error(const double* oracle, const BaselineT* baseline, std::size_t n) {
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(double(baseline[i]) - oracle[i]));
    return worst;
}

// atol for a tensor of n oracle values: atol_ulps ulps of max(max |oracle|, scale_floor).
inline double agreement_atol(const double* oracle, std::size_t n, const Tolerance& tol) {
    double scale = tol.scale_floor;
    for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(oracle[i]));
    return tol.atol_ulps * kEps32 * scale;
}

// The bound check_agreement applies to every element of n values that form one row (and one
// tensor): k times the baseline's largest error, plus atol. Used also where a decision needs
// the tolerance itself (e.g. whether two logits are further apart than float32 can blur).
template <class BaselineT>
double agreement_bound(const double* oracle, const BaselineT* baseline, std::size_t n,
                       const Tolerance& tol = {}) {
    return tol.k * baseline_max_error(oracle, baseline, n) + agreement_atol(oracle, n, tol);
}

// Compares candidate against oracle with the float32 baseline's error as the yardstick.
// The three spans must have the same length. An element where the oracle is finite and the
// candidate is not (NaN, Inf) fails outright.
template <class CandidateT, class BaselineT>
Agreement check_agreement(const CandidateT* candidate, const double* oracle,
                          const BaselineT* baseline, std::size_t n, const Tolerance& tol = {}) {
    Agreement a;
    a.checked = n;
    if (n == 0) return a;
    if (tol.row_length > 0 && n % tol.row_length != 0)
        throw std::invalid_argument("check_agreement: row_length does not divide the tensor's size");
    const std::size_t row = tol.row_length > 0 ? tol.row_length : n;
    const double atol = agreement_atol(oracle, n, tol);
    a.worst_ratio = -1;
    for (std::size_t r0 = 0; r0 < n; r0 += row) {
        const double bound = tol.k * baseline_max_error(oracle + r0, baseline + r0, row) + atol;
        for (std::size_t i = r0; i < r0 + row; ++i) {
            const double c = double(candidate[i]);
            const double err = std::abs(c - oracle[i]);
            const bool bad_nonfinite = !std::isfinite(c) && std::isfinite(oracle[i]);
            double ratio = bad_nonfinite ? std::numeric_limits<double>::infinity()
                                         : (bound > 0 ? err / bound
                                                      : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0));
            if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
            if (ratio > a.worst_ratio) {
                a.worst_ratio = ratio;
                a.worst_index = i;
                a.candidate = c;
                a.oracle = oracle[i];
                a.baseline = double(baseline[i]);
                a.error = err;
                a.bound = bound;
                a.non_finite = bad_nonfinite;
            }
        }
    }
    a.ok = a.worst_ratio <= 1.0;
    return a;
}

template <class CandidateT, class BaselineT>
Agreement check_agreement(const std::vector<CandidateT>& candidate,
                          const std::vector<double>& oracle,
                          const std::vector<BaselineT>& baseline, const Tolerance& tol = {}) {
    if (candidate.size() != oracle.size() || baseline.size() != oracle.size())
        throw std::invalid_argument("check_agreement: candidate, oracle and baseline differ in size");
    return check_agreement(candidate.data(), oracle.data(), baseline.data(), oracle.size(), tol);
}

// A row of probabilities (or of outputs with all-ones values) sums to one within this bound:
// summing n terms in float32 in any order errs by at most about n * eps32 (NUMERICS.md).
inline double row_sum_bound(std::size_t n) { return (double(n) + 2.0) * kEps32; }

}  // namespace attncheck
