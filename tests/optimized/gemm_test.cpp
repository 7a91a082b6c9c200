// tests/optimized/gemm_test.cpp — the optimized decoder's matrix products (optimized/gemm.hpp).
//
// Exact properties (bitwise): linear() equals the plain triple loop with the same order of
// operations on odd sizes (ragged panels, with and without bias, concatenated weights), and its
// result does not depend on the thread count.
//
// Dimension legend: M/N/K = the matrix product's rows, outputs, reduction.
#include <cstddef>
#include <random>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "optimized/gemm.hpp"
#include "tests/optimized/thread_count.hpp"

namespace {

using namespace attncheck;
using optimized::Activation32;
using testing::ThreadCount;

}  // namespace

TEST_CASE("linear() equals the plain loop bitwise on odd sizes", "[optimized][gemm]") {
    const std::uint64_t seed = 20240601;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // Sizes straddle every edge: 1, the micro-kernel's 12 rows, the GEMV limit 4, the 32-column
    // panel, the 144-row block and the 256-deep K block.
    for (int m : {1, 2, 3, 4, 5, 7, 12, 13, 33, 100, 150})
        for (int n : {1, 7, 32, 33, 100, 300})
            for (int k : {1, 7, 33, 100, 257})
                for (Activation32 act : {Activation32::none, Activation32::relu, Activation32::gelu, Activation32::gelu_tanh})
                    for (int with_residual : {0, 1}) {
                        if (with_residual && act != Activation32::none && act != Activation32::relu) continue;
                        const int ldx = k + 3, ldy = n + 5;  // strided rows: the ld arguments are honoured
                        std::vector<float> w(std::size_t(n) * k), b(static_cast<std::size_t>(n)), x(std::size_t(m) * ldx),
                            r(std::size_t(m) * ldy);
                        for (auto* v : {&w, &b, &x, &r})
                            for (float& e : *v) e = u(rng);
                        const auto W = optimized::pack_weights(w.data(), n, k, b.data());
                        std::vector<float> got(r), want(r);  // start from the residual: in place
                        const float* res = with_residual ? got.data() : nullptr;
                        optimized::linear(W, x.data(), m, ldx, got.data(), ldy, act, res, ldy);
                        optimized::linear_naive(w.data(), b.data(), n, k, x.data(), m, ldx, want.data(), ldy, act,
                                                with_residual ? r.data() : nullptr, ldy);
                        for (int i = 0; i < m; ++i)
                            for (int j = 0; j < ldy; ++j) {
                                const std::size_t e = std::size_t(i) * ldy + std::size_t(j);
                                if (got[e] != want[e]) {
                                    FAIL_CHECK("M=" << m << " N=" << n << " K=" << k << " act=" << int(act)
                                                    << " residual=" << with_residual << " seed=" << seed << ": y[" << i
                                                    << "," << j << "] = " << got[e] << ", plain loop " << want[e]
                                                    << (j >= n ? " (past N: must be untouched)" : ""));
                                    return;
                                }
                            }
                    }
}

TEST_CASE("linear() without bias, several weights concatenated", "[optimized][gemm]") {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int k = 45, m = 17;
    std::vector<float> w1(10 * k), w2(27 * k), b1(10), x(std::size_t(m) * k);
    for (auto* v : {&w1, &w2, &b1, &x})
        for (float& e : *v) e = u(rng);
    // Part 2 has no bias: its columns get bias 0, which must not change anything.
    const auto W = optimized::pack_weights({{w1.data(), 10, b1.data()}, {w2.data(), 27, nullptr}}, k);
    REQUIRE(W.n == 37);
    std::vector<float> got(std::size_t(m) * 37), want1(std::size_t(m) * 10), want2(std::size_t(m) * 27);
    optimized::linear(W, x.data(), m, k, got.data(), 37);
    optimized::linear_naive(w1.data(), b1.data(), 10, k, x.data(), m, k, want1.data(), 10);
    std::vector<float> zero(27, 0.0f);
    optimized::linear_naive(w2.data(), zero.data(), 27, k, x.data(), m, k, want2.data(), 27);
    for (int i = 0; i < m; ++i) {
        for (int j = 0; j < 10; ++j) REQUIRE(got[std::size_t(i) * 37 + j] == want1[std::size_t(i) * 10 + j]);
        for (int j = 0; j < 27; ++j) REQUIRE(got[std::size_t(i) * 37 + 10 + j] == want2[std::size_t(i) * 27 + j]);
    }
}

TEST_CASE("linear() is bitwise the same on 1 and 2 threads", "[optimized][gemm][threads]") {
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto [m, n, k] : {std::tuple{1, 300, 200}, {3, 300, 200}, {200, 700, 300}, {500, 64, 600}}) {
        std::vector<float> w(std::size_t(n) * k), b(static_cast<std::size_t>(n)), x(std::size_t(m) * k);
        for (auto* v : {&w, &b, &x})
            for (float& e : *v) e = u(rng);
        const auto W = optimized::pack_weights(w.data(), n, k, b.data());
        std::vector<float> y1(std::size_t(m) * n), y2(y1.size());
        {
            ThreadCount t(1);
            optimized::linear(W, x.data(), m, k, y1.data(), n, Activation32::gelu);
        }
        {
            ThreadCount t(2);
            optimized::linear(W, x.data(), m, k, y2.data(), n, Activation32::gelu);
        }
        INFO("M=" << m << " N=" << n << " K=" << k);
        REQUIRE(y1 == y2);
    }
}

