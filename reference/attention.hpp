// reference/attention.hpp — masked scaled dot-product attention, written to be read.
//
// This is the specification in code of docs/spec/KERNEL_ABI.md's result and of the
// attention inside every decoder layer (docs/spec/MODEL.md). It is templated on the scalar:
// T = double is the oracle every float32 candidate is measured against (NUMERICS.md), T = float
// is the float32 baseline whose error sets the tolerance.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
//
// The masking rule is one function, key_visible(), used by the per-head attention of the reference
// decoder and by the ABI-shaped entry point below (the tests' float32 baseline and float64 oracle):
// visible_v2() of attncheck/problem_v2.hpp, which the reference kernels run, on version 1's problems.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "attncheck/kernel_abi.h"

namespace attncheck::reference {

// Key j is visible to query row i (absolute position q_offset + i) when it is not padding
// (j < valid_len) and, for causal attention, not in the query's future (j <= q_offset + i).
inline bool key_visible(std::int64_t i, std::int64_t j, std::int64_t q_offset, bool causal,
                        std::int64_t valid_len) {
    if (j >= valid_len) return false;
    if (causal && j > q_offset + i) return false;
    return true;
}

// One head: q [Tq, Dk], k [Tk, Dk], v [Tk, Dv] -> out [Tq, Dv].
// scores = scale * q k^T; masked entries are -inf; P = softmax(scores) row by row with the
// row maximum subtracted first (so exp never overflows); out = P v. A row with no visible key
// has P = 0 and out = 0, never NaN. When probs is given, it receives P [Tq, Tk], masked
// entries exactly 0.
template <class T>
xt::xtensor<T, 2> attend_head(const xt::xtensor<T, 2>& q, const xt::xtensor<T, 2>& k,
                              const xt::xtensor<T, 2>& v, std::int64_t q_offset, bool causal,
                              std::int64_t valid_len, T scale,
                              xt::xtensor<T, 2>* probs = nullptr) {
    const std::size_t Tq = q.shape(0), Tk = k.shape(0), Dk = q.shape(1), Dv = v.shape(1);
    const T neg_inf = -std::numeric_limits<T>::infinity();

    xt::xtensor<T, 2> scores = xt::zeros<T>({Tq, Tk});  // [Tq, Tk]
    for (std::size_t i = 0; i < Tq; ++i)
        for (std::size_t j = 0; j < Tk; ++j) {
            if (!key_visible(std::int64_t(i), std::int64_t(j), q_offset, causal, valid_len)) {
                scores(i, j) = neg_inf;
                continue;
            }
            T dot = 0;
            for (std::size_t c = 0; c < Dk; ++c) dot += q(i, c) * k(j, c);
            scores(i, j) = scale * dot;
        }

    xt::xtensor<T, 2> p = xt::zeros<T>({Tq, Tk});  // [Tq, Tk]
    for (std::size_t i = 0; i < Tq; ++i) {
        T row_max = neg_inf;
        for (std::size_t j = 0; j < Tk; ++j) row_max = std::max(row_max, scores(i, j));
        if (row_max == neg_inf) continue;  // no visible key: the row stays all zeros
        T sum = 0;
        for (std::size_t j = 0; j < Tk; ++j) {
            p(i, j) = std::exp(scores(i, j) - row_max);  // exp(-inf) == 0 exactly
            sum += p(i, j);
        }
        for (std::size_t j = 0; j < Tk; ++j) p(i, j) /= sum;
    }

    xt::xtensor<T, 2> out = xt::zeros<T>({Tq, Dv});  // [Tq, Dv]
    for (std::size_t i = 0; i < Tq; ++i)
        for (std::size_t j = 0; j < Tk; ++j) {
            if (p(i, j) == T(0)) continue;
            for (std::size_t c = 0; c < Dv; ++c) out(i, c) += p(i, j) * v(j, c);
        }
    if (probs) *probs = std::move(p);
    return out;
}

// The whole ABI problem in precision T: float32 inputs in the ABI's layouts, out [B, H, Tq, Dv]
// in T. The caller has checked the problem's shape fields (see problem_error()).
template <class T>
std::vector<T> attention(const attncheck_problem& p, const float* q, const float* k,
                         const float* v) {
    const std::size_t B = std::size_t(p.batch), H = std::size_t(p.heads), Tq = std::size_t(p.q_len),
                      Tk = std::size_t(p.kv_len), Dk = std::size_t(p.head_dim),
                      Dv = std::size_t(p.value_dim);
    std::vector<T> out(B * H * Tq * Dv);
    for (std::size_t b = 0; b < B; ++b) {
        const std::int64_t valid = p.kv_valid_len ? std::int64_t(p.kv_valid_len[b]) : std::int64_t(Tk);
        for (std::size_t h = 0; h < H; ++h) {
            const std::size_t bh = b * H + h;
            xt::xtensor<T, 2> qh = xt::cast<T>(xt::adapt(q + bh * Tq * Dk, Tq * Dk, xt::no_ownership(),
                                                         std::vector<std::size_t>{Tq, Dk}));
            xt::xtensor<T, 2> kh = xt::cast<T>(xt::adapt(k + bh * Tk * Dk, Tk * Dk, xt::no_ownership(),
                                                         std::vector<std::size_t>{Tk, Dk}));
            xt::xtensor<T, 2> vh = xt::cast<T>(xt::adapt(v + bh * Tk * Dv, Tk * Dv, xt::no_ownership(),
                                                         std::vector<std::size_t>{Tk, Dv}));
            xt::xtensor<T, 2> oh = attend_head<T>(qh, kh, vh, p.q_offset, p.causal != 0, valid, T(p.scale));
            std::copy(oh.begin(), oh.end(), out.begin() + std::ptrdiff_t(bh * Tq * Dv));
        }
    }
    return out;
}

}  // namespace attncheck::reference
