// tests/reference/attention_v2_test.cpp — the float64 oracle of kernel ABI version 2
// (reference/attention_v2.hpp), its bound, the reference kernel behind the v2 C ABI, and the
// pieces of attncheck/problem_v2.hpp they stand on (f16/bf16 conversion, problem_v2_error).
//
// Hand examples compute their expected values in the test from closed forms of small integers;
// the bound is checked against correct float32 evaluations in six orders
// (f32_evaluations.hpp) and against planted bugs.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
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

#include "attncheck/problem_v2.hpp"
#include "f32_evaluations.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"
#include "v2_case.hpp"

namespace {

using namespace attncheck;
using attncheck::reference::attention_v2_oracle;
using attncheck::reference::OracleV2;
using attncheck::reference::OracleV2Options;
using test::Layout;
using test::Spec;
using test::V2Case;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
// The ratio reported where the bound is 0 and the candidate differs, or the candidate is NaN.
constexpr double kInfRatio = std::numeric_limits<double>::infinity();

// ---- f16 / bf16 conversions ------------------------------------------------------------------

float from_half_bits(std::uint16_t h) {
    _Float16 x;
    std::memcpy(&x, &h, sizeof x);
    return float(x);
}
std::uint16_t half_bits(float f) {
    const _Float16 x = static_cast<_Float16>(f);
    std::uint16_t h;
    std::memcpy(&h, &x, sizeof h);
    return h;
}
bool f16_is_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// x rounded to nearest even with `bits` significant bits and minimum normal exponent `emin`,
// computed in double by scaling to an integer (independent of the bit tricks under test).
double round_to_format(double x, int bits, int emin) {
    if (x == 0 || !std::isfinite(x)) return x;
    const int e = std::max(std::ilogb(x), emin);
    const double q = std::ldexp(x, bits - 1 - e);
    return std::ldexp(std::nearbyint(q), e - (bits - 1));
}

// Significant bits and minimum normal exponent of a dtype.
struct Format {
    int bits, emin;
};
Format format_of(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? Format{11, -14} : dtype == ATTNCHECK_DTYPE_BF16 ? Format{8, -126} : Format{24, -126};
}

TEST_CASE("f16: every bit pattern converts to float and back (NaN stays NaN)", "[reference][v2][dtype]") {
    int nans = 0;
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_float(std::uint16_t(h));
        const std::uint16_t back = float_to_f16(f);
        INFO("pattern 0x" << std::hex << h);
        if (f16_is_nan(std::uint16_t(h))) {
            ++nans;
            REQUIRE(std::isnan(f));
            REQUIRE(f16_is_nan(back));
        } else {
            REQUIRE(back == h);
            REQUIRE(float_to_bits(f) == float_to_bits(from_half_bits(std::uint16_t(h))));
        }
    }
    REQUIRE(nans == 2 * 1023);
}

TEST_CASE("float_to_f16 equals the _Float16 cast, halfway cases, subnormals and overflow included",
          "[reference][v2][dtype]") {
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f,
                             std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1.ffcp-15f, 1e-30f,
                             std::numeric_limits<float>::denorm_min()};
    // Every finite f16 value plus and minus half its spacing (halfway cases, both tie
    // directions), and a quarter spacing (not halfway).
    for (std::uint32_t h = 0; h < 0x7c00u; ++h) {
        const double x = f16_to_float(std::uint16_t(h));
        const double spacing = h < 0x400u ? 0x1p-24 : std::ldexp(1.0, std::ilogb(x) - 10);
        for (const double d : {0.5, -0.5, 0.25, -0.25, 0.75})
            for (const double sign : {1.0, -1.0}) xs.push_back(float(sign * (x + d * spacing)));
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (int t = 0; t < 200000; ++t) xs.push_back(bits_to_float(bits(rng)));
    for (const float x : xs) {
        if (std::isnan(x)) {
            REQUIRE(f16_is_nan(float_to_f16(x)));
            continue;
        }
        INFO("x = " << x << " bits 0x" << std::hex << float_to_bits(x));
        REQUIRE(float_to_f16(x) == half_bits(x));
        // And the independent rounding in double (11 bits, emin -14), overflow to infinity.
        const double expect = round_to_format(double(x), 11, -14);
        const float got = f16_to_float(float_to_f16(x));
        if (std::abs(expect) >= 65520.0) REQUIRE(std::isinf(got));
        else REQUIRE(double(got) == expect);
    }
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN", "[reference][v2][dtype]") {
    // Hand cases: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties to even: 1);
    // 1 + 3 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6); just above halfway rounds up.
    CHECK(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
    CHECK(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    CHECK(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
    CHECK(bf16_to_float(float_to_bf16(-1.0f - 0x1p-8f)) == -1.0f);
    CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
    CHECK(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
    // A NaN whose payload sits only in the low 16 bits must not become infinity.
    CHECK(std::isnan(bf16_to_float(float_to_bf16(bits_to_float(0x7f800001u)))));
    std::mt19937 rng(11);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (int t = 0; t < 300000; ++t) {
        const float x = bits_to_float(bits(rng));
        const float got = bf16_to_float(float_to_bf16(x));
        if (std::isnan(x)) {
            REQUIRE(std::isnan(got));
            continue;
        }
        INFO("x = " << x << " bits 0x" << std::hex << float_to_bits(x));
        const double expect = round_to_format(double(x), 8, -126);
        if (std::abs(expect) > double(std::numeric_limits<float>::max())) REQUIRE(std::isinf(got));
        else REQUIRE(double(got) == expect);
    }
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_float(std::uint16_t(h));
        if (!std::isnan(f)) REQUIRE(float_to_bf16(f) == h);
    }
}

// ---- problem_v2_error ------------------------------------------------------------------------

Spec small_spec() {
    Spec s;
    s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.head_dim = 3, s.value_dim = 2;
    s.tq = {2, 2}, s.tk = {3, 5}, s.q_pos = {1, 3};
    s.kv_lens = true;
    return s;
}

TEST_CASE("problem_v2_error names each malformed field", "[reference][v2][errors]") {
    const auto error_after = [](Spec s, auto&& change) {
        V2Case c(s);
        REQUIRE(problem_v2_error(c.p).empty());
        change(c);
        return problem_v2_error(c.p);
    };
    const Spec s = small_spec();
    Spec paged = s;
    paged.block_size = 2;
    Spec varlen = s;
    varlen.varlen = true, varlen.kv_lens = false;

    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.kv_heads = 3; }),
               Catch::Contains("kv_heads 3 does not divide q_heads 4"));
    CHECK_THAT(error_after(paged, [](V2Case& c) { c.block_table[1] = c.p.num_blocks; }),
               Catch::Contains("block_table[0][1]"));
    CHECK_THAT(error_after(paged, [](V2Case& c) { c.block_table[std::size_t(c.p.block_table_stride)] = -1; }),
               Catch::Contains("block_table[1][0] = -1"));
    CHECK_THAT(error_after(paged, [](V2Case& c) { c.p.block_table_stride = 1; }),
               Catch::Contains("block_table_stride"));
    CHECK_THAT(error_after(varlen, [](V2Case& c) { c.cu_q[2] = 0; }),
               Catch::Contains("cu_seqlens_q decreases"));
    CHECK_THAT(error_after(varlen, [](V2Case& c) { c.cu_k[0] = 1; }), Catch::Contains("cu_seqlens_k[0]"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.q_pos = nullptr; }), Catch::Contains("q_pos is null"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.q_pos[1] = -1; }), Catch::Contains("q_pos[1]"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.kv_lens[0] = 6; }), Catch::Contains("kv_lens[0]"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.dtype = 7; }), Catch::Contains("dtype 7"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.abi_version = 1; }), Catch::Contains("abi_version"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.struct_size = 8; }), Catch::Contains("struct_size"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.head_dim = 0; }), Catch::Contains("head_dim"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.window_left = -2; }), Catch::Contains("window_left"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.window_right = 3; }), Catch::Contains("window_right"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.softcap = -1; }), Catch::Contains("softcap"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.scale = kNaN; }), Catch::Contains("scale"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.k.stride[2] = -1; }), Catch::Contains("k.stride[2]"));
    CHECK_THAT(error_after(s, [](V2Case& c) { c.p.v.data = nullptr; }), Catch::Contains("v.data is null"));
    CHECK_THAT(error_after(varlen, [](V2Case& c) { c.p.kv_lens = c.q_pos.data(); }),
               Catch::Contains("both cu_seqlens_k and kv_lens"));
    // The oracle and the C entry refuse what the check names.
    V2Case bad(s);
    bad.p.kv_heads = 3;
    CHECK_THROWS_WITH(attention_v2_oracle(bad.p), Catch::Contains("kv_heads 3 does not divide q_heads 4"));
}

