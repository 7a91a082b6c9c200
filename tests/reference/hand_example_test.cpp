// tests/reference/hand_example_test.cpp — attention on a case small enough to do by hand.
//
// Three tokens, one head, head width 2, scale 1. Every expected value below is derived in the
// comments from the definition (KERNEL_ABI.md: out[i] = sum_j softmax_j(scale q[i].k[j] +
// mask[i][j]) v[j]), not taken from running the code. The expected values are closed forms
// (e.g. 1/(1+e)) evaluated in double.
//
//   q = [[1, 0],      k = [[1, 0],      v = [[1, 0],
//        [0, 1],           [0, 1],           [0, 1],
//        [1, 1]]           [5, 0]]           [2, 2]]
//
// Scores q k^T (scale 1):
//             k0   k1   k2
//   q0        1    0    5      causal: q0 sees k0 only    -> row [1, -inf, -inf]
//   q1        0    1    0      causal: q1 sees k0, k1     -> row [0,    1, -inf]
//   q2        1    1    5      causal: q2 sees all        -> row [1,    1,    5]
//
// k2 is chosen so that the blocked score (0, 2) = 5 is the LARGEST in row 0: an implementation
// that forgot the mask, or masked with a finite -10000 after the softmax max, would put almost
// all of row 0's weight on it. With an exact -inf mask, exp(-inf - max) = 0 exactly.
//
// Softmax, row by row (subtract the row maximum, exponentiate, normalise):
//   P0 = [1, 0, 0]                                   (one visible key: weight exactly 1)
//   P1 = [1/(1+e), e/(1+e), 0]                       (exp(0-1), exp(1-1) = e^-1, 1; times e/e)
//   P2 = [1/(2+e^4), 1/(2+e^4), e^4/(2+e^4)]         (exp(1-5), exp(1-5), exp(5-5))
//
// Outputs O = P v:
//   O0 = v0                                = [1, 0]
//   O1 = (v0 + e v1) / (1+e)               = [1/(1+e), e/(1+e)]
//   O2 = (v0 + v1 + e^4 v2) / (2+e^4)      = [(1+2e^4)/(2+e^4), (1+2e^4)/(2+e^4)]
//
// Padding (kv_valid_len) on the same inputs:
//   valid_len 2: row 2 sees k0, k1 (scores 1, 1): P2 = [1/2, 1/2, 0], O2 = [1/2, 1/2];
//                rows 0 and 1 are unchanged (k2 was already in their future).
//   valid_len 0: no row sees any key: P = 0, O = 0 (never NaN).
#include <cmath>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/kernels.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/tolerance.hpp"
#include "reference/attention.hpp"

namespace {

using attncheck::kEps32;
using attncheck::reference::attend_head;

const double e = std::exp(1.0);
const double e4 = std::exp(4.0);

// q [3, 2], k [3, 2], v [3, 2] as in the header comment.
const std::vector<float> kQ = {1, 0, 0, 1, 1, 1};
const std::vector<float> kK = {1, 0, 0, 1, 5, 0};
const std::vector<float> kV = {1, 0, 0, 1, 2, 2};

// Expected P [3, 3] and O [3, 2] for a given valid_len (3 = no padding), from the comment.
struct Expected {
    std::vector<double> P, O;
};
Expected expected_for(int valid_len) {
    if (valid_len == 0) return {std::vector<double>(9, 0.0), std::vector<double>(6, 0.0)};
    const std::vector<double> row0 = {1, 0, 0};
    const std::vector<double> row1 = {1 / (1 + e), e / (1 + e), 0};
    std::vector<double> row2 = {1 / (2 + e4), 1 / (2 + e4), e4 / (2 + e4)};
    double o2 = (1 + 2 * e4) / (2 + e4);
    if (valid_len == 2) {
        row2 = {0.5, 0.5, 0.0};
        o2 = 0.5;
    }
    Expected x;
    for (const std::vector<double>& r : {row0, row1, row2}) x.P.insert(x.P.end(), r.begin(), r.end());
    x.O = {1, 0, 1 / (1 + e), e / (1 + e), o2, o2};
    return x;
}

// A float32 result of a few operations on O(1) values: a handful of ulps.
constexpr double kHandTolerance = 8 * kEps32;

template <class T>
xt::xtensor<T, 2> as_matrix(const std::vector<float>& data) {  // [3, 2]
    xt::xtensor<T, 2> m = xt::zeros<T>({std::size_t(3), std::size_t(2)});
    for (std::size_t i = 0; i < data.size(); ++i) m.flat(i) = T(data[i]);
    return m;
}

// Exact zeros must be exact; everything else within kHandTolerance.
template <class A>
void check_matches(const A& actual, const std::vector<double>& expected, const char* what) {
    REQUIRE(actual.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO(what << "[" << i << "] = " << double(actual.flat(i)) << ", hand value " << expected[i]);
        if (expected[i] == 0.0)
            CHECK(double(actual.flat(i)) == 0.0);
        else
            CHECK(std::abs(double(actual.flat(i)) - expected[i]) <= kHandTolerance * std::abs(expected[i]));
    }
}

}  // namespace

TEMPLATE_TEST_CASE("attend_head reproduces the hand-computed three-token example", "[reference][hand]",
                   float, double) {
    const int valid_len = GENERATE(3, 2, 0);
    INFO("valid_len " << valid_len);
    const auto q = as_matrix<TestType>(kQ), k = as_matrix<TestType>(kK), v = as_matrix<TestType>(kV);
    xt::xtensor<TestType, 2> P;  // [3, 3]
    const xt::xtensor<TestType, 2> O =
        attend_head<TestType>(q, k, v, /*q_offset=*/0, /*causal=*/true, valid_len, TestType(1), &P);
    const Expected x = expected_for(valid_len);
    REQUIRE(P.shape(0) == 3);
    REQUIRE(P.shape(1) == 3);
    check_matches(P, x.P, "P");
    check_matches(O, x.O, "O");
}

