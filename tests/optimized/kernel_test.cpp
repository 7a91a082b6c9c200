// tests/optimized/kernel_test.cpp — the fused attention kernel (attncheck_optimized_kernel)
// against the float64 reference, plus the exact properties it promises; the kernel on strided
// views and on keys in its tiles is tested in kernel_strided_test.cpp.
//
// Accuracy: every case runs the optimized kernel, reference::attention<double> (the oracle) and
// reference::attention<float> (the float32 baseline), and demands check_agreement() of
// attncheck/tolerance.hpp (NUMERICS.md). Shapes are chosen to straddle every blocking edge of
// the kernel (attention_kernel.hpp: 64-key tiles, 512-key chunks, 64-row query blocks, 6-row
// micro-blocks, 16-lane vectors, 64-column P V passes).
//
// Exact properties (bitwise, not within a tolerance): determinism over thread counts, causality
// (future keys and values cannot change a row), chunked prefill == full prefill, no write
// outside out, inputs unchanged, rows with no visible key exactly 0.
//
// To add a case: append a Case to the grid in "agrees with the float64 reference" (or build
// one with random_case) — every case prints its shape and seed when it fails.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <omp.h>

#include "attncheck/kernels.hpp"
#include "kernels/registry.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/tolerance.hpp"
#include "optimized/aligned.hpp"
#include "optimized/attention_kernel.hpp"
#include "optimized/simd_targets.hpp"
#include "reference/attention.hpp"
#include "reference/error_bound.hpp"
#include "tests/optimized/kernel_cases.hpp"

namespace {

namespace detail = attncheck::optimized::attention_detail;
using namespace attncheck::testing;  // Case and its helpers (kernel_cases.hpp)

// The agreement check of NUMERICS.md, with the case and the worst element in the message.
void check_against_reference(const Case& c) {
    const attncheck_problem p = c.problem();
    const std::vector<float> out = run_optimized(c);
    const attncheck::reference::BoundedOutput oracle =
        attncheck::reference::attention_bounded(p, c.q.data(), c.k.data(), c.v.data());
    const attncheck::Agreement a = attncheck::check_against_bound(out, oracle.value, oracle.bound);
    INFO(c.describe());
    INFO(a.describe() << " (flat index = ((b*H + h)*Tq + i)*Dv + col)");
    CHECK(a.ok);
}

}  // namespace

TEST_CASE("optimized kernel is registered beside the reference", "[kernel][registry]") {
    using attncheck::KernelRole;
    const auto ks = attncheck::kernels_of(KernelRole::builtin);
    REQUIRE(ks.size() >= 2);
    CHECK(ks[0]->name == "reference");
    CHECK(ks[0]->fn == &attncheck_reference_kernel);
    CHECK(ks[1]->name == "optimized");
    CHECK(ks[1]->fn == &attncheck_optimized_kernel);
    for (const auto* e : ks) CHECK_FALSE(e->description.empty());
    REQUIRE(attncheck::find_kernel("optimized", KernelRole::builtin) != nullptr);
    CHECK(attncheck::find_kernel("optimized", KernelRole::builtin)->fn == &attncheck_optimized_kernel);
    CHECK(attncheck::find_kernel("no-such-kernel") == nullptr);
    CHECK(attncheck::find_kernel("zoo_base", KernelRole::builtin) == nullptr);
}