// ---- hand examples ---------------------------------------------------------------------------

// One head, Dk = Dv = 1 unless changed; q, k, v set by hand below.
Spec hand_spec(int tq, int tk, int q_pos) {
    Spec s;
    s.head_dim = 1, s.value_dim = 1;
    s.tq = {tq}, s.tk = {tk}, s.q_pos = {q_pos};
    return s;
}
void set_all_q(V2Case& c, float x) {
    for (int b = 0; b < c.p.batch; ++b)
        for (int h = 0; h < c.p.q_heads; ++h)
            for (int i = 0; i < c.tq(b); ++i)
                for (int d = 0; d < c.p.head_dim; ++d) c.q.set(c.q_at(b, h, i, d), x);
}
// k_j = kx(j), v_j = vx(j) (all columns, every kv head).
template <class K, class V> void set_keys(V2Case& c, int b, K&& kx, V&& vx) {
    for (int hk = 0; hk < c.p.kv_heads; ++hk)
        for (int j = 0; j < c.tk(b); ++j) {
            for (int d = 0; d < c.p.head_dim; ++d) c.k.set(c.k_at(b, hk, j, d), kx(j));
            for (int d = 0; d < c.p.value_dim; ++d) c.v.set(c.v_at(b, hk, j, d), vx(j));
        }
}
double out_of(const OracleV2& o, int b, int h, int i, int c = 0) {
    return o.out[o.row(b, h, i) * std::size_t(o.value_dim) + std::size_t(c)];
}

TEST_CASE("hand: GQA maps query head h to kv head h / (Hq / Hk)", "[reference][v2][hand]") {
    // Hq = 6, Hk = 2: heads 0-2 read kv head 0, heads 3-5 kv head 1. One key, so out = v exactly.
    // (The group size used as a modulus would give 0,1,0,1,0,1.)
    Spec s = hand_spec(1, 1, 0);
    s.q_heads = 6, s.kv_heads = 2;
    V2Case c(s);
    set_all_q(c, 1);
    for (int hk = 0; hk < 2; ++hk) {
        c.k.set(c.k_at(0, hk, 0, 0), 1);
        c.v.set(c.v_at(0, hk, 0, 0), float(10 * (hk + 1)));
    }
    const OracleV2 o = attention_v2_oracle(c.p);
    const double expect[6] = {10, 10, 10, 20, 20, 20};
    for (int h = 0; h < 6; ++h) CHECK(out_of(o, 0, h, 0) == expect[h]);
}

TEST_CASE("hand: a window of w keys is exactly w + 1 keys with the diagonal", "[reference][v2][hand]") {
    // Row at a = q_pos = 5 of 8 keys, causal, window_left 2: keys 3, 4, 5 (3 keys; 2w+1 = 5 would
    // also take 6, 7 or 1, 2). q = 0: equal weights, v_j = j: out = (3 + 4 + 5) / 3 = 4.
    Spec s = hand_spec(1, 8, 5);
    s.window_left = 2;
    V2Case c(s);
    set_all_q(c, 0);
    set_keys(c, 0, [](int) { return 1.0f; }, [](int j) { return float(j); });
    const OracleV2 o = attention_v2_oracle(c.p);
    CHECK(o.visible[0] == 3);
    CHECK(out_of(o, 0, 0, 0) == Approx(4.0).epsilon(1e-15));
    CHECK(o.lse[0] == Approx(std::log(3.0)).epsilon(1e-15));  // three scores of 0
    // Non-causal with window_right 1: keys 3..6, out = (3 + 4 + 5 + 6) / 4 = 4.5.
    c.p.causal = 0, c.p.window_right = 1;
    const OracleV2 o2 = attention_v2_oracle(c.p);
    CHECK(o2.visible[0] == 4);
    CHECK(out_of(o2, 0, 0, 0) == Approx(4.5).epsilon(1e-15));
}

TEST_CASE("hand: q_pos places the rows bottom-right among the keys", "[reference][v2][hand]") {
    // Tq = 2, Tk = 4, q_pos = 2: row 0 at a = 2 sees keys 0..2, row 1 at a = 3 sees 0..3.
    // q = 0 and v_j = j: out = 1 and 1.5. (Top-left placement would give 0 and 0.5.)
    V2Case c(hand_spec(2, 4, 2));
    set_all_q(c, 0);
    set_keys(c, 0, [](int) { return 1.0f; }, [](int j) { return float(j); });
    const OracleV2 o = attention_v2_oracle(c.p);
    CHECK(o.visible[0] == 3);
    CHECK(o.visible[1] == 4);
    CHECK(out_of(o, 0, 0, 0) == Approx(1.0).epsilon(1e-15));
    CHECK(out_of(o, 0, 0, 1) == Approx(1.5).epsilon(1e-15));
}

