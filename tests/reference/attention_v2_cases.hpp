// tests/reference/attention_v2_cases.hpp — what the tests of the version 2 oracle share
// (attention_v2_test.cpp, attention_v2_bound_test.cpp, attention_v2_kernel_test.cpp): random
// well-formed problems of every feature (random_spec, fill_random) in three styles of values,
// a small hand-made problem, and rounding to a dtype computed in double, independently of the
// bit tricks under test.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "attncheck/problem_v2.hpp"
#include "reference/attention_v2.hpp"
#include "v2_case.hpp"

namespace attncheck::test {

// The oracle, as the tests of it name it.
using reference::attention_v2_oracle;
using reference::OracleV2;
using reference::OracleV2Options;

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// x rounded to nearest even with `bits` significant bits and minimum normal exponent `emin`,
// computed in double by scaling to an integer (independent of the bit tricks under test).
inline double round_to_format(double x, int bits, int emin) {
    if (x == 0 || !std::isfinite(x)) return x;
    const int e = std::max(std::ilogb(x), emin);
    const double q = std::ldexp(x, bits - 1 - e);
    return std::ldexp(std::nearbyint(q), e - (bits - 1));
}

// Significant bits and minimum normal exponent of a dtype.
struct Format {
    int bits, emin;
};
inline Format format_of(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? Format{11, -14} : dtype == ATTNCHECK_DTYPE_BF16 ? Format{8, -126} : Format{24, -126};
}

// A small well-formed problem (two sequences, GQA, kv_lens) for the tests of refusals.
inline Spec small_spec() {
    Spec s;
    s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.head_dim = 3, s.value_dim = 2;
    s.tq = {2, 2}, s.tk = {3, 5}, s.q_pos = {1, 3};
    s.kv_lens = true;
    return s;
}

// The values of a random problem: normal, large (scores of order 1e3) or small integers.
enum class Style { normal, large, integer };

struct Random {
    std::mt19937 rng;
    explicit Random(std::uint32_t seed) : rng(seed) {}
    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
    bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng); }
    double normal() { return std::normal_distribution<double>(0, 1)(rng); }
};

// A random well-formed problem exercising the features; `long_rows` makes Tk up to ~600.
inline Spec random_spec(Random& r, std::int32_t dtype, Style style, bool long_rows) {
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

inline void fill_random(V2Case& c, Random& r, Style style) {
    c.fill([&] {
        switch (style) {
        case Style::integer: return float(r.uniform(-4, 4));
        case Style::large: return float(2.3 * r.normal());
        default: return float(r.normal());
        }
    });
}


inline constexpr std::int32_t kDtypes[] = {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_F16, ATTNCHECK_DTYPE_BF16};
inline constexpr Style kStyles[] = {Style::normal, Style::large, Style::integer};

}  // namespace attncheck::test