TEST_CASE("vectorized exp is within 2 ulp and exact at 0 and -inf", "[kernel][exp]") {
    // Sweep [-87.3, 0] (results >= FLT_MIN) densely, plus every float in [-1e-3, 0] steps.
    std::vector<float> x;
    for (int i = 0; i <= 400000; ++i) x.push_back(-87.3f * float(i) / 400000.0f);
    for (float t = -1e-3f; t < 0; t = std::nextafter(t, 1.0f) + 1e-9f) x.push_back(t);
    std::vector<float> y(x.size());
    detail::exp_nonpositive(x.data(), y.data(), x.size());
    double worst_ulps = 0;
    float worst_x = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double exact = std::exp(double(x[i]));
        const float fe = float(exact);
        const double ulp = double(std::nextafter(fe, 2.0f * fe + 1.0f)) - double(fe);
        const double ulps = std::abs(double(y[i]) - exact) / ulp;
        if (ulps > worst_ulps) worst_ulps = ulps, worst_x = x[i];
    }
    INFO("worst: " << worst_ulps << " ulp at x = " << worst_x);
    CHECK(worst_ulps <= 2.0);

    // Where exp(x) < 2^-126 (x < kExpFlushBelow: -inf, -104, -90, the float just below the
    // threshold) the vector paths give +0, an absolute error under 2^-126 (NUMERICS' underflow
    // term); the scalar path's std::exp gives the subnormal, within 2^-149 of it. At the
    // threshold itself exp is computed: at least 2^-126 up to 2 ulp.
    const float flush_below = detail::kExpFlushBelow;
    const float just_below = std::nextafter(flush_below, -200.0f);
    const float special[] = {0.0f, -0.0f, -std::numeric_limits<float>::infinity(), -104.0f, -1e30f,
                             -90.0f, just_below, flush_below, std::numeric_limits<float>::quiet_NaN()};
    constexpr int kSpecial = sizeof(special) / sizeof(special[0]);
    float ys[kSpecial];
    detail::exp_nonpositive(special, ys, kSpecial);
    CHECK(std::exp(double(just_below)) < 0x1p-126);
    CHECK(std::exp(double(flush_below)) >= 0x1p-126);
    CHECK(ys[0] == 1.0f);
    CHECK(ys[1] == 1.0f);
    const bool flushes = attncheck::optimized::isa_choice().path != "scalar";
    for (int i = 2; i <= 6; ++i) {
        INFO("x = " << special[i]);
        if (flushes) {
            CHECK(ys[i] == 0.0f);
            CHECK_FALSE(std::signbit(ys[i]));
        } else {
            CHECK(std::abs(double(ys[i]) - std::exp(double(special[i]))) <= 0x1p-149);
        }
    }
    const double at = std::exp(double(flush_below));
    CHECK(std::abs(double(ys[7]) - at) <= 2 * 0x1p-149);  // 2 ulp of a number near 2^-126
    CHECK(std::isnan(ys[8]));
}

TEST_CASE("optimized kernel agrees with the float64 reference on a shape grid", "[kernel][accuracy]") {
    // Head widths: 1 and 3 (narrower than a vector), 64 and 128 (the fast, full-vector widths),
    // 80 (a P V pass of 64 columns plus a 16-lane remainder). Lengths straddle the 6-row
    // micro-block, the 64-key tile, the 64-row query block and the 512-key chunk.
    std::uint64_t seed = 100;
    for (int Dk : {1, 3, 64, 80, 128})
        for (int Dv : {Dk, Dk == 64 ? 17 : 64})
            for (int T : {1, 5, 7, 63, 65, 130}) {
                check_against_reference(make_case(1, 2, T, T, Dk, Dv, 0, true, ++seed));
                check_against_reference(make_case(1, 1, T, T, Dk, Dv, 0, false, ++seed));
            }
}

TEST_CASE("optimized kernel agrees across chunk boundaries: decode and chunked prefill",
          "[kernel][accuracy]") {
    std::uint64_t seed = 500;
    // Decode steps (q_len = 1, q_offset = kv_len - 1) across one and several 512-key chunks:
    // 6 (sequence, head) pairs go one per task; a single pair takes the split path that hands
    // its chunks to different threads (taken when there are fewer than 2 pairs per thread).
    for (int Tk : {1, 2, 511, 512, 513, 1100})
        for (int Dk : {64, 3}) {
            check_against_reference(make_case(2, 3, 1, Tk, Dk, Dk, Tk - 1, true, ++seed));
            check_against_reference(make_case(1, 1, 1, Tk, Dk, Dk, Tk - 1, true, ++seed));
        }
    // Chunked prefill: q_len rows starting at q_offset; kv_len = q_offset + q_len.
    for (int q_len : {1, 6, 64, 70})
        for (int q_offset : {0, 5, 505, 600}) {
            const int Tk = q_offset + q_len;
            check_against_reference(make_case(1, 2, q_len, Tk, 64, 48, q_offset, true, ++seed));
        }
    // Queries that see fewer keys than exist (q_offset + Tq < kv_len, a cache with room left).
    check_against_reference(make_case(1, 1, 10, 900, 32, 32, 520, true, ++seed));
}