TEST_CASE("hand: softcap comes after the scale and before the mask and the bias", "[reference][v2][hand]") {
    // a = 1, keys 0, 1 visible, key 2 in the future. q = 2, k = [2, 0, 9], scale 0.5, cap 1:
    //   s0 = 0.5 * [4, 0] = [2, 0];  capped: [tanh 2, 0]  (cap before scale: [0.5 tanh 4, 0]).
    // Key 2 (v = 100) is masked: a kernel that capped -inf to -cap would give it weight e^-1.
    // ALiBi slope 1: bias -(a - j) = [-1, 0]: s = [tanh 2 - 1, 0].
    // v = [1, 0]: out = e^{s_0} / (e^{s_0} + 1).
    Spec s = hand_spec(1, 3, 1);
    s.scale = 0.5f, s.softcap = 1.0f, s.alibi = {1.0f};
    V2Case c(s);
    set_all_q(c, 2);
    const float ks[3] = {2, 0, 9}, vs[3] = {1, 0, 100};
    set_keys(c, 0, [&](int j) { return ks[j]; }, [&](int j) { return vs[j]; });
    const OracleV2 o = attention_v2_oracle(c.p);
    const double s0 = std::tanh(2.0) - 1.0;
    CHECK(o.visible[0] == 2);
    CHECK(out_of(o, 0, 0, 0) == Approx(std::exp(s0) / (std::exp(s0) + 1.0)).epsilon(1e-14));
    CHECK(o.lse[0] == Approx(std::log(std::exp(s0) + 1.0)).epsilon(1e-14));
    CHECK(o.max_score[0] == 0.0);
}

TEST_CASE("hand: ALiBi subtracts slope * (a - j)", "[reference][v2][hand]") {
    // a = 2, q = 0, slopes 1 and 0.5 (two heads): s_j = -m (2 - j) = -m [2, 1, 0].
    // v_j = j: out = (e^{-m} + 2) / (e^{-2m} + e^{-m} + 1), lse = log(e^{-2m} + e^{-m} + 1).
    Spec s = hand_spec(1, 3, 2);
    s.q_heads = 2, s.alibi = {1.0f, 0.5f};
    V2Case c(s);
    set_all_q(c, 0);
    set_keys(c, 0, [](int) { return 1.0f; }, [](int j) { return float(j); });
    const OracleV2 o = attention_v2_oracle(c.p);
    for (int h = 0; h < 2; ++h) {
        const double m = h == 0 ? 1.0 : 0.5;
        const double z = std::exp(-2 * m) + std::exp(-m) + 1;
        CHECK(out_of(o, 0, h, 0) == Approx((std::exp(-m) + 2) / z).epsilon(1e-14));
        CHECK(o.lse[o.row(0, h, 0)] == Approx(std::log(z)).epsilon(1e-14));
    }
}

TEST_CASE("hand: lse is the natural log, -inf (out 0) on an empty row", "[reference][v2][hand]") {
    // Two sequences: b = 0 has keys 0, 1 with scores 0, 0: lse = ln 2 (log2 would give 1);
    // b = 1 has no key (kv_lens 0): lse -inf, out 0, bound 0.
    Spec s = hand_spec(1, 2, 1);
    s.batch = 2, s.tq = {1, 1}, s.tk = {2, 0}, s.q_pos = {1, 0}, s.kv_lens = true;
    V2Case c(s);
    set_all_q(c, 0);
    set_keys(c, 0, [](int) { return 1.0f; }, [](int j) { return float(j + 1); });
    const OracleV2 o = attention_v2_oracle(c.p);
    CHECK(o.lse[0] == Approx(std::log(2.0)).epsilon(1e-15));
    CHECK(out_of(o, 0, 0, 0) == Approx(1.5).epsilon(1e-15));
    CHECK(o.visible[1] == 0);
    CHECK(o.lse[1] == -std::numeric_limits<double>::infinity());
    CHECK(o.out[1] == 0.0);
    CHECK(o.out_bound[1] == 0.0);
    CHECK(o.lse_bound[1] == 0.0);
    // A window that leaves a row no key: a = 10, Tk = 3, window_left 2 wants keys >= 8.
    V2Case w(hand_spec(1, 3, 10));
    w.p.window_left = 2;
    set_all_q(w, 0);
    set_keys(w, 0, [](int) { return 1.0f; }, [](int j) { return float(j + 1); });
    const OracleV2 ow = attention_v2_oracle(w.p);
    CHECK(ow.visible[0] == 0);
    CHECK(ow.out[0] == 0.0);
    CHECK(std::isinf(ow.lse[0]));
}

// Weights e^j over keys 0..n-1 with v_j = j: out = sum_j j e^j / sum_j e^j.
double exp_weighted_mean(int n) {
    double num = 0, den = 0;
    for (int j = 0; j < n; ++j) num += j * std::exp(double(j)), den += std::exp(double(j));
    return num / den;
}

TEST_CASE("hand: paged keys through a permuted block table", "[reference][v2][hand]") {
    // Tk = 7 in blocks of 2 (4 blocks, 3 spare), shuffled; q = 1, k_j = j: scores j, v_j = j.
    // Every key has a different weight, so reading a wrong block changes the result, and
    // reading an unused block (NaN) poisons it.
    Spec s = hand_spec(1, 7, 6);
    s.block_size = 2, s.spare_blocks = 3;
    V2Case c(s);
    set_all_q(c, 1);
    set_keys(c, 0, [](int j) { return float(j); }, [](int j) { return float(j); });
    // The table really is a permutation: key j lives in block table[j / 2] at row j % 2.
    bool identity = true;
    for (int e = 0; e < 4; ++e) identity = identity && c.block_table[std::size_t(e)] == e;
    REQUIRE_FALSE(identity);
    for (int j = 0; j < 7; ++j)
        REQUIRE(c.k_at(0, 0, j, 0) == std::int64_t(c.block_table[std::size_t(j / 2)]) * c.p.k.stride[0] +
                                          (j % 2) * c.p.k.stride[2]);
    const OracleV2 o = attention_v2_oracle(c.p);
    CHECK(out_of(o, 0, 0, 0) == Approx(exp_weighted_mean(7)).epsilon(1e-14));
}

TEST_CASE("hand: varlen packs sequences of different lengths", "[reference][v2][hand]") {
    // b = 0: Tq 1, Tk 2, q_pos 1; b = 1: Tq 2, Tk 3, q_pos 1. q = 1, k_j = j, v_j = j:
    // b0 row 0 sees 0..1, b1 row 0 sees 0..1, b1 row 1 sees 0..2.
    Spec s = hand_spec(1, 2, 1);
    s.batch = 2, s.tq = {1, 2}, s.tk = {2, 3}, s.q_pos = {1, 1}, s.varlen = true;
    V2Case c(s);
    set_all_q(c, 1);
    for (int b = 0; b < 2; ++b) set_keys(c, b, [](int j) { return float(j); }, [](int j) { return float(j); });
    REQUIRE(c.cu_q == std::vector<std::int32_t>{0, 1, 3});
    REQUIRE(c.cu_k == std::vector<std::int32_t>{0, 2, 5});
    const OracleV2 o = attention_v2_oracle(c.p);
    REQUIRE(o.rows() == 3);
    CHECK(out_of(o, 0, 0, 0) == Approx(exp_weighted_mean(2)).epsilon(1e-14));
    CHECK(out_of(o, 1, 0, 0) == Approx(exp_weighted_mean(2)).epsilon(1e-14));
    CHECK(out_of(o, 1, 0, 1) == Approx(exp_weighted_mean(3)).epsilon(1e-14));
}

