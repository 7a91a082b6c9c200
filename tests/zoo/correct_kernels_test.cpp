// tests/zoo/correct_kernels_test.cpp — NUMERICS.md version 2's "no false alarms" at a fixed slice:
// every correct kernel of correct_kernels.hpp passes the whole property suite, and its test
// ratios on the suite's own random problems stay at most 1, while a planted one-line bug goes
// above 1. (bench/bound_campaign runs the same measurement at 10^6 cases per kernel.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "attncheck/check.hpp"
#include "tests/zoo/correct_kernels.hpp"
#include "tests/zoo/ratio_cases.hpp"

using attncheck::zoo::correct_kernels;
using attncheck::zoo::CorrectKernel;

namespace {

// The fixed slice: one seed, 150 cases per kernel property, 15 per decoder property (the
// decoder properties build whole models; 15 keeps a kernel's run to a few seconds).
constexpr std::uint64_t kSliceSeed = 20240611;

void passes_the_suite(const std::string& name) {
    const auto& all = correct_kernels();
    const auto it = std::find_if(all.begin(), all.end(), [&](const CorrectKernel& k) { return k.name == name; });
    REQUIRE(it != all.end());
    attncheck::CheckOptions o;
    o.seed = kSliceSeed;
    o.cases = 150;
    o.decoder_cases = 15;
    const attncheck::CheckReport report = attncheck::check_kernel(it->fn, "correct_" + name, o);
    INFO(report.text);
    CHECK(report.failed.empty());
    REQUIRE(report.passed);
}

// A planted bug, one line away from the textbook kernel: the key at the row's own position
// (j = q_offset + i) is scored without the scale. Every other number is right, so only the
// agreement with the oracle can see it, and only when the bound is tight enough.
int diagonal_unscaled(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    const std::int64_t B = p->batch, H = p->heads, Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim,
                       Dv = p->value_dim;
    std::vector<float> s(static_cast<std::size_t>(Tk));  // [Tk]
    for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        for (std::int64_t h = 0; h < H; ++h) {
            const std::int64_t bh = b * H + h;
            for (std::int64_t i = 0; i < Tq; ++i) {
                const std::int64_t n = p->causal ? std::min(valid, p->q_offset + i + 1) : valid;
                float* o = out + (bh * Tq + i) * Dv;
                std::fill(o, o + Dv, 0.0f);
                if (n <= 0) continue;
                float m = -std::numeric_limits<float>::infinity();
                for (std::int64_t j = 0; j < n; ++j) {
                    float dot = 0.0f;
                    for (std::int64_t c = 0; c < Dk; ++c) dot += q[(bh * Tq + i) * Dk + c] * k[(bh * Tk + j) * Dk + c];
                    s[std::size_t(j)] = j == p->q_offset + i ? dot : p->scale * dot;  // the bug
                    m = std::max(m, s[std::size_t(j)]);
                }
                float sum = 0.0f;
                for (std::int64_t j = 0; j < n; ++j) sum += s[std::size_t(j)] = std::exp(s[std::size_t(j)] - m);
                for (std::int64_t j = 0; j < n; ++j)
                    for (std::int64_t c = 0; c < Dv; ++c) o[c] += s[std::size_t(j)] / sum * v[(bh * Tk + j) * Dv + c];
            }
        }
    }
    return ATTNCHECK_OK;
}

}  // namespace

