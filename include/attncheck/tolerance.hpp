// attncheck/tolerance.hpp — when a float32 result agrees with the float64 oracle
// (docs/spec/NUMERICS.md, version 2: test ratios).
//
// Each compared number has its own a-priori bound on the error of ANY correct float32 evaluation,
// computed in float64 from the oracle's magnitudes (reference/error_bound.hpp: attention_bounded
// for a kernel, DecoderBound for a decoder; the derivation is docs/numerics.md). The test ratio of
// an element is |candidate - oracle| / bound; a candidate agrees when every ratio is at most
// kRatioThreshold. A correct kernel's ratios stay far below 1 (tests/zoo's correct kernels and
// bench/bound_campaign measure how far); a ratio above 1 is an error no correct float32
// evaluation can make.
//
// Version 1 bounded a candidate by a multiple of one float32 evaluation's error; where that
// evaluation was lucky (exact scores, a tiny decoder) correct kernels were flagged.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck {

inline constexpr double kEps32 = std::numeric_limits<float>::epsilon();  // 2^-23
// The largest test ratio a correct evaluation may reach: the bound is a bound, so 1.
inline constexpr double kRatioThreshold = 1.0;

struct Agreement {
    bool ok = true;
    std::size_t checked = 0;      // elements compared
    std::size_t worst_index = 0;  // flat index of the element with the largest ratio
    double candidate = 0, oracle = 0;  // the two values there
    double error = 0;             // |candidate - oracle| there
    double bound = 0;             // the bound there
    double worst_ratio = 0;       // max_i error_i / bound_i (<= kRatioThreshold when ok)
    bool non_finite = false;      // candidate NaN/Inf where the oracle is finite
    // "candidate 0.67, float64 oracle 0.67002: error 2.2e-05 is 8.7x the bound 2.5e-06 that any
    // correct float32 evaluation meets"
    std::string describe() const {
        std::ostringstream s;
        s.precision(9);
        s << "candidate " << candidate << ", float64 oracle " << oracle << ": ";
        if (non_finite) {
            s << "non-finite where the oracle is finite";
            return s.str();
        }
        s.precision(3);
        if (!(bound > 0)) {  // a ratio to 0 says nothing: the result had to be exact
            s << "error " << error << " where the result must be exact (bound 0)";
            return s.str();
        }
        s << "error " << error << " is " << worst_ratio << "x the bound " << bound
          << " that any correct float32 evaluation meets";
        return s.str();
    }
};

// Test ratios of n candidate values against oracle +- bound. An element where the oracle is
// finite and the candidate is not (NaN, Inf) has ratio infinity; so has any nonzero error where
// the bound is 0 (an exact result, e.g. a row with no visible key).
template <class CandidateT>
Agreement check_against_bound(const CandidateT* candidate, const double* oracle, const double* bound,
                              std::size_t n) {
    Agreement a;
    a.checked = n;
    a.worst_ratio = n == 0 ? 0.0 : -1.0;
    for (std::size_t i = 0; i < n; ++i) {
        const double c = double(candidate[i]);
        const double err = std::abs(c - oracle[i]);
        const bool bad_nonfinite = !std::isfinite(c) && std::isfinite(oracle[i]);
        double ratio = bad_nonfinite ? std::numeric_limits<double>::infinity()
                                     : (bound[i] > 0 ? err / bound[i]
                                                     : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0));
        if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
        if (ratio > a.worst_ratio) {
            a.worst_ratio = ratio;
            a.worst_index = i;
            a.candidate = c;
            a.oracle = oracle[i];
            a.error = err;
            a.bound = bound[i];
            a.non_finite = bad_nonfinite;
        }
    }
    a.ok = a.worst_ratio <= kRatioThreshold;
    return a;
}

template <class CandidateT, class Alloc>  // any allocator: e.g. optimized::Logits, left unzeroed
Agreement check_against_bound(const std::vector<CandidateT, Alloc>& candidate, const std::vector<double>& oracle,
                              const std::vector<double>& bound) {
    if (candidate.size() != oracle.size() || bound.size() != oracle.size())
        throw std::invalid_argument("check_against_bound: candidate, oracle and bound differ in size");
    return check_against_bound(candidate.data(), oracle.data(), bound.data(), oracle.size());
}

}  // namespace attncheck