TEST_CASE("hand: [B,T,H,D] strides with gaps", "[reference][v2][hand]") {
    // B = 2, Hq = Hk = 2, T = 2, Dk = Dv = 1, rows with one gap element: element (b, h, t, c) of
    // q is at ((b T + t) H + h) 2 + c. q = 1, k_j = j, v = 10 b + 100 h + j: each (b, h) reads its
    // own values, so out(b, h, i) = 10 b + 100 h + (weighted mean of j over keys 0..i).
    Spec s = hand_spec(2, 2, 0);
    s.batch = 2, s.q_heads = 2, s.kv_heads = 2, s.tq = {2, 2}, s.tk = {2, 2}, s.q_pos = {0, 0};
    s.layout = Layout::bthd, s.row_gap = 1;
    V2Case c(s);
    for (int b = 0; b < 2; ++b)
        for (int h = 0; h < 2; ++h)
            for (int t = 0; t < 2; ++t) {
                REQUIRE(c.q_at(b, h, t, 0) == ((b * 2 + t) * 2 + h) * 2);
                c.q.set(c.q_at(b, h, t, 0), 1);
                c.k.set(c.k_at(b, h, t, 0), float(t));
                c.v.set(c.v_at(b, h, t, 0), float(10 * b + 100 * h + t));
            }
    const OracleV2 o = attention_v2_oracle(c.p);
    for (int b = 0; b < 2; ++b)
        for (int h = 0; h < 2; ++h) {
            CHECK(out_of(o, b, h, 0) == Approx(10 * b + 100 * h).margin(1e-12));
            CHECK(out_of(o, b, h, 1) == Approx(10 * b + 100 * h + exp_weighted_mean(2)).epsilon(1e-14));
        }
}

// ---- random problems -------------------------------------------------------------------------

enum class Style { normal, large, integer };
const char* style_name(Style s) { return s == Style::normal ? "normal" : s == Style::large ? "large" : "integer"; }

struct Random {
    std::mt19937 rng;
    explicit Random(std::uint32_t seed) : rng(seed) {}
    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
    bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng); }
    double normal() { return std::normal_distribution<double>(0, 1)(rng); }
};

// A random well-formed problem exercising the features; `long_rows` makes Tk up to ~600.
Spec random_spec(Random& r, std::int32_t dtype, Style style, bool long_rows) {
    Spec s;
    s.dtype = dtype;
    s.batch = long_rows ? 1 : r.uniform(1, 3);
    const int groups[] = {1, 2, 4};
    s.kv_heads = r.uniform(1, 2);
    s.q_heads = s.kv_heads * groups[r.uniform(0, 2)];
    const int dims[] = {1, 3, 8, 16, 32, 64};
    s.head_dim = dims[r.uniform(0, 5)];
    s.value_dim = r.coin(0.7) ? s.head_dim : dims[r.uniform(0, 5)];
    s.layout = r.coin() ? Layout::bhtd : Layout::bthd;
    s.row_gap = r.coin(0.3) ? r.uniform(1, 3) : 0;
    s.varlen = r.coin(0.3);
    s.block_size = !s.varlen && r.coin(0.3) ? r.uniform(1, 16) : 0;
    s.spare_blocks = s.block_size ? r.uniform(0, 3) : 0;
    s.kv_lens = !s.varlen && !s.block_size && r.coin(0.4);
    const int tk_max = long_rows ? r.uniform(300, 600) : r.uniform(1, 40);
    const int tq_dense = r.coin(0.3) ? 1 : r.uniform(1, long_rows ? 24 : 12);
    s.tq.clear(), s.tk.clear(), s.q_pos.clear();
    for (int b = 0; b < s.batch; ++b) {
        const int tk = (s.varlen || s.kv_lens || s.block_size) ? r.uniform(0, tk_max) : tk_max;
        const int tq = s.varlen ? r.uniform(1, 12) : tq_dense;
        s.tk.push_back(tk);
        s.tq.push_back(tq);
        // Bottom-right (prefill chunk or decode step) mostly; sometimes anywhere.
        s.q_pos.push_back(r.coin(0.8) ? std::max(0, tk - tq) : r.uniform(0, tk + 3));
    }
    s.kv_capacity = s.kv_lens ? tk_max + r.uniform(0, 5) : 0;
    s.causal = r.coin(0.8);
    if (r.coin(0.4)) s.window_left = r.uniform(0, long_rows ? 200 : 10);
    if (!s.causal && r.coin(0.5)) s.window_right = r.uniform(0, 10);
    if (r.coin(0.35)) s.softcap = style == Style::large ? float(r.uniform(5, 50)) : float(r.uniform(1, 30));
    if (r.coin(0.35)) {
        for (int h = 0; h < s.q_heads; ++h) s.alibi.push_back(std::exp2(-8.0f * float(h + 1) / float(s.q_heads)));
    }
    switch (style) {
    case Style::normal: s.scale = 1.0f / std::sqrt(float(s.head_dim)); break;
    case Style::large: s.scale = float(200.0 / std::sqrt(double(s.head_dim))); break;  // |s| ~ 1e3
    case Style::integer: s.scale = r.coin() ? 0.5f : 0.25f; break;
    }
    return s;
}

void fill_random(V2Case& c, Random& r, Style style) {
    c.fill([&] {
        switch (style) {
        case Style::integer: return float(r.uniform(-4, 4));
        case Style::large: return float(2.3 * r.normal());
        default: return float(r.normal());
        }
    });
}

