// tests/optimized/kernel_cases.hpp — one problem of the fused attention kernel
// (attncheck_optimized_kernel) with its random inputs (Case), the kernel run on it, the bitwise
// comparison of two outputs and a guard of the OpenMP thread count: what the kernel's tests share
// (kernel_test.cpp on contiguous inputs, kernel_strided_test.cpp on strided views and tiled keys).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cmath>
#include <cstddef>
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
#include "attncheck/problem.hpp"

namespace attncheck::testing {

// One attention problem with its inputs. valid holds kv_valid_len when padded is true.
struct Case {
    int B = 1, H = 1, Tq = 1, Tk = 1, Dk = 1, Dv = 1, q_offset = 0;
    bool causal = true;
    bool padded = false;
    std::vector<int32_t> valid;  // [B]
    float scale = 1.0f;
    float input_scale = 1.0f;  // inputs uniform in [-input_scale, input_scale]
    std::uint64_t seed = 1;
    std::vector<float> q, k, v;  // [B,H,Tq,Dk] [B,H,Tk,Dk] [B,H,Tk,Dv]

    attncheck_problem problem() const {
        return attncheck::make_problem({.batch = B, .heads = H, .q_len = Tq, .kv_len = Tk,
                                        .head_dim = Dk, .value_dim = Dv, .q_offset = q_offset,
                                        .causal = causal, .kv_valid_len = padded ? valid.data() : nullptr,
                                        .scale = scale});
    }
    std::size_t out_size() const { return std::size_t(B) * H * Tq * Dv; }
    std::string describe() const {
        std::ostringstream s;
        s << "B=" << B << " H=" << H << " Tq=" << Tq << " Tk=" << Tk << " Dk=" << Dk << " Dv=" << Dv
          << " q_offset=" << q_offset << " causal=" << causal << " scale=" << scale
          << " input_scale=" << input_scale << " seed=" << seed;
        if (padded) {
            s << " kv_valid_len=[";
            for (std::size_t b = 0; b < valid.size(); ++b) s << (b ? "," : "") << valid[b];
            s << "]";
        }
        return s.str();
    }
};

// Fills q, k, v from the case's seed (the same seed gives the same inputs everywhere).
inline void fill_inputs(Case& c) {
    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<float> u(-c.input_scale, c.input_scale);
    auto fill = [&](std::vector<float>& x, std::size_t n) {
        x.resize(n);
        for (auto& e : x) e = u(rng);
    };
    fill(c.q, std::size_t(c.B) * c.H * c.Tq * c.Dk);
    fill(c.k, std::size_t(c.B) * c.H * c.Tk * c.Dk);
    fill(c.v, std::size_t(c.B) * c.H * c.Tk * c.Dv);
}

inline Case make_case(int B, int H, int Tq, int Tk, int Dk, int Dv, int q_offset, bool causal,
               std::uint64_t seed) {
    Case c;
    c.B = B, c.H = H, c.Tq = Tq, c.Tk = Tk, c.Dk = Dk, c.Dv = Dv, c.q_offset = q_offset;
    c.causal = causal;
    c.scale = 1.0f / std::sqrt(float(Dk));
    c.seed = seed;
    fill_inputs(c);
    return c;
}

inline std::vector<float> run_optimized(const Case& c) {
    std::vector<float> out(c.out_size(), std::numeric_limits<float>::quiet_NaN());
    const attncheck_problem p = c.problem();
    REQUIRE(attncheck_optimized_kernel(&p, c.q.data(), c.k.data(), c.v.data(), out.data()) ==
            ATTNCHECK_OK);
    return out;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// First flat index where two outputs differ in their bits, or -1.
inline long first_difference(const float* a, const float* b, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return long(i);
    return -1;
}

// Restores the OpenMP thread count when a test that changes it ends (even by a failed REQUIRE).
struct ThreadCountGuard {
    int saved = omp_get_max_threads();
    ~ThreadCountGuard() { omp_set_num_threads(saved); }
};

}  // namespace attncheck::testing
