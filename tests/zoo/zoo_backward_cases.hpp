// tests/zoo/zoo_backward_cases.hpp — what the tests of the backward pass's zoo share
// (zoo_backward_test.cpp, zoo_backward_mutants_test.cpp): a backward call built from a Spec
// (Case: guarded buffers, every element no row reads NaN, out and lse from the entry's forward),
// float64 gradients by plain loops (float64_backward: from the inputs as stored, with an exact
// softmax, never from the kernel's lse or out), the gap of a kernel's gradients to them and to
// the float64 oracle's bound, and base_is_right(): everything the correct backward must do on a
// case.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"
#include "kernels/registry.hpp"
#include "reference/attention_grad.hpp"
#include "reference/attention_v2.hpp"
#include "tests/zoo/spec_v2.hpp"

namespace zoo_test::backward {

using namespace attncheck;

// Storage of one tensor in a dtype, with kGuard elements before and after the view: a write
// outside the view lands there and is caught.
struct Buffer {
    static constexpr std::int64_t kGuard = 8;
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    std::int64_t elements = 0;   // guards included
    std::vector<std::uint8_t> bytes;
    void resize(std::int32_t t, std::int64_t view_elements, float fill) {
        dtype = t;
        elements = view_elements + 2 * kGuard;
        bytes.assign(std::size_t(elements) * dtype_size(t), 0);
        for (std::int64_t x = 0; x < elements; ++x) store_element(dtype, bytes.data(), x, fill);
    }
    void* view() { return bytes.data() + kGuard * std::int64_t(dtype_size(dtype)); }
};

// The gradients in logical order: dq rows (b, h, i), dk / dv rows (b, hk, j) over kv_rows_of(p, b).
struct Grads {
    int rc = 0;
    std::vector<double> dq, dk, dv;
};

// The buffers of a Spec, the problem (with out and lse from the entry's forward) and the grads.
struct Case {
    Spec spec;
    int B;
    SequenceArrays arrays;
    std::vector<float> lse, sinks, dsinks;
    Buffer q, k, v, out, dout, dq, dk, dv;
    attncheck_problem_v2 p{};
    attncheck_grads_v2 g{};
    std::vector<std::int64_t> dq_at, dk_at, dv_at;  // view offsets of the logical gradient elements

    Case(const Spec& s, attncheck_kernel_v2_fn forward) : spec(s), B(int(s.keys.size())) {
        REQUIRE(s.mode != Mode::paged);  // a backward takes no block table
        REQUIRE(s.lse);                  // and reads the forward's lse
        std::mt19937 rng(s.seed);
        std::uniform_real_distribution<float> uni(-s.magnitude, s.magnitude);
        const Extents e = set_problem(s, arrays, p);
        const auto bind = [&](attncheck_tensor_v2& t, Buffer& buf, Layout layout, std::int64_t n0, std::int64_t H,
                              std::int64_t T, std::int64_t D, float fill) {
            buf.resize(s.dtype, strides_of(layout, n0, H, T, D, t.stride), fill);
            t.data = buf.view();
        };
        // Every element no row reads (gaps, padding rows, keys no row sees) is NaN, or in k and v
        // the Spec's padding.
        bind(p.q, q, s.layout, e.q_n0, s.Hq, e.q_T, s.Dk, kNaN);
        bind(p.k, k, s.layout, e.k_n0, s.Hk, e.k_T, s.Dk, s.padding);
        bind(p.v, v, s.layout, e.k_n0, s.Hk, e.k_T, s.Dv, s.padding);
        bind(p.out, out, s.layout, e.q_n0, s.Hq, e.q_T, s.Dv, kNaN);
        bind(g.dout, dout, s.grad_layout, e.q_n0, s.Hq, e.q_T, s.Dv, kNaN);
        bind(g.dq, dq, s.grad_layout, e.q_n0, s.Hq, e.q_T, s.Dk, kNaN);
        bind(g.dk, dk, s.grad_layout, e.k_n0, s.Hk, e.k_T, s.Dk, kNaN);
        bind(g.dv, dv, s.grad_layout, e.k_n0, s.Hk, e.k_T, s.Dv, kNaN);
        g.struct_size = sizeof(attncheck_grads_v2);
        if (!s.sinks.empty()) {
            sinks = s.sinks, dsinks.assign(s.sinks.size(), kNaN);
            p.sinks = sinks.data(), g.dsinks = dsinks.data();
        }
        lse.assign(std::size_t(e.lse_elements(s.Hq)), kNaN);
        p.lse = lse.data();

        for (int b = 0; b < B; ++b)
            for (int h = 0; h < s.Hq; ++h)
                for (int i = 0; i < q_len_of(p, b); ++i) {
                    for (int c = 0; c < s.Dk; ++c) store_element(s.dtype, q.view(), q_offset_v2(p, p.q, b, h, i, c), uni(rng));
                    for (int c = 0; c < s.Dv; ++c)
                        store_element(s.dtype, dout.view(), q_offset_v2(p, g.dout, b, h, i, c), uni(rng));
                }
        fill_keys(p, s.padding, [&] { return uni(rng); });
        REQUIRE(forward(&p) == ATTNCHECK_OK);

        for (int b = 0; b < B; ++b) {
            for (int h = 0; h < s.Hq; ++h)
                for (int i = 0; i < q_len_of(p, b); ++i)
                    for (int c = 0; c < s.Dk; ++c) dq_at.push_back(q_offset_v2(p, g.dq, b, h, i, c));
            for (int hk = 0; hk < s.Hk; ++hk)
                for (int j = 0; j < kv_rows_of(p, b); ++j) {
                    for (int c = 0; c < s.Dk; ++c) dk_at.push_back(kv_offset_v2(p, g.dk, b, hk, j, c));
                    for (int c = 0; c < s.Dv; ++c) dv_at.push_back(kv_offset_v2(p, g.dv, b, hk, j, c));
                }
        }
    }
    Case(const Case&) = delete;