// Largest |candidate - oracle| / bound over the outputs and over the lse, with where it was.
// For f16/bf16, `accumulation` is the ratio of the float32 result before its rounding to the
// dtype against the bound without the output-rounding term (bound = b + ud (|o| + b) + tiny, so
// b = (bound - ud |o| - tiny) / (1 + ud)): how tight the bound is where the dtype's own
// rounding does not dominate it (where b is not lost in cancellation).
struct Ratios {
    double out = 0, lse = 0, accumulation = 0;
    std::string where;
};
double tiny_rounding(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? 0x1p-25 : dtype == ATTNCHECK_DTYPE_BF16 ? 0x1p-126 : 0.0;
}
Ratios ratios(const OracleV2& o, const test::Evaluation& ev, bool lse, std::int32_t dtype = ATTNCHECK_DTYPE_F32) {
    Ratios r;
    const std::size_t Dv = std::size_t(o.value_dim);
    const double ud = unit_roundoff(dtype);
    for (std::size_t row = 0; row < o.rows(); ++row) {
        for (std::size_t c = 0; c < Dv; ++c) {
            const std::size_t at = row * Dv + c;
            REQUIRE(std::isfinite(o.out[at]));  // the oracle never reads padding
            const double err = std::abs(double(ev.out[at]) - o.out[at]);
            const double ratio = o.out_bound[at] > 0 ? err / o.out_bound[at] : (err == 0 ? 0.0 : kInfRatio);
            if (dtype != ATTNCHECK_DTYPE_F32 && o.out_bound[at] > 0) {
                const double b = (o.out_bound[at] - ud * std::abs(o.out[at]) - tiny_rounding(dtype)) / (1 + ud);
                if (b > 0.01 * o.out_bound[at])  // else lost to cancellation against the tiny term
                    r.accumulation = std::max(r.accumulation, std::abs(double(ev.out_f32[at]) - o.out[at]) / b);
            }
            if (!(ratio <= r.out)) {
                r.out = std::isnan(ratio) ? kInfRatio : ratio;
                std::ostringstream w;
                w << "out row " << row << " col " << c << ": " << ev.out[at] << " vs " << o.out[at] << " bound "
                  << o.out_bound[at];
                r.where = w.str();
            }
        }
        if (!lse) continue;
        const double l = ev.lse[row];
        double ratio = 0;
        if (std::isinf(o.lse[row])) ratio = l == o.lse[row] ? 0.0 : kInfRatio;
        else ratio = std::abs(l - o.lse[row]) / o.lse_bound[row];
        if (!(ratio <= r.lse)) r.lse = std::isnan(ratio) ? kInfRatio : ratio;
    }
    return r;
}

const std::int32_t kDtypes[] = {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_F16, ATTNCHECK_DTYPE_BF16};
const Style kStyles[] = {Style::normal, Style::large, Style::integer};

}  // namespace

namespace {

// Random problems of every style (a tenth of them with long rows, Tk 300-600), each evaluated
// in every order, and for f16/bf16 the two-pass and online orders again with P rounded to the
// dtype (sum of the rounded and of the unrounded P), checked against the bound with
// probabilities_rounded. Every ratio must be <= 1; the largest are reported.
void bound_campaign(std::uint32_t seed, int per_style) {
    Random r(seed);
    for (const std::int32_t dtype : kDtypes) {
        double worst_out = 0, worst_lse = 0, worst_rounded = 0, worst_accumulation = 0;
        double out_by_order[std::size(test::kOrders)] = {}, lse_by_order[std::size(test::kOrders)] = {};
        std::string worst_where;
        int cases = 0;
        for (const Style style : kStyles)
            for (int t = 0; t < per_style; ++t) {
                const Spec s = random_spec(r, dtype, style, t % 10 == 0);
                V2Case c(s);
                fill_random(c, r, style);
                INFO(style_name(style) << " " << describe_v2(c.p));
                const OracleV2 o = attention_v2_oracle(c.p);
                for (std::size_t k = 0; k < std::size(test::kOrders); ++k) {
                    const test::Order order = test::kOrders[k];
                    INFO("order " << test::order_name(order));
                    const Ratios x = ratios(o, test::evaluate_f32(c.p, order), true, dtype);
                    INFO(x.where);
                    REQUIRE(x.out <= 1.0);
                    REQUIRE(x.lse <= 1.0);
                    if (x.out > worst_out) worst_out = x.out, worst_where = x.where;
                    // f16/bf16: the accumulation, since the output's own rounding reaches ~1 in every order
                    const double accumulated = dtype == ATTNCHECK_DTYPE_F32 ? x.out : x.accumulation;
                    out_by_order[k] = std::max(out_by_order[k], accumulated);
                    lse_by_order[k] = std::max(lse_by_order[k], x.lse);
                    worst_lse = std::max(worst_lse, x.lse);
                    worst_accumulation = std::max(worst_accumulation, x.accumulation);
                }
                if (dtype != ATTNCHECK_DTYPE_F32) {
                    const OracleV2 orounded = attention_v2_oracle(c.p, OracleV2Options{true});
                    const struct {
                        test::Order order;
                        test::PRounding rounding;
                    } variants[] = {{test::Order::online, test::PRounding::numerator},
                                    {test::Order::two_pass, test::PRounding::both}};
                    for (const auto& variant : variants) {
                        INFO("order " << test::order_name(variant.order) << " with P rounded");
                        const Ratios x = ratios(orounded, test::evaluate_f32(c.p, variant.order, variant.rounding), true);
                        INFO(x.where);
                        REQUIRE(x.out <= 1.0);
                        REQUIRE(x.lse <= 1.0);
                        worst_rounded = std::max(worst_rounded, x.out);
                    }
                }
                ++cases;
            }
        WARN(dtype_name(dtype) << ": " << cases << " problems x " << (std::size(test::kOrders) + (dtype == ATTNCHECK_DTYPE_F32 ? 0 : 2))
                               << " evaluations, largest ratio out " << worst_out << " (" << worst_where << "), lse "
                               << worst_lse << ", out with P rounded " << worst_rounded
                               << ", out before its rounding to the dtype " << worst_accumulation);
        std::ostringstream by_order;
        for (std::size_t k = 0; k < std::size(test::kOrders); ++k)
            by_order << (k ? ", " : "") << test::order_name(test::kOrders[k]) << " " << out_by_order[k] << " / " << lse_by_order[k];
        WARN(dtype_name(dtype) << ": largest ratio by order, out (before its rounding to the dtype) / lse: " << by_order.str());
        CHECK(worst_out > 0);
    }
}

}  // namespace

TEST_CASE("the bound holds for correct float32 evaluations in six orders", "[reference][v2][bound]") {
    bound_campaign(2026, 60);
}

// The same over 30 times as many problems (minutes): run by hand for docs/numerics.md.
TEST_CASE("bound campaign, long", "[.][campaign]") { bound_campaign(7, 2000); }