TEST_CASE("optimized kernel agrees with batches and padding", "[kernel][accuracy][padding]") {
    std::uint64_t seed = 900;
    for (bool causal : {true, false})
        for (int Tk : {1, 9, 70, 600}) {
            const int Tq = causal ? std::min(Tk, 70) : 13;
            Case c = make_case(3, 2, Tq, Tk, 24, 40, causal ? Tk - Tq : 0, causal, ++seed);
            c.padded = true;
            // One sequence with no valid key, one half padded, one unpadded.
            c.valid = {0, Tk / 2, Tk};
            check_against_reference(c);
            // Every padding length 0 .. Tk for a short sequence.
            if (Tk <= 70)
                for (int len = 0; len <= Tk; ++len) {
                    c.valid = {len, Tk - len, std::min(len + 1, Tk)};
                    check_against_reference(c);
                }
        }
}

TEST_CASE("optimized kernel agrees with random shapes, scales and offsets", "[kernel][accuracy]") {
    std::mt19937_64 rng(2024);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int n = 0; n < 60; ++n) {
        const int Tq = pick(1, 80);
        const int q_offset = pick(0, 1) ? pick(0, 600) : 0;
        const bool causal = pick(0, 3) != 0;
        const int Tk = causal ? q_offset + Tq + pick(0, 1) * pick(0, 40) : pick(1, 700);
        Case c = make_case(pick(1, 3), pick(1, 3), Tq, Tk, pick(1, 130), pick(1, 130), q_offset,
                           causal, 10000 + std::uint64_t(n));
        const float scales[] = {c.scale, -0.7f, 0.0f, 2.5f};
        c.scale = scales[pick(0, 3)];
        if (pick(0, 1)) {
            c.padded = true;
            c.valid.clear();
            for (int b = 0; b < c.B; ++b) c.valid.push_back(pick(0, Tk));
        }
        check_against_reference(c);
    }
}

TEST_CASE("optimized kernel survives scores of order 1e3 (an unguarded exp overflows)",
          "[kernel][accuracy][adversarial]") {
    // exp(1000) is inf in float: a kernel that forgets to subtract the running max returns NaN,
    // and one that rescales the accumulator wrongly when the max jumps is off by e^(jump).
    for (int Dk : {1, 16, 64}) {
        Case c = make_case(1, 2, 70, 600, Dk, 20, 0, true, 77 + std::uint64_t(Dk));
        c.scale = 1.0f;
        c.input_scale = std::sqrt(1000.0f / float(Dk)) * 1.7f;  // |q.k| up to ~3e3
        fill_inputs(c);
        check_against_reference(c);
        c.causal = false;
        check_against_reference(c);
        // Decode over several chunks, where each chunk's max differs wildly from the others'.
        Case d = make_case(1, 2, 1, 1500, Dk, 20, 1499, true, 99 + std::uint64_t(Dk));
        d.scale = 1.0f;
        d.input_scale = c.input_scale;
        fill_inputs(d);
        check_against_reference(d);
    }
}

TEST_CASE("optimized kernel on ties: equal scores give the mean of the values", "[kernel][ties]") {
    // All keys equal: every visible weight is exactly tied, so row i is the mean of values
    // 0 .. q_offset + i. A max that is taken per tile and then mis-merged shows up here.
    Case c = make_case(1, 1, 20, 700, 8, 8, 680, true, 5);
    for (int j = 1; j < c.Tk; ++j)
        std::copy(c.k.begin(), c.k.begin() + c.Dk, c.k.begin() + std::ptrdiff_t(j) * c.Dk);
    check_against_reference(c);
    // Zero queries make every score exactly 0 whatever the keys and the (negative) scale.
    Case z = make_case(1, 2, 30, 1100, 16, 16, 1070, true, 6);
    z.scale = -3.0f;
    std::fill(z.q.begin(), z.q.end(), 0.0f);
    check_against_reference(z);
}

