// tests/properties/tolerance_test.cpp — the tolerance model of include/attncheck/tolerance.hpp,
// checked on numbers whose verdict we know (STYLE.md: "one tolerance model ... with a test of
// the checker itself").
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "attncheck/tolerance.hpp"

using attncheck::agreement_bound;
using attncheck::check_agreement;
using attncheck::kEps32;
using attncheck::Tolerance;

TEST_CASE("a candidate equal to the baseline agrees", "[tolerance]") {
    const std::vector<double> oracle{1.0, -2.0, 0.5, 3.0};
    const std::vector<float> baseline{1.0f + 1e-7f, -2.0f, 0.5f, 3.0f - 2e-7f};
    const auto a = check_agreement(baseline, oracle, baseline);
    CHECK(a.ok);
    CHECK(a.checked == 4);
    CHECK(a.worst_ratio <= 1.0);
}

TEST_CASE("where the baseline is exact, the candidate may err as much as the baseline does elsewhere",
          "[tolerance]") {
    // The baseline errs by 1e-6 at element 0 and not at all at element 1. A candidate 2e-6 off
    // at element 1 is within k = 3 times the baseline's (row's) error: two draws of the same
    // rounding noise, not a bug.
    const std::vector<double> oracle{1.0, 1.0, 1.0};
    const std::vector<float> baseline{float(1.0 + 1e-6), 1.0f, 1.0f};
    const std::vector<float> candidate{1.0f, float(1.0 + 2e-6), 1.0f};
    CHECK(check_agreement(candidate, oracle, baseline).ok);
}

TEST_CASE("an error beyond k times the baseline's plus atol fails, at the right element", "[tolerance]") {
    const std::vector<double> oracle{1.0, 2.0, 3.0, 4.0};
    const std::vector<float> baseline{1.0f, 2.0f, 3.0f, 4.0f};  // exact: bound = atol
    std::vector<float> candidate = baseline;
    const double atol = Tolerance{}.atol_ulps * kEps32 * 4.0;
    candidate[2] = float(3.0 + 2 * atol);
    const auto a = check_agreement(candidate, oracle, baseline);
    CHECK_FALSE(a.ok);
    CHECK(a.worst_index == 2);
    CHECK(a.candidate == Approx(3.0 + 2 * atol).epsilon(1e-9));
    CHECK(a.oracle == 3.0);
    CHECK(a.bound == Approx(atol));
    CHECK(a.worst_ratio > 1.0);
    CHECK_THAT(a.describe(), Catch::Matchers::Contains("worst element [2]"));
    // The same error within atol passes.
    candidate[2] = float(3.0 + 0.5 * atol);
    CHECK(check_agreement(candidate, oracle, baseline).ok);
}

TEST_CASE("NaN or Inf in the candidate fails where the oracle is finite", "[tolerance]") {
    const std::vector<double> oracle{0.0, 1.0};
    const std::vector<float> baseline{0.0f, 1.0f};
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        const std::vector<float> candidate{0.0f, bad};
        const auto a = check_agreement(candidate, oracle, baseline);
        CHECK_FALSE(a.ok);
        CHECK(a.non_finite);
        CHECK(a.worst_index == 1);
    }
}

TEST_CASE("row_length takes the baseline's error row by row", "[tolerance]") {
    // Row 0 has a large baseline error, row 1 an exact baseline. A candidate error in row 1
    // that hides under row 0's error with one whole-tensor row is caught row by row.
    const std::vector<double> oracle{1.0, 1.0, 1.0, 1.0};
    const std::vector<float> baseline{float(1.0 + 1e-5), 1.0f, 1.0f, 1.0f};
    const std::vector<float> candidate{float(1.0 + 1e-5), 1.0f, float(1.0 + 1e-5), 1.0f};
    CHECK(check_agreement(candidate, oracle, baseline).ok);
    Tolerance rows;
    rows.row_length = 2;
    const auto a = check_agreement(candidate, oracle, baseline, rows);
    CHECK_FALSE(a.ok);
    CHECK(a.worst_index == 2);
    rows.row_length = 3;  // does not divide 4
    CHECK_THROWS_AS(check_agreement(candidate, oracle, baseline, rows), std::invalid_argument);
}

TEST_CASE("scale_floor sets atol's scale when the output cancels to nearly 0", "[tolerance]") {
    const std::vector<double> oracle{0.01};
    const std::vector<float> baseline{0.01f};
    const std::vector<float> candidate{float(0.01 + 1e-8)};  // ~1e-8: below 4 ulps of 1.0
    const double exact_error = std::abs(double(baseline[0]) - 0.01);
    CHECK(exact_error < 1e-9);
    CHECK_FALSE(check_agreement(candidate, oracle, baseline).ok);
    Tolerance tol;
    tol.scale_floor = 1.0;
    CHECK(check_agreement(candidate, oracle, baseline, tol).ok);
}

TEST_CASE("agreement_bound is the bound check_agreement applies", "[tolerance]") {
    const std::vector<double> oracle{1.0, -3.0, 2.0};
    const std::vector<float> baseline{float(1.0 + 3e-7), -3.0f, float(2.0 - 1e-7)};
    const double bound = agreement_bound(oracle.data(), baseline.data(), oracle.size());
    CHECK(bound == Approx(3.0 * std::abs(double(baseline[0]) - 1.0) + 4.0 * kEps32 * 3.0));
    std::vector<float> candidate(baseline);
    candidate[1] = float(-3.0 + 0.9 * bound);
    CHECK(check_agreement(candidate, oracle, baseline).ok);
    candidate[1] = float(-3.0 + 1.5 * bound);
    CHECK_FALSE(check_agreement(candidate, oracle, baseline).ok);
}