    // The gradients `fn` writes into dq, dk and dv poisoned with NaN.
    Grads run(attncheck_kernel_v2_backward_fn fn) {
        for (Buffer* buf : {&dq, &dk, &dv}) buf->resize(spec.dtype, buf->elements - 2 * Buffer::kGuard, kNaN);
        Grads r;
        r.rc = fn(&p, &g);
        const auto read = [&](Buffer& buf, const std::vector<std::int64_t>& at) {
            std::vector<double> x;
            for (std::int64_t o : at) x.push_back(load_element(spec.dtype, buf.view(), o));
            return x;
        };
        r.dq = read(dq, dq_at), r.dk = read(dk, dk_at), r.dv = read(dv, dv_at);
        return r;
    }
};

// dq, dk and dv in float64 straight from kernel_abi_v2.h's formulas, on the stored inputs: the
// softmax computed exactly (max-subtracted), D = sum_j P_ij dP_ij, nothing read from out or lse.
inline Grads float64_backward(Case& c) {
    const attncheck_problem_v2& p = c.p;
    const auto at = [&](Buffer& buf, std::int64_t o) { return double(load_element(p.dtype, buf.view(), o)); };
    Grads r;
    r.dq.assign(c.dq_at.size(), 0.0), r.dk.assign(c.dk_at.size(), 0.0), r.dv.assign(c.dv_at.size(), 0.0);
    std::size_t q_first = 0, kv_first = 0;  // logical rows of the sequence's first (h, i) / (hk, j)
    for (int b = 0; b < p.batch; ++b) {
        const int Tq = q_len_of(p, b), rows = kv_rows_of(p, b);
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = kv_head_of(p, h);
            for (int i = 0; i < Tq; ++i) {
                std::vector<int> js;
                std::vector<double> s, t, dP;
                for (int j = 0; j < kv_len_of(p, b); ++j) {
                    if (!visible_v2(p, b, i, j)) continue;
                    double dot = 0, dov = 0;
                    for (int x = 0; x < p.head_dim; ++x)
                        dot += at(c.q, q_offset_v2(p, p.q, b, h, i, x)) * at(c.k, kv_offset_v2(p, p.k, b, hk, j, x));
                    for (int x = 0; x < p.value_dim; ++x)
                        dov += at(c.dout, q_offset_v2(p, c.g.dout, b, h, i, x)) * at(c.v, kv_offset_v2(p, p.v, b, hk, j, x));
                    double sc = double(p.scale) * dot, th = 0;
                    if (p.softcap > 0) th = std::tanh(sc / p.softcap), sc = p.softcap * th;
                    if (p.alibi_slopes) sc -= double(p.alibi_slopes[h]) * double(std::int64_t(p.q_pos[b]) + i - j);
                    js.push_back(j), s.push_back(sc), t.push_back(th), dP.push_back(dov);
                }
                if (js.empty()) continue;  // dq 0, nothing into dk / dv
                const double m = *std::max_element(s.begin(), s.end());
                double sum = 0, D = 0;
                for (double x : s) sum += std::exp(x - m);
                std::vector<double> P;
                for (std::size_t n = 0; n < js.size(); ++n) P.push_back(std::exp(s[n] - m) / sum), D += P[n] * dP[n];
                const std::size_t qrow = q_first + std::size_t(h * Tq + i);
                for (std::size_t n = 0; n < js.size(); ++n) {
                    const int j = js[n];
                    const double dS = P[n] * (dP[n] - D) * (p.softcap > 0 ? 1 - t[n] * t[n] : 1.0);
                    const std::size_t krow = kv_first + std::size_t(hk * rows + j);
                    for (int x = 0; x < p.head_dim; ++x) {
                        r.dq[qrow * p.head_dim + x] += p.scale * dS * at(c.k, kv_offset_v2(p, p.k, b, hk, j, x));
                        r.dk[krow * p.head_dim + x] += p.scale * dS * at(c.q, q_offset_v2(p, p.q, b, h, i, x));
                    }
                    for (int x = 0; x < p.value_dim; ++x)
                        r.dv[krow * p.value_dim + x] += P[n] * at(c.dout, q_offset_v2(p, c.g.dout, b, h, i, x));
                }
            }
        }
        q_first += std::size_t(p.q_heads * Tq), kv_first += std::size_t(p.kv_heads * rows);
    }
    return r;
}