TEST_CASE("the ABI reference kernel reproduces the hand-computed example", "[reference][hand][abi]") {
    // Three sequences with the same q, k, v and valid lengths 3, 2, 0: one call checks the
    // unpadded case, padding, and an all-padding sequence, and that the per-sequence
    // kv_valid_len is applied to the right sequence.
    const int32_t valid[3] = {3, 2, 0};
    attncheck_problem p = attncheck::make_problem({.batch = 3, .q_len = 3, .kv_len = 3, .head_dim = 2, .value_dim = 2,
                                                   .causal = true, .kv_valid_len = valid});
    std::vector<float> q, k, v;  // [3, 1, 3, 2] each
    for (int b = 0; b < 3; ++b) {
        q.insert(q.end(), kQ.begin(), kQ.end());
        k.insert(k.end(), kK.begin(), kK.end());
        v.insert(v.end(), kV.begin(), kV.end());
    }
    // Two sentinel elements after out: the kernel must not write past B*H*Tq*Dv.
    const float sentinel = 12345.0f;
    std::vector<float> out(3 * 6 + 2, sentinel);  // [3, 1, 3, 2] + 2
    REQUIRE(attncheck_reference_kernel(&p, q.data(), k.data(), v.data(), out.data()) == ATTNCHECK_OK);
    CHECK(out[18] == sentinel);
    CHECK(out[19] == sentinel);
    for (int b = 0; b < 3; ++b) {
        INFO("sequence " << b << ", kv_valid_len " << valid[b]);
        xt::xtensor<float, 1> ob = xt::zeros<float>({std::size_t(6)});
        for (std::size_t i = 0; i < 6; ++i) ob(i) = out[std::size_t(b) * 6 + i];
        check_matches(ob, expected_for(valid[b]).O, "out");
    }

    SECTION("the row probabilities, read through identity values") {
        // With v = I (value_dim = kv_len = 3) out row i is P row i itself (KERNEL_ABI.md's
        // black-box trick): the kernel's probabilities are checked without opening it.
        std::vector<float> vi;  // [3, 1, 3, 3]
        for (int b = 0; b < 3; ++b)
            for (int j = 0; j < 3; ++j)
                for (int c = 0; c < 3; ++c) vi.push_back(j == c ? 1.0f : 0.0f);
        p.value_dim = 3;
        std::vector<float> probs(27);  // [3, 1, 3, 3]
        REQUIRE(attncheck_reference_kernel(&p, q.data(), k.data(), vi.data(), probs.data()) == ATTNCHECK_OK);
        for (int b = 0; b < 3; ++b) {
            INFO("sequence " << b << ", kv_valid_len " << valid[b]);
            xt::xtensor<float, 1> pb = xt::zeros<float>({std::size_t(9)});
            for (std::size_t i = 0; i < 9; ++i) pb(i) = probs[std::size_t(b) * 9 + i];
            check_matches(pb, expected_for(valid[b]).P, "P");
        }
    }
}

TEST_CASE("the ABI reference kernel refuses malformed problems without touching out",
          "[reference][abi]") {
    std::vector<float> q(6, 1.0f), k(6, 1.0f), v(6, 1.0f);
    const float sentinel = -7.0f;
    std::vector<float> out(6, sentinel);
    const attncheck_problem good = attncheck::make_problem({.q_len = 3, .kv_len = 3, .head_dim = 2, .value_dim = 2});
    const int32_t bad_valid[1] = {4};  // > kv_len

    struct Case {
        const char* what;
        attncheck_problem p;
    };
    std::vector<Case> cases;
    auto with = [&](const char* what, auto edit) {
        attncheck_problem p = good;
        edit(p);
        cases.push_back({what, p});
    };
    with("unknown abi_version", [](attncheck_problem& p) { p.abi_version = 2; });
    with("batch 0", [](attncheck_problem& p) { p.batch = 0; });
    with("negative heads", [](attncheck_problem& p) { p.heads = -1; });
    with("q_len 0", [](attncheck_problem& p) { p.q_len = 0; });
    with("kv_len 0", [](attncheck_problem& p) { p.kv_len = 0; });
    with("head_dim 0", [](attncheck_problem& p) { p.head_dim = 0; });
    with("value_dim 0", [](attncheck_problem& p) { p.value_dim = 0; });
    with("negative q_offset", [](attncheck_problem& p) { p.q_offset = -1; });
    with("kv_valid_len > kv_len", [&](attncheck_problem& p) { p.kv_valid_len = bad_valid; });
    // Element counts that overflow size_t if multiplied naively: must be refused, not wrap.
    with("absurd sizes", [](attncheck_problem& p) {
        p.batch = p.heads = p.q_len = p.kv_len = p.head_dim = p.value_dim = INT32_MAX;
    });
    for (const Case& c : cases) {
        INFO(c.what);
        CHECK(attncheck_reference_kernel(&c.p, q.data(), k.data(), v.data(), out.data()) != ATTNCHECK_OK);
        for (float x : out) CHECK(x == sentinel);
    }
    CHECK(attncheck_reference_kernel(nullptr, q.data(), k.data(), v.data(), out.data()) != ATTNCHECK_OK);
    CHECK(attncheck_reference_kernel(&good, q.data(), k.data(), v.data(), nullptr) != ATTNCHECK_OK);
    CHECK(attncheck_reference_kernel(&good, q.data(), k.data(), v.data(), out.data()) == ATTNCHECK_OK);
}
