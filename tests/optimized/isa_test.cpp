// Tests of the instruction-set report (attncheck/isa.hpp) and of the run-time choice of the code
// path (optimized/simd_targets.hpp): the build's -march is one this CPU can run, the kernels run
// the path ATTNCHECK_ISA asks for (or the best one), and that path is one this CPU has.
#include "attncheck/isa.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernels.hpp"

#include "optimized/attention_kernel.hpp"
#include "optimized/simd_targets.hpp"

using attncheck::isa_info;

namespace {
bool has(const std::string& features, const std::string& f) {
    return ("+" + features + "+").find("+" + f + "+") != std::string::npos;
}
}  // namespace

TEST_CASE("isa_info names the compiled target and the dispatched path, and this CPU can run both",
          "[optimized][isa]") {
    const attncheck::IsaInfo i = isa_info();
    INFO(attncheck::isa_line());
#if defined(__AVX512F__)
    CHECK(i.compiled == "avx512f+avx2+fma");
#elif defined(__AVX2__) && defined(__FMA__)
    CHECK(i.compiled == "avx2+fma");
#endif
    const attncheck::optimized::IsaChoice& c = attncheck::optimized::isa_choice();
    INFO("available: " << c.available);
    REQUIRE(c.error.empty());  // a run with an impossible ATTNCHECK_ISA must not pass silently
    CHECK(i.kernels == c.path);
    if (const char* forced = std::getenv("ATTNCHECK_ISA")) CHECK(c.path == forced);
    else CHECK(c.path == c.available.substr(0, c.available.find(',')));  // the best one
    if (c.path == "avx512") CHECK(has(i.cpu_features, "avx512f"));
    if (c.path == "avx2") CHECK((has(i.cpu_features, "avx2") && has(i.cpu_features, "fma")));
    // Every feature the build uses is one the CPU reports (else this test would not be running).
    for (const char* f : {"avx512f", "avx2", "fma"})
        if (has(i.compiled, f)) CHECK(has(i.cpu_features, f));
    CHECK_FALSE(i.cpu_model.empty());
    CHECK(i.cpu_count >= 1);
    const std::string line = attncheck::isa_line();
    CHECK(line.rfind("isa " + i.compiled + " (kernels: " + i.kernels, 0) == 0);
    CHECK(line.find(i.cpu_model) != std::string::npos);
}

namespace {

using attncheck::optimized::isa_choice;
using attncheck::optimized::use_isa_path_for_test;

// Runs f() on `path`, then switches back to the process's own path.
template <class F>
auto on_path(const std::string& path, F&& f) {
    REQUIRE(use_isa_path_for_test(path));
    auto result = f();
    REQUIRE(use_isa_path_for_test(isa_choice().path));
    return result;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    return x;
}

// One kernel call on a random problem of this shape (seeded: the same inputs on every path).
std::vector<float> kernel_output(int B, int H, int Tq, int Tk, int D, int q_offset, bool padded,
                                 unsigned seed) {
    std::mt19937 rng(seed);
    attncheck_problem p{};
    p.abi_version = ATTNCHECK_ABI_VERSION;
    p.batch = B, p.heads = H, p.q_len = Tq, p.kv_len = Tk, p.head_dim = D, p.value_dim = D;
    p.q_offset = q_offset, p.causal = 1, p.scale = 1.0f / std::sqrt(float(D));
    std::vector<std::int32_t> valid(std::size_t(B), Tk);
    if (padded)
        for (int b = 0; b < B; ++b) valid[std::size_t(b)] = std::max(1, Tk - 7 * b - 3);
    p.kv_valid_len = padded ? valid.data() : nullptr;
    const std::size_t bh = std::size_t(B) * std::size_t(H);
    // Scores of a few units: the softmax is neither uniform nor one-hot.
    const auto q = random_floats(bh * std::size_t(Tq * D), rng, 2.0f);
    const auto k = random_floats(bh * std::size_t(Tk * D), rng, 1.0f);
    const auto v = random_floats(bh * std::size_t(Tk * D), rng, 1.0f);
    std::vector<float> out(bh * std::size_t(Tq * D), -1.0f);
    REQUIRE(attncheck_optimized_kernel(&p, q.data(), k.data(), v.data(), out.data()) == ATTNCHECK_OK);
    return out;
}

struct Shape {
    int B, H, Tq, Tk, D, q_offset;
    bool padded;
};
// Prefill (several query blocks: prepacked tiles), decode steps (split chunks), a chunk, odd
// head sizes (masked loads and stores), lengths next to the tile (64) and chunk (512) sizes.
const Shape kShapes[] = {{1, 2, 130, 130, 64, 0, false}, {2, 3, 1, 600, 40, 599, true},
                         {1, 8, 1, 1025, 64, 1024, false}, {1, 2, 64, 577, 17, 513, false},
                         {3, 1, 5, 69, 100, 64, true},     {1, 1, 200, 200, 3, 0, false}};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the avx2 and avx512 paths of the attention kernel give the same bits", "[optimized][isa]") {
    if (!use_isa_path_for_test("avx512") || !use_isa_path_for_test("avx2")) {
        REQUIRE(use_isa_path_for_test(isa_choice().path));
        SUCCEED("this CPU lacks one of the two paths: " << isa_choice().available);
        return;
    }
    unsigned seed = 11;
    for (const Shape& s : kShapes) {
        INFO("B=" << s.B << " H=" << s.H << " Tq=" << s.Tq << " Tk=" << s.Tk << " D=" << s.D
                  << " q_offset=" << s.q_offset << " padded=" << s.padded);
        auto run = [&] { return kernel_output(s.B, s.H, s.Tq, s.Tk, s.D, s.q_offset, s.padded, seed); };
        CHECK(bitwise_equal(on_path("avx512", run), on_path("avx2", run)));
        ++seed;
    }
}