// The worst error of `got` against the float64 gradients, relative to the largest float64
// gradient of the same tensor (dq, dk and dv each). Infinite where an element is not finite, or
// is not exactly 0 where the float64 gradient is 0 by the contract (an empty row's dq, the dk / dv
// of padding and of keys no row sees).
struct Gap {
    double worst = 0;
    std::string where;  // "dk[17] = -0.25, float64 0.125 (gradient scale 1.5)"
};
inline Gap gap(const Grads& got, const Grads& want, const std::vector<bool>& zero_dq, const std::vector<bool>& zero_kv_dk,
        const std::vector<bool>& zero_kv_dv) {
    Gap g;
    const auto one = [&](const char* name, const std::vector<double>& a, const std::vector<double>& w,
                         const std::vector<bool>& zero) {
        REQUIRE(a.size() == w.size());
        double scale = 0;
        for (double x : w) scale = std::max(scale, std::fabs(x));
        if (scale == 0) scale = 1;
        for (std::size_t x = 0; x < a.size(); ++x) {
            double e = std::fabs(a[x] - w[x]) / scale;
            if (!std::isfinite(a[x]) || (zero[x] && a[x] != 0)) e = INFINITY;
            if (e > g.worst || g.where.empty()) {
                g.worst = e;
                g.where = std::string(name) + "[" + std::to_string(x) + "] = " + std::to_string(a[x]) + ", float64 " +
                          std::to_string(w[x]) + " (gradient scale " + std::to_string(scale) + ")";
            }
        }
    };
    one("dq", got.dq, want.dq, zero_dq);
    one("dk", got.dk, want.dk, zero_kv_dk);
    one("dv", got.dv, want.dv, zero_kv_dv);
    return g;
}

// Which logical gradient elements the contract makes exactly 0.
struct Zeros {
    std::vector<bool> dq, dk, dv;
};
inline Zeros contract_zeros(const Case& c) {
    const attncheck_problem_v2& p = c.p;
    Zeros z;
    for (int b = 0; b < p.batch; ++b) {
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, b); ++i) {
                bool empty = true;
                for (int j = 0; j < kv_len_of(p, b) && empty; ++j) empty = !visible_v2(p, b, i, j);
                z.dq.insert(z.dq.end(), std::size_t(p.head_dim), empty);
            }
        for (int hk = 0; hk < p.kv_heads; ++hk)
            for (int j = 0; j < kv_rows_of(p, b); ++j) {
                const bool unseen = j >= kv_len_of(p, b) || !key_seen(p, b, j);
                z.dk.insert(z.dk.end(), std::size_t(p.head_dim), unseen);
                z.dv.insert(z.dv.end(), std::size_t(p.value_dim), unseen);
            }
    }
    return z;
}

// The base's tolerance, relative to the gradient scale: float32 accumulation and the forward's
// float32 lse (f32); with f16 / bf16 the gradients' own rounding (u = 2^-11, 2^-8) and that of
// out, which D reads.
inline double tolerance(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F32 ? 1e-4 : dtype == ATTNCHECK_DTYPE_F16 ? 4e-3 : 3e-2;
}