TEST_CASE("rows with no visible key are exactly 0", "[kernel][masking]") {
    // A sequence whose kv_valid_len is 0 (causal and not): every row of it sees no key, so its
    // softmax has max -inf and sum 0; exp(-inf - -inf) would give NaN if not guarded.
    for (bool causal : {true, false}) {
        Case c = make_case(2, 2, 5, 40, 16, 16, causal ? 35 : 0, causal, 11);
        c.padded = true;
        c.valid = {0, 40};
        const std::vector<float> out = run_optimized(c);
        const std::size_t per_seq = std::size_t(c.H) * c.Tq * c.Dv;
        for (std::size_t i = 0; i < per_seq; ++i) {
            INFO("element " << i << " of the fully padded sequence: " << out[i]);
            REQUIRE(out[i] == 0.0f);
            REQUIRE_FALSE(std::signbit(out[i]));
        }
        for (std::size_t i = per_seq; i < out.size(); ++i) REQUIRE(std::isfinite(out[i]));
    }
}

TEST_CASE("optimized kernel is bitwise deterministic across thread counts", "[kernel][determinism]") {
    ThreadCountGuard guard;
    const Case cases[] = {
        make_case(1, 3, 200, 200, 64, 64, 0, true, 21),      // prefill: query blocks across threads
        make_case(2, 2, 1, 1500, 64, 64, 1499, true, 22),    // decode: chunks across threads
        make_case(1, 1, 3, 2000, 80, 24, 1997, true, 23),    // a few query rows, split path
        make_case(1, 2, 70, 1100, 16, 16, 1030, true, 24),   // chunked prefill, two query blocks
        make_case(2, 1, 33, 700, 5, 7, 0, false, 25),        // non-causal
    };
    for (const Case& c : cases) {
        INFO(c.describe());
        omp_set_num_threads(1);
        const std::vector<float> one = run_optimized(c);
        for (int threads : {2, 3, 4}) {
            omp_set_num_threads(threads);
            const std::vector<float> other = run_optimized(c);
            INFO(threads << " threads; first differing element "
                         << first_difference(one.data(), other.data(), one.size()));
            CHECK(bitwise_equal(one, other));
        }
    }
}

