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
    // panel, the 144-row block and the 128-256-deep K block of the L1 rule (the AVX2 path's
    // deeper K blocks: the next test).
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

TEST_CASE("linear() equals the plain loop bitwise across K blocks", "[optimized][gemm]") {
    // The GEMM splits K into blocks whose partial sums it stores and reloads: 128-256 deep by
    // the L1 rule, equal blocks of at most 512 on the AVX2 path. K one past each edge (a last
    // block of 1), 2-4 blocks, and a depth that does not divide evenly; 150 rows: two row blocks.
    // Up to 2 column blocks (n <= 512) each tile packs its own x block per K block, beyond that
    // the tiles share x packed once (1000 columns: 32 panels).
    std::mt19937_64 rng(512);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int m : {13, 150})
        for (int n : {33, 100, 300, 1000})
            for (int k : {129, 193, 257, 513, 1025, 1537, 2000}) {
                const int ldx = k + 1, ldy = n + 1;
                std::vector<float> w(std::size_t(n) * k), b(static_cast<std::size_t>(n)), x(std::size_t(m) * ldx),
                    r(std::size_t(m) * ldy);
                for (auto* v : {&w, &b, &x, &r})
                    for (float& e : *v) e = u(rng);
                const auto W = optimized::pack_weights(w.data(), n, k, b.data());
                std::vector<float> got(r), want(r);
                optimized::linear(W, x.data(), m, ldx, got.data(), ldy, Activation32::relu, got.data(), ldy);
                optimized::linear_naive(w.data(), b.data(), n, k, x.data(), m, ldx, want.data(), ldy, Activation32::relu,
                                        r.data(), ldy);
                INFO("M=" << m << " N=" << n << " K=" << k);
                REQUIRE(got == want);
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


TEST_CASE("panels per tile keep every thread busy", "[optimized][gemm][threads]") {
    using optimized::busiest_thread_panels;
    using optimized::panels_per_tile;
    // The load model, against dealing the tiles one by one to the least loaded thread.
    for (int panels : {1, 7, 10, 16, 48, 100})
        for (int row_blocks : {1, 3, 4})
            for (int threads : {1, 2, 3, 16})
                for (int np : {1, 2, 3, 4, 8}) {
                    std::vector<long> load(std::size_t(threads), 0);
                    for (int c = 0; c < (panels + np - 1) / np; ++c)
                        for (int r = 0; r < row_blocks; ++r)
                            *std::min_element(load.begin(), load.end()) += std::min(np, panels - c * np);
                    INFO("panels " << panels << ", row blocks " << row_blocks << ", threads " << threads << ", np " << np);
                    REQUIRE(busiest_thread_panels(panels, row_blocks, threads, np) ==
                            *std::max_element(load.begin(), load.end()));
                }
    CHECK(busiest_thread_panels(10, 3, 2, 8) == 16);  // tiles 8 8 8 2 2 2: 8+8 and 8+2+2+2
    // The `base` model's matrices (d 512, f 2048, V 8192): 16, 48, 64 and 256 panels. On 1 and
    // 2 threads the widest tiles already split evenly, so they are kept: in a decode step's GEMV
    // (1 row block), a T=128 prefill's GEMM (1 block of 144 rows) and a T=512 one's (4).
    for (int panels : {16, 48, 64, 256})
        for (int row_blocks : {1, 4})
            for (int threads : {1, 2}) CHECK(panels_per_tile(panels, row_blocks, threads, 8) == 8);
    // On 16 threads a decode step's 512-column products get a panel per thread instead of 2
    // tiles of 8 (14 threads idle), the 1536-column one 3 panels per thread instead of 8.
    CHECK(panels_per_tile(16, 1, 16, 8) == 1);
    CHECK(panels_per_tile(48, 1, 16, 8) == 1);
    CHECK(panels_per_tile(64, 1, 16, 8) == 4);
    CHECK(panels_per_tile(256, 1, 16, 8) == 8);
    // A T=512 prefill (4 row blocks) on 16 threads: 16 tiles of 4 panels for 512 columns, not 8
    // of 8; 48 tiles of 4 for 1536, not 24 of 8 (2 on some threads, 1 on others).
    CHECK(panels_per_tile(16, 4, 16, 8) == 4);
    CHECK(panels_per_tile(48, 4, 16, 8) == 4);
    CHECK(panels_per_tile(256, 4, 16, 8) == 8);
    CHECK(panels_per_tile(10, 3, 2, 8) == 8);  // 15 panels against 16: not a fifth less
    CHECK(panels_per_tile(9, 1, 3, 3) == 3);   // 3 tiles of 3, one each
    CHECK(panels_per_tile(10, 1, 3, 3) == 3);  // 3, 3, 3 and 1: 4 panels, as one by one
    CHECK(panels_per_tile(5, 0, 0, 8) == 8);   // a count below 1 counts as 1
    for (int max_np : {1, 2, 3, 4, 8})
        for (int panels = 1; panels <= 300; ++panels)
            for (int row_blocks : {1, 3})
                for (int threads : {1, 2, 3, 4, 5, 7, 8, 12, 16, 64}) {
                    const int np = panels_per_tile(panels, row_blocks, threads, max_np);
                    INFO("panels " << panels << ", row blocks " << row_blocks << ", threads " << threads << ", max "
                                   << max_np << ": " << np);
                    bool in_sequence = false;
                    for (int c = max_np; c >= 1; c /= 2) in_sequence = in_sequence || c == np;
                    REQUIRE(in_sequence);
                    const long chosen = busiest_thread_panels(panels, row_blocks, threads, np);
                    for (int c = max_np; c >= 1; c /= 2) {
                        const long other = busiest_thread_panels(panels, row_blocks, threads, c);
                        if (c > np) REQUIRE(chosen <= other);       // never worse than a wider tile
                        if (c < np) REQUIRE(5 * other > 4 * chosen);  // no narrower one saves a fifth
                    }
                }
}

TEST_CASE("linear() equals the plain loop bitwise for every panels-per-tile choice", "[optimized][gemm][threads]") {
    // The thread count picks how many panels a tile takes (panels_per_tile); 300 columns are 10
    // panels, which a GEMV (1 row block, at most 8 per tile as on AVX-512 with one row) and a
    // GEMM of 300 rows (3 row blocks of 144) group by 8, 4, 2 or 1 depending on the thread count
    // (1, 2, 3, 5, 6 or 16). No choice may change a bit.
    {
        std::set<int> gemv, gemm;
        for (int threads : {1, 2, 3, 5, 6, 16}) {
            gemv.insert(optimized::panels_per_tile(10, 1, threads, 8));
            gemm.insert(optimized::panels_per_tile(10, 3, threads, 8));
        }
        REQUIRE(gemv == std::set<int>{1, 2, 4, 8});
        REQUIRE(gemm == std::set<int>{2, 4, 8});
    }
    std::mt19937_64 rng(31);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int m : {1, 2, 3, 4, 13, 300})
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
                    for (int threads : {1, 2, 3, 5, 6, 16}) {
                        ThreadCount t(threads);
                        std::vector<float> got(r);
                        optimized::linear(W, x.data(), m, ldx, got.data(), ldy, Activation32::relu,
                                          with_residual ? got.data() : nullptr, ldy);
                        INFO("M=" << m << " N=" << n << " K=" << k << " residual=" << with_residual << ", "
                                  << threads << " threads");
                        REQUIRE(got == want);
                    }
                }
}