inline const KernelEntry& entry(const std::string& name) {
    const KernelEntry* e = find_kernel(name);
    REQUIRE(e != nullptr);
    REQUIRE(e->backward_v2 != nullptr);
    REQUIRE(e->fn_v2 != nullptr);
    return *e;
}

// The largest |got - oracle| / bound over dq, dk and dv, against the float64 oracle of the
// backward pass (reference/attention_grad.hpp): its bound holds for any correct float32
// evaluation from the call's out and lse, so a correct kernel stays below 1. An element with
// bound 0 must be exact; a NaN counts as infinite.
inline double oracle_ratio(const Case& c, const Grads& got) {
    const reference::GradOracle o = reference::attention_grad_oracle(c.p, c.g.dout);
    double worst = 0;
    const auto scan = [&](const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& bound) {
        REQUIRE(x.size() == y.size());
        for (std::size_t e = 0; e < x.size(); ++e) {
            const double d = std::fabs(x[e] - y[e]);
            worst = std::max(worst, d == 0 ? 0.0 : bound[e] > 0 && !std::isnan(d) ? d / bound[e] : INFINITY);
        }
    };
    scan(got.dq, o.dq, o.dq_bound);
    scan(got.dk, o.dk, o.dk_bound);
    scan(got.dv, o.dv, o.dv_bound);
    return worst;
}

// Every byte of a buffer outside the logical elements `at` (gaps, padding, the guards) is as the
// poisoned copy `before` had it.
inline bool untouched_elsewhere(const Buffer& after, const std::vector<std::uint8_t>& before, const std::vector<std::int64_t>& at) {
    std::vector<bool> logical(std::size_t(after.elements), false);
    for (std::int64_t o : at) logical[std::size_t(o + Buffer::kGuard)] = true;
    const std::size_t es = dtype_size(after.dtype);
    for (std::int64_t x = 0; x < after.elements; ++x)
        if (!logical[std::size_t(x)] &&
            std::memcmp(after.bytes.data() + std::size_t(x) * es, before.data() + std::size_t(x) * es, es) != 0)
            return false;
    return true;
}

// The base on c: OK, within tolerance of the float64 gradients and within the float64 oracle's
// bound, exact zeros where the contract says so, nothing written outside dq / dk / dv's elements,
// inputs unchanged. And the test's own float64 loops agree with the reference backward.
inline void base_is_right(Case& c) {
    const KernelEntry& base = entry("bwd_naive");
    const std::vector<std::uint8_t> q = c.q.bytes, k = c.k.bytes, v = c.v.bytes, out = c.out.bytes, dout = c.dout.bytes;
    const std::vector<float> lse = c.lse;
    const Grads got = c.run(base.backward_v2);
    INFO("bwd_naive on " << describe_v2(c.p));
    REQUIRE(got.rc == ATTNCHECK_OK);
    Buffer poisoned;  // dq, dk, dv as run() poisoned them: NaN everywhere
    for (auto [buf, at] : {std::pair{&c.dq, &c.dq_at}, std::pair{&c.dk, &c.dk_at}, std::pair{&c.dv, &c.dv_at}}) {
        poisoned.resize(c.spec.dtype, buf->elements - 2 * Buffer::kGuard, kNaN);
        CHECK(untouched_elsewhere(*buf, poisoned.bytes, *at));
    }
    CHECK((c.q.bytes == q && c.k.bytes == k && c.v.bytes == v && c.out.bytes == out && c.dout.bytes == dout));
    CHECK(std::memcmp(c.lse.data(), lse.data(), lse.size() * sizeof(float)) == 0);
    const Zeros z = contract_zeros(c);
    const Grads want = float64_backward(c);
    const Gap g = gap(got, want, z.dq, z.dk, z.dv);
    INFO("worst: " << g.where);
    CHECK(g.worst <= tolerance(c.p.dtype));
    CHECK(oracle_ratio(c, got) < 1.0);
    // The reference backward is the exact gradients rounded to the dtype: within half an ulp of
    // the loops here (their float64 sums aside).
    const Grads reference = c.run(attncheck_reference_kernel_v2_backward);
    REQUIRE(reference.rc == ATTNCHECK_OK);
    CHECK(gap(reference, want, z.dq, z.dk, z.dv).worst <= unit_roundoff(c.p.dtype) + 1e-6);
}

}  // namespace zoo_test::backward
