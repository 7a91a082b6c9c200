// tests/perf/kernel_shapes_test.cpp — the standard timing problems: that each one is the problem
// its name and documentation promise (speed itself is measured in bench/, never here).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "perf/kernel_shapes.hpp"
#include "reference/attention.hpp"

using namespace attncheck;

namespace {

// Over head 0's visible (query, key) pairs: the share of weights exp(s - m) (m the row's largest
// score) that are subnormal floats, in [2^-149, 2^-126), and the scores' standard deviation
// (the visible pairs by the reference's masking rule).
struct Spread {
    double subnormal_share = 0, score_sd = 0;
};

Spread spread_of(const perf::KernelProblem& pr) {
    const attncheck_problem& p = pr.p;
    const std::size_t D = std::size_t(p.head_dim);
    const double lo = std::log(0x1p-149), hi = std::log(0x1p-126);
    double pairs = 0, subnormal = 0, sum = 0, sum2 = 0;
    std::vector<double> s;
    for (int i = 0; i < p.q_len; ++i) {
        s.clear();
        for (int j = 0; j < p.kv_len; ++j) {
            if (!reference::key_visible(i, j, p.q_offset, p.causal != 0, p.kv_len)) continue;
            double dot = 0;
            for (std::size_t c = 0; c < D; ++c) dot += double(pr.q[std::size_t(i) * D + c]) * double(pr.k[std::size_t(j) * D + c]);
            s.push_back(double(p.scale) * dot);
            sum += s.back();
            sum2 += s.back() * s.back();
        }
        const double m = *std::max_element(s.begin(), s.end());
        for (const double x : s) subnormal += (x - m >= lo && x - m < hi);
        pairs += double(s.size());
    }
    const double mean = sum / pairs;
    return {subnormal / pairs, std::sqrt(sum2 / pairs - mean * mean)};
}

}  // namespace

TEST_CASE("spread-512 is prefill-512's work with scores spread into the subnormal weights") {
    const perf::KernelShape* plain = perf::find_shape("prefill-512");
    const perf::KernelShape* spread = perf::find_shape("spread-512");
    REQUIRE(plain != nullptr);
    REQUIRE(spread != nullptr);
    CHECK(spread->q_len == plain->q_len);
    CHECK(spread->kv_len == plain->kv_len);
    CHECK(spread->q_offset == plain->q_offset);
    CHECK_FALSE(spread->decode);
    const perf::KernelProblem a = perf::make_kernel_problem(*plain), b = perf::make_kernel_problem(*spread);
    CHECK(b.useful_flops == a.useful_flops);
    CHECK(b.k == a.k);  // the same keys and values: only q differs
    CHECK(b.v == a.v);
    for (std::size_t i = 0; i < a.q.size(); ++i) REQUIRE(b.q[i] == a.q[i] * perf::kSpreadQScale);

    const Spread sa = spread_of(a), sb = spread_of(b);
    INFO("prefill-512: score sd " << sa.score_sd << ", subnormal weights " << sa.subnormal_share);
    INFO("spread-512: score sd " << sb.score_sd << ", subnormal weights " << sb.subnormal_share);
    CHECK(sa.subnormal_share == 0.0);
    CHECK(sb.score_sd > 20.0);
    CHECK(sb.score_sd < 40.0);
    // A 16-lane exp instruction meets a subnormal lane almost every time at this share.
    CHECK(sb.subnormal_share > 0.10);
}