TEST_CASE("planted bugs exceed the bound", "[reference][v2][bound]") {
    // Each bug on problems that exercise it; the largest ratio over a few problems must exceed 1.
    struct Planted {
        test::Bug bug;
        const char* name;
        void (*adjust)(Spec&);
    };
    const Planted bugs[] = {
        {test::Bug::no_scale, "missing scale", [](Spec&) {}},
        {test::Bug::dropped_key, "dropped key", [](Spec&) {}},
        {test::Bug::lse_log2, "lse in log2 units", [](Spec&) {}},
        {test::Bug::window_both_sides, "window of 2w+1 keys",
         [](Spec& s) { s.causal = true, s.window_left = 3, s.window_right = -1, s.q_pos.assign(s.q_pos.size(), 0); }},
        {test::Bug::gqa_modulus, "GQA group size as modulus",
         [](Spec& s) { s.kv_heads = 2, s.q_heads = 4, s.alibi.clear(); }},
        {test::Bug::softcap_before_scale, "softcap before the scale", [](Spec& s) { s.softcap = 2.0f; }},
    };
    for (const std::int32_t dtype : kDtypes)
        for (const Planted& planted : bugs) {
            Random r(99);
            double worst = 0;
            for (int t = 0; t < 12; ++t) {
                Spec s = random_spec(r, dtype, Style::normal, false);
                s.tk.assign(s.tk.size(), std::max(8, s.tk[0]));
                s.tq.assign(s.tq.size(), 4);
                s.varlen = false, s.kv_lens = false, s.block_size = 0, s.kv_capacity = 0;
                s.head_dim = std::max(s.head_dim, 8), s.value_dim = s.head_dim;
                if (planted.bug == test::Bug::no_scale) s.softcap = 0;
                planted.adjust(s);
                if (s.q_pos[0] == 0) s.causal = true, s.window_right = -1;
                V2Case c(s);
                fill_random(c, r, Style::normal);
                const OracleV2 o = attention_v2_oracle(c.p);
                const Ratios x = ratios(o, test::evaluate_f32(c.p, test::Order::two_pass, test::PRounding::none, planted.bug), true);
                worst = std::max({worst, x.out, x.lse});
            }
            INFO(dtype_name(dtype) << " " << planted.name);
            CHECK(worst > 1.0);
            WARN(dtype_name(dtype) << " " << planted.name << ": largest ratio " << worst);
        }
}

TEST_CASE("a tanh of declared accuracy: within the bound that declares it, over the default one",
          "[reference][v2][bound]") {
    // tanh.approx.f32 (relative error up to 2^-11 = 4096 ulps) is a correct softcap for a kernel
    // that declares tanh_ulps = 4096, and a score error far over the default 2 ulps.
    Random r(31);
    double declared = 0, undeclared = 0;
    for (const std::int32_t dtype : kDtypes)
        for (int t = 0; t < 20; ++t) {
            Spec s = random_spec(r, dtype, kStyles[t % 3], false);
            s.softcap = float(r.uniform(5, 30));
            V2Case c(s);
            fill_random(c, r, kStyles[t % 3]);
            INFO(describe_v2(c.p));
            const test::Evaluation ev = test::evaluate_f32(c.p, test::Order::two_pass, test::PRounding::none, test::Bug::tanh_approx);
            OracleV2Options options;
            options.tanh_ulps = 4096;
            const Ratios x = ratios(attention_v2_oracle(c.p, options), ev, true);
            REQUIRE(x.out <= 1.0);
            REQUIRE(x.lse <= 1.0);
            declared = std::max({declared, x.out, x.lse});
            const Ratios y = ratios(attention_v2_oracle(c.p), ev, true);
            undeclared = std::max({undeclared, y.out, y.lse});
        }
    WARN("tanh of 2^-11: largest ratio " << declared << " declared, " << undeclared << " undeclared");
    CHECK(undeclared > 1.0);
}

TEST_CASE("the v2 oracle equals the v1 oracle on v1-expressible problems", "[reference][v2][consistency]") {
    // f32, Hq = Hk, contiguous [B,H,T,D], one q_offset (q_pos the same for every sequence).
    Random r(5);
    for (int t = 0; t < 40; ++t) {
        attncheck_problem p1{};
        p1.abi_version = ATTNCHECK_ABI_VERSION;
        p1.batch = r.uniform(1, 3), p1.heads = r.uniform(1, 3);
        p1.q_len = r.uniform(1, 9), p1.kv_len = r.uniform(1, 20);
        p1.head_dim = r.uniform(1, 16), p1.value_dim = r.uniform(1, 16);
        p1.q_offset = r.uniform(0, p1.kv_len);
        p1.causal = r.coin(0.7);
        p1.scale = 1.0f / std::sqrt(float(p1.head_dim));
        std::vector<std::int32_t> valid;
        for (int b = 0; b < p1.batch; ++b) valid.push_back(r.uniform(0, p1.kv_len));
        if (r.coin()) p1.kv_valid_len = valid.data();
        const std::size_t BH = std::size_t(p1.batch * p1.heads);
        std::vector<float> q(BH * std::size_t(p1.q_len * p1.head_dim)), k(BH * std::size_t(p1.kv_len * p1.head_dim)),
            v(BH * std::size_t(p1.kv_len * p1.value_dim));
        for (auto* x : {&q, &k, &v})
            for (float& e : *x) e = float(r.normal());

        Spec s;
        s.batch = p1.batch, s.q_heads = s.kv_heads = p1.heads, s.head_dim = p1.head_dim, s.value_dim = p1.value_dim;
        s.tq.assign(std::size_t(p1.batch), p1.q_len);
        s.tk = p1.kv_valid_len ? std::vector<int>(valid.begin(), valid.end()) : std::vector<int>(std::size_t(p1.batch), p1.kv_len);
        s.kv_capacity = p1.kv_len, s.kv_lens = p1.kv_valid_len != nullptr;
        s.q_pos.assign(std::size_t(p1.batch), p1.q_offset);
        s.causal = p1.causal != 0, s.scale = p1.scale;
        V2Case c(s);
        // Same values: v1's contiguous [B,H,T,D] element (b, h, t, d) into the v2 view.
        for (int b = 0; b < p1.batch; ++b)
            for (int h = 0; h < p1.heads; ++h) {
                const std::size_t bh = std::size_t(b * p1.heads + h);
                for (int i = 0; i < p1.q_len; ++i)
                    for (int d = 0; d < p1.head_dim; ++d)
                        c.q.set(c.q_at(b, h, i, d), q[(bh * std::size_t(p1.q_len) + std::size_t(i)) * std::size_t(p1.head_dim) + std::size_t(d)]);
                for (int j = 0; j < c.tk(b); ++j) {
                    for (int d = 0; d < p1.head_dim; ++d)
                        c.k.set(c.k_at(b, h, j, d), k[(bh * std::size_t(p1.kv_len) + std::size_t(j)) * std::size_t(p1.head_dim) + std::size_t(d)]);
                    for (int d = 0; d < p1.value_dim; ++d)
                        c.v.set(c.v_at(b, h, j, d), v[(bh * std::size_t(p1.kv_len) + std::size_t(j)) * std::size_t(p1.value_dim) + std::size_t(d)]);
                }
            }
        INFO(describe_v2(c.p));
        const reference::BoundedOutput o1 = reference::attention_bounded(p1, q.data(), k.data(), v.data());
        const OracleV2 o2 = attention_v2_oracle(c.p);
        REQUIRE(o2.out.size() == o1.value.size());
        for (std::size_t e = 0; e < o1.value.size(); ++e) {
            REQUIRE(std::abs(o2.out[e] - o1.value[e]) <= 1e-12);
            // Version 2 covers at least the evaluations version 1 does.
            REQUIRE(o2.out_bound[e] >= o1.bound[e]);
        }
    }
}

