// tests/zoo/zoo_check.hpp — a small, independent black-box checker for the zoo's own tests.
//
// It is deliberately NOT the property suite: the zoo's tests must show that every mutant is
// observable through the ABI (some valid problem exposes it) and that the correct bases are
// never flagged, without depending on the properties being right. One call of check_once()
// runs a kernel on one problem and looks at everything a black box shows: the return code,
// agreement with the float64 reference (attncheck/tolerance.hpp), guard regions around out,
// the inputs after the call, and a second identical call (bitwise).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/tolerance.hpp"
#include "reference/error_bound.hpp"

namespace zoo_test {

struct Problem {
    std::string name;
    int B, H, Tq, Tk, Dk, Dv, q_offset, causal;
    std::vector<std::int32_t> valid;  // empty: no padding
    float scale;                      // 0: 1/sqrt(Dk)
    float input_sd = 1.0f;            // standard deviation of q, k, v
};

struct Inputs {
    attncheck_problem p{};
    std::vector<std::int32_t> valid;
    std::vector<float> q, k, v;  // [B,H,Tq,Dk], [B,H,Tk,Dk], [B,H,Tk,Dv]
};

inline Inputs make_inputs(const Problem& pr, std::uint32_t seed) {
    Inputs in;
    in.valid = pr.valid;
    attncheck_problem& p = in.p;
    p.abi_version = ATTNCHECK_ABI_VERSION;
    p.batch = pr.B, p.heads = pr.H, p.q_len = pr.Tq, p.kv_len = pr.Tk;
    p.head_dim = pr.Dk, p.value_dim = pr.Dv, p.q_offset = pr.q_offset, p.causal = pr.causal;
    p.kv_valid_len = nullptr;
    p.scale = pr.scale != 0 ? pr.scale : 1.0f / std::sqrt(float(pr.Dk));
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, pr.input_sd);
    const auto fill = [&](std::vector<float>& x, std::size_t n) {
        x.resize(n);
        for (auto& e : x) e = nd(rng);
    };
    const std::size_t BH = std::size_t(pr.B) * pr.H;
    fill(in.q, BH * pr.Tq * pr.Dk);
    fill(in.k, BH * pr.Tk * pr.Dk);
    fill(in.v, BH * pr.Tk * pr.Dv);
    return in;
}

struct Verdict {
    bool flagged = false;
    std::string why;  // which check flagged it, for the test's INFO
};

constexpr std::size_t kGuard = 16;       // floats of guard before and after out
constexpr float kGuardValue = -12345.0f;  // what the guards hold; any change is a stray write
constexpr float kPoison = 7.0f;           // what out holds before a call (a caller's garbage)

inline Verdict check_once(attncheck_kernel_fn fn, Inputs in) {
    attncheck_problem p = in.p;
    if (!in.valid.empty()) p.kv_valid_len = in.valid.data();
    const std::size_t n_out = std::size_t(p.batch) * p.heads * p.q_len * p.value_dim;
    const std::vector<float> q0 = in.q, k0 = in.k, v0 = in.v;

    const auto call = [&](std::vector<float>& buf) {  // buf: guard | out [B,H,Tq,Dv] | guard
        buf.assign(n_out + 2 * kGuard, kGuardValue);
        std::fill(buf.begin() + kGuard, buf.begin() + std::ptrdiff_t(kGuard + n_out), kPoison);
        return fn(&p, in.q.data(), in.k.data(), in.v.data(), buf.data() + kGuard);
    };
    std::vector<float> first, second;
    Verdict v;
    if (call(first) != ATTNCHECK_OK) return {true, "returned unsupported for a valid problem"};
    for (std::size_t g = 0; g < kGuard; ++g)
        if (first[g] != kGuardValue || first[kGuard + n_out + g] != kGuardValue)
            return {true, "wrote outside out"};
    if (std::memcmp(q0.data(), in.q.data(), q0.size() * 4) || std::memcmp(k0.data(), in.k.data(), k0.size() * 4) ||
        std::memcmp(v0.data(), in.v.data(), v0.size() * 4))
        return {true, "modified an input"};

    // The suite's yardstick (NUMERICS.md v2): each element within its bound for any correct
    // float32 evaluation.
    const attncheck::reference::BoundedOutput oracle =
        attncheck::reference::attention_bounded(p, q0.data(), k0.data(), v0.data());
    const attncheck::Agreement a =
        attncheck::check_against_bound(first.data() + kGuard, oracle.value.data(), oracle.bound.data(), n_out);
    if (!a.ok) return {true, "disagrees with the reference: " + a.describe()};

    // Same call again on the same (restored) inputs: bitwise the same result.
    in.q = q0, in.k = k0, in.v = v0;
    if (call(second) != ATTNCHECK_OK) return {true, "second call returned unsupported"};
    if (std::memcmp(first.data(), second.data(), first.size() * 4) != 0)
        return {true, "not deterministic: two identical calls differ"};
    return v;
}

// Adversarial problems, each there to expose a family of bugs (the comment says which).
inline std::vector<Problem> witness_problems() {
    return {
        // Prefill, several heads and sequences: masking at the diagonal, scale, softmax shape,
        // head/batch strides, loop bounds, precision, memory and determinism bugs.
        {"prefill", 2, 3, 7, 7, 5, 3, 0, 1, {}, 0},
        // A KV-cache decode step: the query is at position Tk-1, not 0.
        {"decode", 1, 2, 1, 9, 4, 4, 8, 1, {}, 0},
        // Rows in the middle of a longer key buffer: q_offset + Tq != Tk.
        {"general_offset", 1, 1, 3, 10, 4, 2, 2, 1, {}, 0},
        // Padding that differs per sequence, with an empty sequence (a row with no visible key).
        {"padding", 3, 2, 4, 6, 3, 5, 0, 0, {5, 0, 2}, 0},
        // Scores in the thousands: exp overflows without the max subtraction.
        {"large_scores", 1, 1, 4, 6, 16, 2, 0, 0, {}, 1.0f, 10.0f},
        // Non-causal, a long row and head_dim 1: tiles of an online softmax with growing max.
        {"long_row", 1, 1, 2, 13, 1, 2, 0, 0, {}, 2.5f},
        // A long decode step with an odd wide head: 64-key tile edges, more than one 512-key
        // split-K chunk, a 16-lane dot product with a remainder (Dk = 65).
        {"long_decode_wide_head", 1, 1, 1, 600, 65, 3, 599, 1, {}, 0},
    };
}

}  // namespace zoo_test