TEST_CASE("the avx2 and avx512 paths of the exp give the same bits, and flush below 2^-126 to +0", "[optimized][isa][exp]") {
    if (!use_isa_path_for_test("avx512") || !use_isa_path_for_test("avx2")) {
        REQUIRE(use_isa_path_for_test(isa_choice().path));
        SUCCEED("this CPU lacks one of the two paths: " << isa_choice().available);
        return;
    }
    // Every 1/4096 over [-112, 0]: normal results, the boundary of the flush to +0 (results
    // below 2^-126), the flushed lanes; then -inf, the extremes, both sides of the threshold and NaN.
    std::vector<float> x;
    for (int i = 0; i <= 112 * 4096; ++i) x.push_back(-float(i) / 4096.0f);
    for (const float e : {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::max(),
                          attncheck::optimized::attention_detail::kExpFlushBelow,
                          std::nextafter(attncheck::optimized::attention_detail::kExpFlushBelow, -200.0f),
                          -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN()})
        x.push_back(e);
    auto run = [&] {
        std::vector<float> y(x.size());
        attncheck::optimized::attention_detail::exp_nonpositive(x.data(), y.data(), x.size());
        return y;
    };
    const auto a = on_path("avx512", run), b = on_path("avx2", run);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    CHECK(differ == 0);
    for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i] < attncheck::optimized::attention_detail::kExpFlushBelow) {
            INFO("x = " << x[i]);
            REQUIRE(a[i] == 0.0f);
            REQUIRE_FALSE(std::signbit(a[i]));
        }
    CHECK(std::isnan(a.back()));
}

TEST_CASE("the scalar path of the attention kernel agrees with the vector paths", "[optimized][isa]") {
    const std::string vector_path = isa_choice().available.substr(0, isa_choice().available.find(','));
    if (vector_path == "scalar") {
        SUCCEED("this CPU has no vector path");
        return;
    }
    unsigned seed = 31;
    for (const Shape& s : kShapes) {
        INFO("B=" << s.B << " H=" << s.H << " Tq=" << s.Tq << " Tk=" << s.Tk << " D=" << s.D);
        auto run = [&] { return kernel_output(s.B, s.H, s.Tq, s.Tk, s.D, s.q_offset, s.padded, seed); };
        const auto a = on_path(vector_path, run), b = on_path("scalar", run);
        REQUIRE(a.size() == b.size());
        // Only the exp differs (std::exp against the kernel's polynomial, each within 1 ulp of
        // exp): outputs are convex combinations of values of about unit size, so a few float32
        // ulps of the largest value bound the difference.
        float worst = 0;
        for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
        CHECK(worst < 1e-5f);
        CHECK_FALSE(bitwise_equal(a, b));  // the two paths really ran different code
        ++seed;
    }
}