TEST_CASE("the oracle depends on the layout only through the values it addresses", "[reference][v2][consistency]") {
    // One logical problem (same values, filled in the same logical order) as dense [B,H,T,D],
    // [B,T,H,D] with gaps, varlen and paged through a shuffled table: identical results, bit
    // for bit. And GQA equals MHA with each kv head replicated over its query-head group.
    Random r(41);
    for (int t = 0; t < 30; ++t) {
        Spec base = random_spec(r, kDtypes[t % 3], kStyles[t % 3], false);
        base.varlen = false, base.block_size = 0, base.kv_lens = true, base.row_gap = 0, base.layout = Layout::bhtd;
        base.tq.assign(base.tq.size(), base.tq[0]);
        base.kv_capacity = *std::max_element(base.tk.begin(), base.tk.end());
        Spec bthd = base, varlen = base, paged = base;
        bthd.layout = Layout::bthd, bthd.row_gap = 2;
        varlen.varlen = true, varlen.kv_lens = false;
        paged.block_size = r.uniform(1, 7), paged.spare_blocks = 2, paged.layout = Layout::bthd;
        const auto oracle_of = [&](const Spec& s) {
            V2Case c(s);
            Random values(std::uint32_t(500 + t));
            fill_random(c, values, kStyles[t % 3]);
            return attention_v2_oracle(c.p);
        };
        const OracleV2 o = oracle_of(base);
        for (const Spec* s : {&bthd, &varlen, &paged}) {
            V2Case shown(*s);
            INFO(describe_v2(shown.p));
            const OracleV2 x = oracle_of(*s);
            REQUIRE(x.out == o.out);
            REQUIRE(x.out_bound == o.out_bound);
            REQUIRE(x.visible == o.visible);
            for (std::size_t row = 0; row < o.rows(); ++row) {
                REQUIRE(float_to_bits(float(x.lse[row])) == float_to_bits(float(o.lse[row])));
                REQUIRE(x.lse_bound[row] == o.lse_bound[row]);
            }
        }

        // GQA against MHA with replicated kv heads.
        V2Case gqa(base);
        fill_random(gqa, r, kStyles[t % 3]);
        Spec mha_spec = base;
        mha_spec.kv_heads = base.q_heads;
        V2Case mha(mha_spec);
        const int group = base.q_heads / base.kv_heads;
        for (int b = 0; b < base.batch; ++b)
            for (int h = 0; h < base.q_heads; ++h) {
                for (int i = 0; i < gqa.tq(b); ++i)
                    for (int d = 0; d < base.head_dim; ++d) mha.q.set(mha.q_at(b, h, i, d), gqa.q.get(gqa.q_at(b, h, i, d)));
                for (int j = 0; j < gqa.tk(b); ++j) {
                    for (int d = 0; d < base.head_dim; ++d)
                        mha.k.set(mha.k_at(b, h, j, d), gqa.k.get(gqa.k_at(b, h / group, j, d)));
                    for (int d = 0; d < base.value_dim; ++d)
                        mha.v.set(mha.v_at(b, h, j, d), gqa.v.get(gqa.v_at(b, h / group, j, d)));
                }
            }
        INFO(describe_v2(gqa.p));
        const OracleV2 og = attention_v2_oracle(gqa.p), om = attention_v2_oracle(mha.p);
        REQUIRE(og.out == om.out);
        REQUIRE(og.out_bound == om.out_bound);
    }
}

// ---- the C entry -----------------------------------------------------------------------------

namespace {

// Runs the reference kernel; every element of out's and lse's buffers that is not a logical
// output (guards, gaps) must still hold the sentinel.
void run_and_check_untouched(V2Case& c) {
    REQUIRE(attncheck_reference_kernel_v2(&c.p) == ATTNCHECK_OK);
    std::vector<char> logical(std::size_t(c.out.size()), 0);
    std::vector<char> logical_lse(c.lse.size(), 0);
    for (int b = 0; b < c.p.batch; ++b)
        for (int h = 0; h < c.p.q_heads; ++h)
            for (int i = 0; i < c.tq(b); ++i) {
                for (int d = 0; d < c.p.value_dim; ++d) logical[std::size_t(c.out_at(b, h, i, d))] = 1;
                if (c.p.lse) logical_lse[std::size_t(c.out_guard + lse_offset_v2(c.p, b, h, i))] = 1;
            }
    for (std::int64_t e = 0; e < c.out.size(); ++e)
        if (!logical[std::size_t(e)]) REQUIRE(c.out.get(e) == V2Case::kOutSentinel);
    for (std::size_t e = 0; e < c.lse.size(); ++e)
        if (!logical_lse[e]) REQUIRE(c.lse[e] == V2Case::kOutSentinel);
}

}  // namespace

TEST_CASE("C entry: out rounded to the dtype, lse in float32, nothing else written", "[reference][v2][kernel]") {
    Random r(17);
    for (const std::int32_t dtype : kDtypes)
        for (int t = 0; t < 30; ++t) {
            const Spec s = random_spec(r, dtype, kStyles[t % 3], false);
            V2Case c(s);
            fill_random(c, r, kStyles[t % 3]);
            INFO(describe_v2(c.p));
            run_and_check_untouched(c);
            const OracleV2 o = attention_v2_oracle(c.p);
            const double ud = unit_roundoff(dtype);
            const Format format = format_of(dtype);
            for (int b = 0; b < c.p.batch; ++b)
                for (int h = 0; h < c.p.q_heads; ++h)
                    for (int i = 0; i < c.tq(b); ++i) {
                        const std::size_t row = o.row(b, h, i);
                        for (int d = 0; d < c.p.value_dim; ++d) {
                            const double x = o.out[row * std::size_t(c.p.value_dim) + std::size_t(d)];
                            const float got = c.out.get(c.out_at(b, h, i, d));
                            // x rounded to nearest even in the dtype, directly from float64.
                            REQUIRE(double(got) == round_to_format(x, format.bits, format.emin));
                            REQUIRE(std::abs(double(got) - x) <= ud * std::abs(x) + 0x1p-25);
                        }
                        const float l = c.lse[std::size_t(c.out_guard + lse_offset_v2(c.p, b, h, i))];
                        if (o.visible[row] == 0) REQUIRE((std::isinf(l) && l < 0));
                        else REQUIRE(l == float(o.lse[row]));
                    }
        }
}