#define ATTNCHECK_CORRECT_KERNEL_PASSES(name)                                              \
    TEST_CASE("correct kernel " #name " passes every property at the fixed slice") { \
        passes_the_suite(#name);                                                           \
    }
ATTNCHECK_CORRECT_KERNEL_PASSES(reversed)
ATTNCHECK_CORRECT_KERNEL_PASSES(blocked)
ATTNCHECK_CORRECT_KERNEL_PASSES(online)
ATTNCHECK_CORRECT_KERNEL_PASSES(split_kv)
ATTNCHECK_CORRECT_KERNEL_PASSES(prescaled_q)
ATTNCHECK_CORRECT_KERNEL_PASSES(exp2)
ATTNCHECK_CORRECT_KERNEL_PASSES(float64)
ATTNCHECK_CORRECT_KERNEL_PASSES(fma_pairwise)

TEST_CASE("there are at least seven correct kernels, each with a name and what sets it apart") {
    CHECK(correct_kernels().size() >= 7);
    for (const CorrectKernel& k : correct_kernels()) {
        INFO(k.name);
        CHECK(k.fn != nullptr);
        CHECK(!k.how.empty());
    }
}

TEST_CASE("correct kernels refuse an unknown ABI version and a malformed problem, give 0 on an empty row") {
    const std::vector<float> q(4, 1.0f), k(4, 1.0f), v(4, 1.0f);
    const std::int32_t valid[1] = {0};
    for (const CorrectKernel& kern : correct_kernels()) {
        INFO(kern.name);
        attncheck_problem p{ATTNCHECK_ABI_VERSION, 1, 1, 2, 2, 2, 2, 0, 1, nullptr, 0.5f};
        std::vector<float> out(4, 7.0f);
        p.abi_version = 2;
        CHECK(kern.fn(&p, q.data(), k.data(), v.data(), out.data()) != ATTNCHECK_OK);
        p.abi_version = ATTNCHECK_ABI_VERSION;
        p.q_offset = -1;
        CHECK(kern.fn(&p, q.data(), k.data(), v.data(), out.data()) != ATTNCHECK_OK);
        p.q_offset = 0;
        p.head_dim = 0;
        CHECK(kern.fn(&p, q.data(), k.data(), v.data(), out.data()) != ATTNCHECK_OK);
        p.head_dim = 2;
        CHECK(out == std::vector<float>(4, 7.0f));  // refused: out untouched
        p.kv_valid_len = valid;
        REQUIRE(kern.fn(&p, q.data(), k.data(), v.data(), out.data()) == ATTNCHECK_OK);
        CHECK(out == std::vector<float>(4, 0.0f));
    }
}

// ~2000 of the suite's own kernel problems (every style: normal, large scores, ties, small
// integers; the large tier included), one float64 oracle and bound each, every correct kernel
// and the planted bug against it.
TEST_CASE("correct kernels stay within the bound on 2000 generated problems and a planted bug does not") {
    constexpr std::uint64_t kSeed = 20240611, kCases = 2000;
    const auto& kernels = correct_kernels();
    // worst[kernel][style]
    std::vector<std::map<std::string, double>> worst(kernels.size());
    std::vector<std::string> worst_case(kernels.size());
    std::vector<double> worst_all(kernels.size(), 0.0);
    double bug_worst = 0;
    std::uint64_t bug_flagged = 0, bug_first = 0;
    std::map<std::string, int> styles;
    for (std::uint64_t i = 0; i < kCases; ++i) {
        const attncheck::zoo::BoundedKernelCase bc(attncheck::zoo::draw_kernel_case(kSeed, i));
        const std::string style = attncheck::properties::to_string(bc.c.style);
        ++styles[style];
        for (std::size_t kix = 0; kix < kernels.size(); ++kix) {
            const auto r = attncheck::zoo::kernel_ratio(kernels[kix].fn, bc);
            REQUIRE_FALSE(r.refused);
            double& w = worst[kix][style];
            w = std::max(w, r.agreement.worst_ratio);
            if (r.agreement.worst_ratio > worst_all[kix]) {
                worst_all[kix] = r.agreement.worst_ratio;
                worst_case[kix] = "case " + std::to_string(i) + ": " + describe(bc.c) + ": " + r.agreement.describe();
            }
        }
        const auto bug = attncheck::zoo::kernel_ratio(diagonal_unscaled, bc);
        if (!bug.agreement.ok && bug_flagged++ == 0) bug_first = i;
        bug_worst = std::max(bug_worst, bug.agreement.worst_ratio);
    }
    std::ostringstream table;
    table << "worst test ratio per style (seed " << kSeed << ", " << kCases << " problems:";
    for (const auto& [s, n] : styles) table << " " << s << " " << n;
    table << ")\n";
    for (std::size_t kix = 0; kix < kernels.size(); ++kix) {
        table << kernels[kix].name << ":";
        for (const auto& [s, w] : worst[kix]) table << " " << s << " " << w;
        table << "\n  worst " << worst_case[kix] << "\n";
    }
    table << "planted bug (diagonal unscaled): worst ratio " << bug_worst << ", flagged on " << bug_flagged
          << " problems, first at case " << bug_first << "\n";
    INFO(table.str());
    WARN(table.str());
    for (std::size_t kix = 0; kix < kernels.size(); ++kix) {
        INFO(kernels[kix].name);
        CHECK(worst_all[kix] <= attncheck::kRatioThreshold);
    }
    CHECK(styles.size() == 4);  // every input style was drawn
    CHECK(bug_worst > attncheck::kRatioThreshold);
    CHECK(bug_first < 50);  // killed early, not by luck at the end of the slice
}
