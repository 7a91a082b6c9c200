// tests/zoo/correct_backward_test.cpp — the false-alarm side of the backward's bound
// (docs/numerics.md, section 5): correct backward kernels that evaluate the gradients in
// float32 in the ways real ones do, each held to the gradient oracle's bound on the suite's own
// backward cases and passing every gradient property.
//
//   stored_p   the whole probability matrix of a (sequence, head) by a softmax of its own (the
//              lse it is given is not used), D = sum_j P_j dP_j, then the gradients as matrix
//              products, keys in descending order (the "materialize P" backward of eager code)
//   atomic_dq  FlashAttention-2's split over 16-key blocks in parallel: each block adds its
//              contributions to dq, and to the dk / dv of its kv head (one task per query head),
//              with `#pragma omp atomic`: the order of the additions varies from run to run, so
//              it declares deterministic_backward=no
//   bwd_naive  the zoo's base (kernels/zoo_backward.cpp): one row at a time, dq carried over
//              64-key blocks
//   optimized_v2's backward (optimized/attention_backward.cpp): 64 x 64 blocks, the forward's
//              micro-kernels, P from lse, D from out
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq(b) / Tk(b), Dk, Dv.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "attncheck/tolerance.hpp"
#include "kernels/registry.hpp"
#include "properties/gradients.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/property_runs.hpp"
#include "properties/runner.hpp"
#include "tests/properties/ci_params.hpp"
#include "tests/zoo/ratio_cases.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::properties;

// Where the rows and key rows of a call are, in the gradient oracle's logical order.
struct Rows {
    std::vector<std::size_t> first_row, first_key;
    explicit Rows(const attncheck_problem_v2& p) : first_row{0}, first_key{0} {
        for (int b = 0; b < p.batch; ++b) {
            first_row.push_back(first_row.back() + std::size_t(p.q_heads) * std::size_t(q_len_of(p, b)));
            first_key.push_back(first_key.back() + std::size_t(p.kv_heads) * std::size_t(kv_rows_of(p, b)));
        }
    }
    std::size_t row(const attncheck_problem_v2& p, int b, int h, int i) const {
        return first_row[std::size_t(b)] + std::size_t(h) * std::size_t(q_len_of(p, b)) + std::size_t(i);
    }
    std::size_t key(const attncheck_problem_v2& p, int b, int hk, int j) const {
        return first_key[std::size_t(b)] + std::size_t(hk) * std::size_t(kv_rows_of(p, b)) + std::size_t(j);
    }
};

float at(const attncheck_problem_v2& p, const attncheck_tensor_v2& t, std::int64_t offset) {
    return load_element(p.dtype, t.data, offset);
}

// The score of (b, h, i, j) in float32, and softcap's derivative factor 1 - t^2.
float score(const attncheck_problem_v2& p, int b, int h, int i, int j, float& dcap) {
    const int hk = kv_head_of(p, h);
    float dot = 0;
    for (int c = 0; c < p.head_dim; ++c)
        dot += at(p, p.q, q_offset_v2(p, p.q, b, h, i, c)) * at(p, p.k, kv_offset_v2(p, p.k, b, hk, j, c));
    float s = p.scale * dot;
    dcap = 1.0f;
    if (p.softcap > 0) {
        const float t = std::tanh(s / p.softcap);
        s = p.softcap * t;
        dcap = 1.0f - t * t;
    }
    if (p.alibi_slopes) s -= p.alibi_slopes[h] * float(p.q_pos[b] + i - j);
    return s;
}

// dq, dk, dv (logical order) stored at the ABI's offsets: every k / v row, 0 where nothing reached.
void store(const attncheck_problem_v2& p, const attncheck_grads_v2& g, const Rows& rows, const std::vector<float>& dq,
           const std::vector<float>& dk, const std::vector<float>& dv) {
    const std::size_t Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b) {
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, b); ++i)
                for (int c = 0; c < p.head_dim; ++c)
                    store_element(p.dtype, g.dq.data, q_offset_v2(p, g.dq, b, h, i, c), dq[rows.row(p, b, h, i) * Dk + std::size_t(c)]);
        for (int hk = 0; hk < p.kv_heads; ++hk)
            for (int j = 0; j < kv_rows_of(p, b); ++j) {
                for (int c = 0; c < p.head_dim; ++c)
                    store_element(p.dtype, g.dk.data, kv_offset_v2(p, g.dk, b, hk, j, c), dk[rows.key(p, b, hk, j) * Dk + std::size_t(c)]);
                for (int c = 0; c < p.value_dim; ++c)
                    store_element(p.dtype, g.dv.data, kv_offset_v2(p, g.dv, b, hk, j, c), dv[rows.key(p, b, hk, j) * Dv + std::size_t(c)]);
            }
    }
}