TEST_CASE("exact causality: future keys and values cannot change a row", "[kernel][causality]") {
    // Row i (absolute position q_offset + i) may read keys 0 .. q_offset + i only. Perturbing
    // key/value rows after that position, including ones inside the row's own 64-key tile and
    // with inf and NaN, must leave rows 0 .. i bitwise unchanged.
    for (int q_offset : {0, 520}) {
        Case c = make_case(1, 2, 90, q_offset + 90, 64, 32, q_offset, true, 31 + std::uint64_t(q_offset));
        const std::vector<float> before = run_optimized(c);
        for (int i : {0, 5, 40, 63, 64, 89}) {
            Case d = c;
            const int first_future = q_offset + i + 1;
            for (int h = 0; h < d.H; ++h)
                for (int j = first_future; j < d.Tk; ++j) {
                    float* kr = d.k.data() + (std::size_t(h) * d.Tk + j) * d.Dk;
                    float* vr = d.v.data() + (std::size_t(h) * d.Tk + j) * d.Dv;
                    for (int e = 0; e < d.Dk; ++e) kr[e] = (j % 3 == 0) ? 1e30f : -kr[e] * 7.0f;
                    for (int e = 0; e < d.Dv; ++e)
                        vr[e] = (j % 5 == 0) ? std::numeric_limits<float>::infinity()
                                             : (j % 7 == 0 ? std::nanf("") : vr[e] + 100.0f);
                }
            const std::vector<float> after = run_optimized(d);
            for (int h = 0; h < c.H; ++h) {
                const std::size_t n = std::size_t(i + 1) * c.Dv;
                const std::size_t at = std::size_t(h) * c.Tq * c.Dv;
                INFO("q_offset " << q_offset << ", head " << h << ", perturbed keys >= " << first_future
                                 << "; first differing element in rows 0.." << i << ": "
                                 << first_difference(before.data() + at, after.data() + at, n));
                CHECK(std::memcmp(before.data() + at, after.data() + at, n * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("values on cache lines (read in place) and off them (copied) give the same bits", "[kernel][alignment]") {
    // A prefill of several query blocks reads values in place only when every row starts on a
    // 64-byte line, and copies them otherwise; a decode step always reads them in place. Each
    // case runs with q, k, v and out at float offsets 0 (on a line), 4, 8 and 12 (off it) and 16
    // (on a line again) of 64-byte aligned buffers, on 1 and 3 threads.
    ThreadCountGuard guard;
    const Case cases[] = {
        make_case(1, 3, 200, 200, 64, 64, 0, true, 81),   // several query blocks
        make_case(2, 2, 130, 130, 32, 48, 0, false, 82),  // non-causal; rows of 48 floats (3 lines)
        make_case(1, 2, 70, 600, 16, 16, 530, true, 83),  // chunked prefill; rows of 16 floats
        make_case(2, 2, 1, 1300, 64, 64, 1299, true, 84), // a decode step
    };
    const auto run_at = [](const Case& c, std::size_t off) {
        const auto placed = [off](const std::vector<float>& x) {
            attncheck::optimized::AlignedVector<float> a(x.size() + off);
            std::copy(x.begin(), x.end(), a.begin() + std::ptrdiff_t(off));
            return a;
        };
        const attncheck::optimized::AlignedVector<float> q = placed(c.q), k = placed(c.k), v = placed(c.v);
        attncheck::optimized::AlignedVector<float> out(c.out_size() + off, std::numeric_limits<float>::quiet_NaN());
        const attncheck_problem p = c.problem();
        REQUIRE(attncheck_optimized_kernel(&p, q.data() + off, k.data() + off, v.data() + off, out.data() + off) ==
                ATTNCHECK_OK);
        CHECK(std::equal(c.v.begin(), c.v.end(), v.begin() + std::ptrdiff_t(off)));  // v unchanged
        return std::vector<float>(out.begin() + std::ptrdiff_t(off), out.end());
    };
    for (const Case& c : cases)
        for (const int threads : {1, 3}) {
            omp_set_num_threads(threads);
            const std::vector<float> on_line = run_at(c, 0);
            for (const std::size_t off : {4, 8, 12, 16}) {
                INFO(c.describe() << " threads=" << threads << " offset=" << off << " floats");
                const std::vector<float> got = run_at(c, off);
                INFO("first differing element " << first_difference(on_line.data(), got.data(), got.size()));
                CHECK(bitwise_equal(on_line, got));
            }
        }
}

TEST_CASE("chunked prefill and decode steps over a longer cache reproduce a full prefill bitwise",
          "[kernel][causality]") {
    // A row's arithmetic depends only on its query and its visible keys (tiles and chunks are
    // aligned to absolute key positions), so splitting the rows into chunks of any size, or
    // appending keys beyond the row's position, reproduces the full prefill exactly.
    const int T = 700, Dk = 64, Dv = 40, H = 2;
    Case full = make_case(1, H, T, T, Dk, Dv, 0, true, 41);
    const std::vector<float> ref = run_optimized(full);
    for (int step : {1, 7, 64, 300}) {
        for (int start = 0; start < T; start += step) {
            const int len = std::min(step, T - start);
            // Rows start .. start+len-1, with the cache holding keys 0 .. start+len-1 (+ 5 keys
            // of garbage beyond, as a preallocated cache would have, when there is room).
            const int extra = start + len + 5 <= T ? 5 : 0;
            Case c;
            c.B = 1, c.H = H, c.Tq = len, c.Tk = start + len + extra, c.Dk = Dk, c.Dv = Dv;
            c.q_offset = start, c.causal = true, c.scale = full.scale;
            for (int h = 0; h < H; ++h) {
                auto qs = full.q.begin() + std::ptrdiff_t((std::size_t(h) * T + start) * Dk);
                c.q.insert(c.q.end(), qs, qs + std::ptrdiff_t(std::size_t(len) * Dk));
                auto ks = full.k.begin() + std::ptrdiff_t(std::size_t(h) * T * Dk);
                c.k.insert(c.k.end(), ks, ks + std::ptrdiff_t(std::size_t(c.Tk) * Dk));
                auto vs = full.v.begin() + std::ptrdiff_t(std::size_t(h) * T * Dv);
                c.v.insert(c.v.end(), vs, vs + std::ptrdiff_t(std::size_t(c.Tk) * Dv));
            }
            const std::vector<float> out = run_optimized(c);
            for (int h = 0; h < H; ++h) {
                const float* got = out.data() + std::size_t(h) * len * Dv;
                const float* want = ref.data() + (std::size_t(h) * T + start) * Dv;
                const long d = first_difference(got, want, std::size_t(len) * Dv);
                INFO("step " << step << ", rows " << start << ".." << start + len - 1 << ", head "
                             << h << ", first differing element " << d);
                REQUIRE(d == -1);
            }
        }
    }
}

TEST_CASE("optimized kernel writes only out and never changes its inputs", "[kernel][memory]") {
    // out sits between two guard regions of a sentinel; q, k, v are compared with copies.
    const float sentinel = -12345.678f;
    const std::size_t guard = 64;
    const Case cases[] = {make_case(2, 2, 37, 37, 80, 17, 0, true, 51),
                          make_case(1, 3, 1, 1300, 3, 5, 1299, true, 52),
                          make_case(1, 1, 9, 100, 1, 1, 0, false, 53)};
    for (const Case& c : cases) {
        INFO(c.describe());
        const Case copy = c;
        std::vector<float> buf(c.out_size() + 2 * guard, sentinel);
        const attncheck_problem p = c.problem();
        REQUIRE(attncheck_optimized_kernel(&p, c.q.data(), c.k.data(), c.v.data(), buf.data() + guard) ==
                ATTNCHECK_OK);
        for (std::size_t i = 0; i < guard; ++i) {
            REQUIRE(buf[i] == sentinel);
            REQUIRE(buf[guard + c.out_size() + i] == sentinel);
        }
        for (std::size_t i = guard; i < guard + c.out_size(); ++i) REQUIRE(std::isfinite(buf[i]));
        CHECK(bitwise_equal(c.q, copy.q));
        CHECK(bitwise_equal(c.k, copy.k));
        CHECK(bitwise_equal(c.v, copy.v));
    }
}

TEST_CASE("optimized kernel refuses malformed problems", "[kernel][errors]") {
    Case c = make_case(2, 1, 4, 4, 8, 8, 0, true, 61);
    std::vector<float> out(c.out_size() + 1, 0.0f);
    auto refuses = [&](const attncheck_problem& p, const char* why) {
        INFO(why << ": " << attncheck::problem_error(p));
        CHECK(attncheck_optimized_kernel(&p, c.q.data(), c.k.data(), c.v.data(), out.data()) != ATTNCHECK_OK);
    };
    attncheck_problem p = c.problem();
    p.abi_version = 2, refuses(p, "unknown abi_version");
    p = c.problem(), p.batch = 0, refuses(p, "batch 0");
    p = c.problem(), p.heads = -1, refuses(p, "negative heads");
    p = c.problem(), p.q_len = 0, refuses(p, "q_len 0");
    p = c.problem(), p.kv_len = 0, refuses(p, "kv_len 0");
    p = c.problem(), p.head_dim = 0, refuses(p, "head_dim 0");
    p = c.problem(), p.value_dim = 0, refuses(p, "value_dim 0");
    p = c.problem(), p.q_offset = -1, refuses(p, "negative q_offset");
    const int32_t too_long[2] = {4, 5}, negative[2] = {-1, 4};
    p = c.problem(), p.kv_valid_len = too_long, refuses(p, "kv_valid_len > kv_len");
    p = c.problem(), p.kv_valid_len = negative, refuses(p, "negative kv_valid_len");
    p = c.problem();
    CHECK(attncheck_optimized_kernel(nullptr, c.q.data(), c.k.data(), c.v.data(), out.data()) != ATTNCHECK_OK);
    CHECK(attncheck_optimized_kernel(&p, nullptr, c.k.data(), c.v.data(), out.data()) != ATTNCHECK_OK);
    CHECK(attncheck_optimized_kernel(&p, c.q.data(), c.k.data(), c.v.data(), nullptr) != ATTNCHECK_OK);
    // The well-formed problem is accepted (so the refusals above are about the field changed).
    CHECK(attncheck_optimized_kernel(&p, c.q.data(), c.k.data(), c.v.data(), out.data()) == ATTNCHECK_OK);
}