TEST_CASE("round_double_to rounds once, from float64", "[reference][v2][dtype]") {
    // Just above the midpoint between two dtype values, by less than float32 can hold: through
    // float32 first, x becomes the midpoint and ties to even go down; rounded once, it goes up.
    for (const std::int32_t dtype : kDtypes) {
        const Format f = format_of(dtype);
        const double one_ulp = std::ldexp(1.0, 1 - f.bits);
        const double x = 1.0 + one_ulp / 2 + 0x1p-40;
        CHECK(double(reference::round_double_to(dtype, x)) == 1.0 + one_ulp);
        CHECK(double(reference::round_double_to(dtype, -x)) == -(1.0 + one_ulp));
        CHECK(double(reference::round_double_to(dtype, 1.0 + one_ulp / 2)) == 1.0);  // the tie: even
    }
    // And on random doubles, against the independent rounding.
    Random r(37);
    for (int t = 0; t < 100000; ++t) {
        const double x = r.normal() * std::exp2(r.uniform(-30, 12));  // within f16's range
        for (const std::int32_t dtype : kDtypes) {
            const Format f = format_of(dtype);
            INFO(dtype_name(dtype) << " x = " << x);
            REQUIRE(double(reference::round_double_to(dtype, x)) == round_to_format(x, f.bits, f.emin));
        }
    }
}

TEST_CASE("C entry: refuses a malformed problem and writes nothing", "[reference][v2][kernel]") {
    V2Case c(small_spec());
    c.fill([] { return 1.0f; });
    c.p.kv_heads = 3;
    REQUIRE(attncheck_reference_kernel_v2(&c.p) == ATTNCHECK_UNSUPPORTED);
    for (std::int64_t e = 0; e < c.out.size(); ++e) REQUIRE(c.out.get(e) == V2Case::kOutSentinel);
    for (const float l : c.lse) REQUIRE(l == V2Case::kOutSentinel);
    REQUIRE(attncheck_reference_kernel_v2(nullptr) == ATTNCHECK_UNSUPPORTED);
}

TEST_CASE("C entry: NaN in padding and in keys no row sees changes nothing", "[reference][v2][kernel]") {
    // The same problem twice: padding (layout gaps, dense rows past kv_lens, unused blocks)
    // holds 0 in one and NaN in the other, and in the NaN one every key that no row of its
    // sequence sees (left of every window, right of every causal limit) is NaN in k and v too.
    // The results must be identical bit for bit.
    Random r(23);
    int invisible_keys = 0;
    for (const std::int32_t dtype : kDtypes)
        for (int t = 0; t < 40; ++t) {
            Spec s = random_spec(r, dtype, Style::normal, false);
            if (t % 2 == 0) s.window_left = r.uniform(0, 4);  // more keys outside every window
            V2Case clean(s, 0.0f), poisoned(s, kNaN);
            Random values(std::uint32_t(1000 + t));
            fill_random(clean, values, Style::normal);
            Random same(std::uint32_t(1000 + t));
            fill_random(poisoned, same, Style::normal);
            for (int b = 0; b < s.batch; ++b)
                for (int j = 0; j < poisoned.tk(b); ++j) {
                    bool seen = false;
                    for (int i = 0; i < poisoned.tq(b); ++i) seen = seen || visible_v2(poisoned.p, b, i, j);
                    if (seen) continue;
                    ++invisible_keys;
                    for (int hk = 0; hk < s.kv_heads; ++hk) {
                        for (int d = 0; d < s.head_dim; ++d) poisoned.k.set(poisoned.k_at(b, hk, j, d), kNaN);
                        for (int d = 0; d < s.value_dim; ++d) poisoned.v.set(poisoned.v_at(b, hk, j, d), kNaN);
                    }
                }
            INFO(describe_v2(poisoned.p));
            run_and_check_untouched(clean);
            run_and_check_untouched(poisoned);
            for (std::int64_t e = 0; e < clean.out.size(); ++e)
                REQUIRE(float_to_bits(clean.out.get(e)) == float_to_bits(poisoned.out.get(e)));
            for (std::size_t e = 0; e < clean.lse.size(); ++e)
                REQUIRE(float_to_bits(clean.lse[e]) == float_to_bits(poisoned.lse[e]));
        }
    REQUIRE(invisible_keys > 100);
}

TEST_CASE("one-row problems: NaN in every key invisible to the row changes nothing", "[reference][v2][kernel]") {
    // Decode steps (Tq = 1): here "invisible to every row" is "invisible to the row", so every
    // key the row must not read is NaN.
    Random r(29);
    for (int t = 0; t < 60; ++t) {
        Spec s = random_spec(r, kDtypes[t % 3], Style::normal, false);
        s.tq.assign(s.tq.size(), 1);
        s.window_left = r.uniform(-1, 6);
        V2Case c(s);
        fill_random(c, r, Style::normal);
        const OracleV2 before = attention_v2_oracle(c.p);
        for (int b = 0; b < s.batch; ++b)
            for (int j = 0; j < c.tk(b); ++j)
                if (!visible_v2(c.p, b, 0, j))
                    for (int hk = 0; hk < s.kv_heads; ++hk) {
                        for (int d = 0; d < s.head_dim; ++d) c.k.set(c.k_at(b, hk, j, d), kNaN);
                        for (int d = 0; d < s.value_dim; ++d) c.v.set(c.v_at(b, hk, j, d), kNaN);
                    }
        const OracleV2 after = attention_v2_oracle(c.p);
        INFO(describe_v2(c.p));
        REQUIRE(before.out == after.out);
        REQUIRE(before.out_bound == after.out_bound);
        for (std::size_t row = 0; row < before.rows(); ++row)
            REQUIRE(float_to_bits(float(before.lse[row])) == float_to_bits(float(after.lse[row])));
    }
}

TEST_CASE("the C library's tanhf is within the default tanh_ulps in the unit the softcap bound uses", "[reference][v2]") {
    // The bound allows |tanhf(x) - tanh(x)| <= k 2^-23 |tanh(x)| (docs/numerics.md, softcap); k
    // defaults to 2, for glibc's tanhf. tools/tanh_error.cpp measured every positive float (glibc
    // 2.36): at most 1.42 in this unit, at the first input below. In ulps of the result the same
    // tanhf reaches 2.19 (the second input): that is not the unit of tanh_ulps.
    const double k = reference::OracleV2Options{}.tanh_ulps;
    const auto error = [](float at) {
        // Through a volatile: g++ folds tanhf of a constant at compile time, correctly rounded.
        volatile float v = at;
        const float x = v;
        const long double t = std::tanh(static_cast<long double>(x));
        return double(std::fabs(static_cast<long double>(std::tanh(x)) - t) / (std::fabs(t) * 0x1p-23L));
    };
    CHECK(error(0x1.2755fap-3f) <= k);
    CHECK(error(0x1.ddca18p-3f) <= k);
    // A sweep of 2^20 floats over (0, 10], where tanh leaves 1 (beyond, tanhf is 1 or its neighbour).
    double worst = 0;
    float at = 0;
    for (int i = 1; i <= (1 << 20); ++i) {
        const float x = 10.0f * float(i) / float(1 << 20);
        if (error(x) > worst) worst = error(x), at = x;
    }
    INFO("worst " << worst << " at x = " << at);
    CHECK(worst <= k);
}