// P, dP and D of each (sequence, head) whole, then the gradients keys last to first.
void stored_p(const attncheck_problem_v2& p, const attncheck_grads_v2& g, const Rows& rows, std::vector<float>& dq,
              std::vector<float>& dk, std::vector<float>& dv) {
    const std::size_t Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = kv_head_of(p, h), Tq = q_len_of(p, b), Tk = kv_len_of(p, b);
            // P [Tq, Tk] by a softmax of its own; dP = dout V^T; D = rowsum(P * dP).
            std::vector<float> P(std::size_t(Tq) * std::size_t(Tk), 0.0f), dP(P.size(), 0.0f), cap(P.size(), 1.0f);
            for (int i = 0; i < Tq; ++i) {
                float m = -std::numeric_limits<float>::infinity(), z = 0;
                for (int j = 0; j < Tk; ++j)
                    if (visible_v2(p, b, i, j)) m = std::max(m, score(p, b, h, i, j, cap[std::size_t(i * Tk + j)]));
                for (int j = 0; j < Tk; ++j)
                    if (visible_v2(p, b, i, j)) z += (P[std::size_t(i * Tk + j)] = std::exp(score(p, b, h, i, j, cap[std::size_t(i * Tk + j)]) - m));
                for (int j = 0; j < Tk; ++j) {
                    if (!visible_v2(p, b, i, j)) continue;
                    P[std::size_t(i * Tk + j)] /= z;
                    float x = 0;
                    for (int c = 0; c < p.value_dim; ++c)
                        x += at(p, g.dout, q_offset_v2(p, g.dout, b, h, i, c)) * at(p, p.v, kv_offset_v2(p, p.v, b, hk, j, c));
                    dP[std::size_t(i * Tk + j)] = x;
                }
            }
            for (int i = 0; i < Tq; ++i) {
                float D = 0;
                for (int j = 0; j < Tk; ++j) D += P[std::size_t(i * Tk + j)] * dP[std::size_t(i * Tk + j)];
                for (int j = Tk - 1; j >= 0; --j) {  // keys in descending order
                    if (!visible_v2(p, b, i, j)) continue;
                    const std::size_t e = std::size_t(i * Tk + j), r = rows.row(p, b, h, i), kr = rows.key(p, b, hk, j);
                    const float dS = P[e] * (dP[e] - D) * cap[e];
                    for (int c = 0; c < p.head_dim; ++c) {
                        dq[r * Dk + std::size_t(c)] += p.scale * dS * at(p, p.k, kv_offset_v2(p, p.k, b, hk, j, c));
                        dk[kr * Dk + std::size_t(c)] += p.scale * dS * at(p, p.q, q_offset_v2(p, p.q, b, h, i, c));
                    }
                    for (int c = 0; c < p.value_dim; ++c)
                        dv[kr * Dv + std::size_t(c)] += P[e] * at(p, g.dout, q_offset_v2(p, g.dout, b, h, i, c));
                }
            }
        }
}

// 16-key blocks in parallel, each adding into dq, dk and dv with atomics.
void atomic_dq(const attncheck_problem_v2& p, const attncheck_grads_v2& g, const Rows& rows, std::vector<float>& dq,
               std::vector<float>& dk, std::vector<float>& dv) {
    const std::size_t Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    constexpr int kBlock = 16;
    struct Task {
        int b, h, j0;
    };
    std::vector<Task> tasks;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int j0 = 0; j0 < kv_len_of(p, b); j0 += kBlock) tasks.push_back({b, h, j0});
#pragma omp parallel for schedule(dynamic, 1)
    for (std::size_t n = 0; n < tasks.size(); ++n) {
        const auto [b, h, j0] = tasks[n];
        const int hk = kv_head_of(p, h), j1 = std::min(j0 + kBlock, kv_len_of(p, b));
        for (int i = 0; i < q_len_of(p, b); ++i) {
            const float lse = p.lse[lse_offset_v2(p, b, h, i)];
            float D = 0;
            bool any = false;
            for (int j = j0; j < j1; ++j) any = any || visible_v2(p, b, i, j);
            if (!any) continue;
            for (int c = 0; c < p.value_dim; ++c)
                D += at(p, g.dout, q_offset_v2(p, g.dout, b, h, i, c)) * at(p, p.out, q_offset_v2(p, p.out, b, h, i, c));
            const std::size_t r = rows.row(p, b, h, i);
            for (int j = j0; j < j1; ++j) {
                if (!visible_v2(p, b, i, j)) continue;
                float dcap = 1;
                const float P = std::exp(score(p, b, h, i, j, dcap) - lse);
                float dP = 0;
                for (int c = 0; c < p.value_dim; ++c)
                    dP += at(p, g.dout, q_offset_v2(p, g.dout, b, h, i, c)) * at(p, p.v, kv_offset_v2(p, p.v, b, hk, j, c));
                const float dS = P * (dP - D) * dcap;
                const std::size_t kr = rows.key(p, b, hk, j);
                for (int c = 0; c < p.head_dim; ++c) {
                    const float add_q = p.scale * dS * at(p, p.k, kv_offset_v2(p, p.k, b, hk, j, c));
                    const float add_k = p.scale * dS * at(p, p.q, q_offset_v2(p, p.q, b, h, i, c));
#pragma omp atomic
                    dq[r * Dk + std::size_t(c)] += add_q;
#pragma omp atomic
                    dk[kr * Dk + std::size_t(c)] += add_k;
                }
                for (int c = 0; c < p.value_dim; ++c) {
                    const float add_v = P * at(p, g.dout, q_offset_v2(p, g.dout, b, h, i, c));
#pragma omp atomic
                    dv[kr * Dv + std::size_t(c)] += add_v;
                }
            }
        }
    }
}

