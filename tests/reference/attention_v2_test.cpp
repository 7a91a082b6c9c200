// tests/reference/attention_v2_test.cpp — the pieces of attncheck/problem_v2.hpp the float64
// oracle of kernel ABI version 2 (reference/attention_v2.hpp) stands on (f16/bf16 conversion,
// problem_v2_error, round_double_to) and the oracle on hand examples; its bound is tested in
// attention_v2_bound_test.cpp, the reference kernel behind the v2 C ABI in
// attention_v2_kernel_test.cpp.
//
// Hand examples compute their expected values in the test from closed forms of small integers.
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

#include "attention_v2_cases.hpp"
#include "attncheck/problem_v2.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"
#include "v2_case.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::test;  // V2Case, Spec, the oracle, random problems (v2_case.hpp, attention_v2_cases.hpp)

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

// ---- problem_v2_error ------------------------------------------------------------------------

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

}  // namespace
