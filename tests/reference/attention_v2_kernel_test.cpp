// tests/reference/attention_v2_kernel_test.cpp — attncheck_reference_kernel_v2, the reference
// kernel behind the version 2 C ABI: its out is the float64 oracle's rounded once to the dtype,
// its lse the oracle's in float32, and it writes nothing else; it refuses a malformed problem
// without writing; NaN in padding and in keys no row sees changes nothing (and, in the oracle,
// NaN in every key a one-row problem's row does not see).
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