// The float32 gradients of a design, added into dq, dk, dv (the oracle's logical order, zeroed).
using AddGradients = void (*)(const attncheck_problem_v2&, const attncheck_grads_v2&, const Rows&, std::vector<float>& dq,
                              std::vector<float>& dk, std::vector<float>& dv);

// The backward entry point of a design: refuses a malformed call, and stores what `add` computes.
template <AddGradients add>
int backward(const attncheck_problem_v2* pp, const attncheck_grads_v2* gg) {
    if (!pp || !gg || !grads_v2_error(*pp, *gg).empty()) return ATTNCHECK_UNSUPPORTED;
    const attncheck_problem_v2& p = *pp;
    const Rows rows(p);
    const std::size_t Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    std::vector<float> dq(rows.first_row.back() * Dk), dk(rows.first_key.back() * Dk), dv(rows.first_key.back() * Dv);
    add(p, *gg, rows, dq, dk, dv);
    store(p, *gg, rows, dq, dk, dv);
    return ATTNCHECK_OK;
}

struct Candidate {
    const char* name;
    attncheck_kernel_v2_backward_fn fn;
    const char* declaration;
};

std::vector<Candidate> candidates() {
    return {{"stored_p", backward<stored_p>, ""},
            {"atomic_dq", backward<atomic_dq>, "deterministic_backward=no"},
            {"bwd_naive", find_kernel("bwd_naive")->backward_v2, ""},
            {"optimized_v2", attncheck_optimized_kernel_v2_backward, ""}};
}

KernelUnderTest under_test(const Candidate& k) {
    KernelUnderTest u;
    u.name = k.name;
    u.fn_v2 = attncheck_reference_kernel_v2;
    u.declaration = KernelDeclaration::parse(k.declaration);
    set_backward(u, k.fn);
    return u;
}

// The largest |candidate - oracle| / bound over dq, dk, dv of one call.
double worst_ratio(const GradCall& r) {
    double worst = 0;
    for (const auto& [x, y, bound] : {std::tuple{&r.dq, &r.oracle.dq, &r.oracle.dq_bound}, std::tuple{&r.dk, &r.oracle.dk, &r.oracle.dk_bound},
                                      std::tuple{&r.dv, &r.oracle.dv, &r.oracle.dv_bound}})
        worst = std::max(worst, check_against_bound(*x, *y, *bound).worst_ratio);
    return worst;
}

}  // namespace

TEST_CASE("correct backward kernels of four designs pass every gradient property", "[zoo][backward]") {
    const RunParams params = test::ci_params(40);
    for (const Candidate& k : candidates()) {
        const KernelUnderTest u = checked(under_test(k));
        for (const KernelProperty& prop : kernel_properties()) {
            if (!needs_backward(prop)) continue;
            const PropertyResult r = run_kernel_property(prop, u, params);
            INFO(k.name << " / " << prop.name << ": " << to_string(r.status) << "\n" << r.counterexample << r.message);
            CHECK(r.status == Status::pass);
        }
    }
}

TEST_CASE("correct backward kernels stay well within the bound on the suite's backward cases", "[zoo][backward][bound]") {
    // The worst test ratio of each design over one slice of generated cases, float32 apart from
    // float16 / bfloat16 (where rounding the gradients to the dtype alone uses up to all of it).
    constexpr int kCases = 60;
    for (const Candidate& k : candidates()) {
        const KernelUnderTest u = checked(under_test(k));
        double f32 = 0, narrow = 0;
        for (int n = 0; n < kCases; ++n) {
            const KernelCase c = zoo::draw_backward_case(7, std::uint64_t(n));
            const GradCall r = call_backward(u, c, fill_inputs(c), dout_of(c));
            REQUIRE(r.rc == 0);
            const double ratio = worst_ratio(r);
            INFO(k.name << " case " << n << ": " << describe(c) << " ratio " << ratio);
            CHECK(ratio <= 1.0);
            (c.dtype == ATTNCHECK_DTYPE_F32 ? f32 : narrow) = std::max(c.dtype == ATTNCHECK_DTYPE_F32 ? f32 : narrow, ratio);
        }
        WARN(k.name << ": the largest test ratio over " << kCases << " cases: float32 " << f32 << ", f16/bf16 " << narrow);
        CHECK(f32 < 0.25);
    }
}
