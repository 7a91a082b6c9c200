// tests/optimized/gemm_test.cpp — the optimized decoder's matrix products (optimized/gemm.hpp).
//
// Exact properties (bitwise): linear() equals the plain triple loop with the same order of
// operations on odd sizes (ragged panels, with and without bias, concatenated weights), and its
// result does not depend on the thread count, nor on the GEMV's panels per tile that the thread
// count picks.
//
// Dimension legend: M/N/K = the matrix product's rows, outputs, reduction.
#include <algorithm>
#include <cstddef>
#include <random>
#include <set>
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


TEST_CASE("the GEMV's panels per tile keep every thread busy", "[optimized][gemm][threads]") {
    using optimized::gemv_panels_per_tile;
    // The busiest thread's panels under a static schedule of ceil(P / np) tiles.
    auto load = [](int panels, int threads, int np) {
        const int tiles = (panels + np - 1) / np;
        return std::min((tiles + threads - 1) / threads * np, panels);
    };
    // The `base` model's matrices (d 512, f 2048, V 8192): 16, 48, 64 and 256 panels. On 1 and
    // 2 threads the widest tiles already split evenly, so they are kept.
    for (int panels : {16, 48, 64, 256}) {
        CHECK(gemv_panels_per_tile(panels, 1, 8) == 8);
        CHECK(gemv_panels_per_tile(panels, 2, 8) == 8);
    }
    // On 16 threads the 512-column products get a panel per thread instead of 2 tiles of 8
    // (14 threads idle), and the 1536-column one 3 panels per thread instead of 8.
    CHECK(gemv_panels_per_tile(16, 16, 8) == 1);
    CHECK(gemv_panels_per_tile(48, 16, 8) == 1);
    CHECK(gemv_panels_per_tile(64, 16, 8) == 4);
    CHECK(gemv_panels_per_tile(256, 16, 8) == 8);
    CHECK(gemv_panels_per_tile(9, 3, 3) == 3);   // 3 tiles of 3, or 3 panels each one by one
    CHECK(gemv_panels_per_tile(10, 3, 3) == 1);  // 4 tiles of 3: 6 panels on one thread
    CHECK(gemv_panels_per_tile(5, 0, 8) == 8);   // a thread count below 1 counts as 1
    for (int max_np : {1, 2, 3, 4, 8})
        for (int panels = 1; panels <= 300; ++panels)
            for (int threads : {1, 2, 3, 4, 5, 7, 8, 12, 16, 64}) {
                const int np = gemv_panels_per_tile(panels, threads, max_np);
                INFO("panels " << panels << ", threads " << threads << ", max " << max_np << ": " << np);
                bool in_sequence = false;
                for (int c = max_np; c >= 1; c /= 2) in_sequence = in_sequence || c == np;
                REQUIRE(in_sequence);
                for (int c = max_np; c >= 1; c /= 2) {
                    REQUIRE(load(panels, threads, np) <= load(panels, threads, c));
                    if (c > np) REQUIRE(load(panels, threads, np) < load(panels, threads, c));
                }
            }
}

TEST_CASE("the GEMV equals the plain loop bitwise for every panels-per-tile choice", "[optimized][gemm][threads]") {
    // The thread count picks how many panels a GEMV tile takes (gemv_panels_per_tile); 300
    // columns are 10 panels, which 1, 3, 5 and 16 threads group by 8, 4, 2 and 1 (at most 8 per
    // tile) and 4, 4, 2, 1 (at most 4). No choice may change a bit.
    {
        std::set<int> chosen;
        for (int threads : {1, 2, 3, 5, 16}) chosen.insert(optimized::gemv_panels_per_tile(10, threads, 8));
        REQUIRE(chosen == std::set<int>{1, 2, 4, 8});
    }
    std::mt19937_64 rng(31);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int m : {1, 2, 3, 4})
        for (int n : {33, 300, 1000})
            for (int k : {7, 257})
                for (int with_residual : {0, 1}) {
                    const int ldx = k + 1, ldy = n + 3;
                    std::vector<float> w(std::size_t(n) * k), b(static_cast<std::size_t>(n)), x(std::size_t(m) * ldx),
                        r(std::size_t(m) * ldy);
                    for (auto* v : {&w, &b, &x, &r})
                        for (float& e : *v) e = u(rng);
                    const auto W = optimized::pack_weights(w.data(), n, k, b.data());
                    std::vector<float> want(r);
                    optimized::linear_naive(w.data(), b.data(), n, k, x.data(), m, ldx, want.data(), ldy,
                                            Activation32::relu, with_residual ? r.data() : nullptr, ldy);
                    for (int threads : {1, 2, 3, 5, 16}) {
                        ThreadCount t(threads);
                        std::vector<float> got(r);
                        optimized::linear(W, x.data(), m, ldx, got.data(), ldy, Activation32::relu,
                                          with_residual ? got.data() : nullptr, ldy);
                        INFO("M=" << m << " N=" << n << " K=" << k << " residual=" << with_residual << ", "
                                  << threads << " threads ("
                                  << optimized::gemv_panels_per_tile(W.num_panels(), threads, 8)
                                  << " panels per tile at most 8)");
                        REQUIRE(got == want);
                    }
                }
}
