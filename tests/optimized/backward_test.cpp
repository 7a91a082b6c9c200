// tests/optimized/backward_test.cpp — attncheck_optimized_kernel_v2_backward (the backward pass of
// kernel ABI version 2, attncheck_grads_v2) against a float64 evaluation of the ABI's formulas
// written here, plus the exact properties it promises.
//
// Accuracy: dq, dk and dv from the same inputs the kernel reads (q, k, v, dout and the forward's
// out and lse, all as stored, so in their dtype), in float64: every element within kTolerance
// of its tensor's scale (the largest sum of the absolute values of an element's terms), plus
// the rounding of the result to the dtype.
//
// Against the suite's own oracle (reference/attention_grad.hpp): every element within its
// a-priori bound, and within kTolerance (+ the dtype's rounding) of the reference backward kernel.
//
// Exact properties (bitwise): NaN wherever the kernel must not read (k / v rows past kv_lens,
// keys no row sees, q and dout of rows that see no key) gives the bits of zeros there; inputs
// are left unchanged; keys no row sees, padding rows and rows that see no key get exactly +0;
// nothing outside dq, dk and dv is written (gappy views); the bits are the same on 1, 2 and 3
// threads and under both work splits (fused, two-phase), and on the AVX-512 and AVX2 paths; a
// block table, a null lse and a malformed grads struct are refused and nothing is written.
//
// Shapes straddle the kernel's 64-row / 64-key blocks (lengths 1, 63, 65, 97, 130, 200, 300) and its
// micro-blocks (head dims 1, 16, 17, 64, 128).
//
// To add a case: append a Case (a SeededSpec of tests/reference/v2_case.hpp) to cases(); its name()
// is its label in every failure.
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, G = Hq / Hk, Tq / Tk = rows / keys of
// a sequence, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_backward.hpp"
#include "optimized/simd_targets.hpp"
#include "reference/attention_grad.hpp"
#include "tests/reference/v2_case.hpp"
#include "thread_count.hpp"

namespace {

using attncheck::kv_len_of;
using attncheck::kv_rows_of;
using attncheck::q_len_of;
using attncheck::visible_v2;
using attncheck::optimized::backward_detail::Schedule;
using attncheck::optimized::backward_detail::set_schedule_for_test;
using namespace attncheck::test;  // V2Case, its specs and buffers (tests/reference/v2_case.hpp)

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = 1536.0f;   // in dq / dk / dv before a call: every element must change
// float32 results against float64: the error, as a fraction of the tensor's largest element.
constexpr double kTolerance = 1e-4;

// A call: the problem (GQA, windows, softcap, ALiBi, varlen, padding, layouts) and its inputs' seed.
using Case = SeededSpec;

// s with head dim Dk and value dim Dv (0: Dk).
Case dims(Case s, int Dk, int Dv = 0) {
    s.head_dim = Dk;
    s.value_dim = Dv ? Dv : Dk;
    return s;
}

// A built call: the problem, the gradients struct and everything they point to. Inputs hold
// values where the kernel may read and `poison` everywhere else; out and lse are the forward's
// (computed here in float64 and rounded as a kernel stores them).
struct Built : V2Case {
    std::string name;
    attncheck_grads_v2 g{};
    Buffer dout, dq, dk, dv;  // laid out as out, q, k and v

    Built(const Case& c, float poison) : V2Case(c.problem(), poison), name(c.name()) {
        dout.resize(c.dtype, out.size(), poison);
        dq.resize(c.dtype, q.size(), kSentinel);
        dk.resize(c.dtype, k.size(), kSentinel);
        dv.resize(c.dtype, v.size(), kSentinel);
        bind_like(g.dout, dout, p.out, out_guard);
        bind_like(g.dq, dq, p.q, 0);
        bind_like(g.dk, dk, p.k, 0);
        bind_like(g.dv, dv, p.v, 0);
        g.struct_size = std::int32_t(sizeof(attncheck_grads_v2));
        // out and lse are inputs here: `poison` and NaN wherever forward() does not write.
        out.fill(poison);
        std::fill(lse.begin(), lse.end(), kNaN);

        // q and dout of a row that sees no key, and k and v of keys no row sees: never read.
        std::mt19937_64 rng(c.seed);
        std::uniform_real_distribution<float> uni(-c.input_scale, c.input_scale);
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        fill_read([&] { return uni(rng); }, true);
        for (int b = 0; b < p.batch; ++b)
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < tq(b); ++i)
                    for (int col = 0; col < p.value_dim && row_sees(b, i); ++col)
                        dout.set(out_guard + attncheck::q_offset_v2(p, g.dout, b, h, i, col), unit(rng));
        forward();
    }

    int kv_head(int h) const { return h / (p.q_heads / p.kv_heads); }
    // Element c of row i (q, out, dout) or of key j (k, v) as stored.
    double in(const attncheck_tensor_v2& t, int b, int h, int i, int c) const {
        return attncheck::load_element(p.dtype, t.data, attncheck::q_offset_v2(p, t, b, h, i, c));
    }
    double kin(const attncheck_tensor_v2& t, int b, int hk, int j, int c) const {
        return attncheck::load_element(p.dtype, t.data, attncheck::kv_offset_v2(p, t, b, hk, j, c));
    }

    // The score of (row i of sequence b, key j) of head h, as the ABI defines it; *tanh_out gets
    // tanh(s0 / softcap) (0 without softcap).
    double score(int b, int h, int i, int j, double* tanh_out) const {
        double s0 = 0;
        for (int c = 0; c < p.head_dim; ++c) s0 += in(p.q, b, h, i, c) * kin(p.k, b, kv_head(h), j, c);
        s0 *= double(p.scale);
        double sc = s0, t = 0;
        if (p.softcap > 0) {
            t = std::tanh(s0 / p.softcap);
            sc = double(p.softcap) * t;
        }
        if (p.alibi_slopes) sc -= double(p.alibi_slopes[h]) * double(std::int64_t(p.q_pos[b]) + i - j);
        if (tanh_out) *tanh_out = t;
        return sc;
    }

    // out and lse in float64, stored as the forward stores them (0 and -inf for a row that sees
    // no key).
    void forward() {
        for (int b = 0; b < p.batch; ++b)
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < q_len_of(p, b); ++i) {
                    std::vector<double> sc(std::size_t(kv_len_of(p, b)), -INFINITY);
                    double m = -INFINITY;
                    for (int j = 0; j < kv_len_of(p, b); ++j)
                        if (visible_v2(p, b, i, j)) m = std::max(m, sc[std::size_t(j)] = score(b, h, i, j, nullptr));
                    double l = 0;
                    std::vector<double> o(std::size_t(p.value_dim), 0.0);
                    for (int j = 0; j < kv_len_of(p, b); ++j) {
                        if (!visible_v2(p, b, i, j)) continue;
                        const double e = std::exp(sc[std::size_t(j)] - m);
                        l += e;
                        for (int c = 0; c < p.value_dim; ++c) o[std::size_t(c)] += e * kin(p.v, b, kv_head(h), j, c);
                    }
                    for (int c = 0; c < p.value_dim; ++c) out.set(out_at(b, h, i, c), l > 0 ? float(o[std::size_t(c)] / l) : 0.0f);
                    lse[std::size_t(out_guard + attncheck::lse_offset_v2(p, b, h, i))] =
                        l > 0 ? float(m + std::log(l)) : -INFINITY;
                }
    }

    int run() { return attncheck_optimized_kernel_v2_backward(&p, &g); }
};

// dq, dk and dv in float64 from the call's stored inputs (the ABI's formulas, with P from the
// given lse and D from the given out), indexed by the elements of the gradient buffers.
struct Truth {
    std::vector<double> dq, dk, dv;
    // The same sums of absolute values (|dS| as P (|dP| + |D|)): the scale of an element's
    // rounding errors, which cancellation can put far above the element itself (a row that sees
    // one key has dS = 0 exactly, from dP - D of two sums of ~1).
    std::vector<double> dq_mag, dk_mag, dv_mag;
};
Truth truth_of(const Built& bt) {
    const attncheck_problem_v2& p = bt.p;
    const attncheck_grads_v2& g = bt.g;
    Truth t;
    t.dq.assign(std::size_t(bt.dq.size()), 0.0);
    t.dk.assign(std::size_t(bt.dk.size()), 0.0);
    t.dv.assign(std::size_t(bt.dv.size()), 0.0);
    t.dq_mag = t.dq, t.dk_mag = t.dk, t.dv_mag = t.dv;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = bt.kv_head(h);
            for (int i = 0; i < q_len_of(p, b); ++i) {
                if (!bt.row_sees(b, i)) continue;
                const double lse = p.lse[attncheck::lse_offset_v2(p, b, h, i)];
                double D = 0;
                for (int c = 0; c < p.value_dim; ++c) D += bt.in(g.dout, b, h, i, c) * bt.in(p.out, b, h, i, c);
                for (int j = 0; j < kv_len_of(p, b); ++j) {
                    if (!visible_v2(p, b, i, j)) continue;
                    double th = 0;
                    const double P = std::exp(bt.score(b, h, i, j, &th) - lse);
                    double dP = 0;
                    for (int c = 0; c < p.value_dim; ++c) dP += bt.in(g.dout, b, h, i, c) * bt.kin(p.v, b, hk, j, c);
                    const double cap = p.softcap > 0 ? 1 - th * th : 1.0;
                    const double dS = P * (dP - D) * cap, dS_mag = P * (std::abs(dP) + std::abs(D)) * cap;
                    const double sc = std::abs(double(p.scale));
                    for (int c = 0; c < p.head_dim; ++c) {
                        const double kc = bt.kin(p.k, b, hk, j, c), qc = bt.in(p.q, b, h, i, c);
                        const auto iq = std::size_t(attncheck::q_offset_v2(p, g.dq, b, h, i, c));
                        const auto ik = std::size_t(attncheck::kv_offset_v2(p, g.dk, b, hk, j, c));
                        t.dq[iq] += double(p.scale) * dS * kc;
                        t.dk[ik] += double(p.scale) * dS * qc;
                        t.dq_mag[iq] += sc * dS_mag * std::abs(kc);
                        t.dk_mag[ik] += sc * dS_mag * std::abs(qc);
                    }
                    for (int c = 0; c < p.value_dim; ++c) {
                        const double d = bt.in(g.dout, b, h, i, c);
                        const auto iv = std::size_t(attncheck::kv_offset_v2(p, g.dv, b, hk, j, c));
                        t.dv[iv] += P * d;
                        t.dv_mag[iv] += P * std::abs(d);
                    }
                }
            }
        }
    return t;
}

// The elements of a gradient buffer that are part of the result, and which of them must be
// exactly +0 (rows that see no key; keys no row sees and padding rows).
struct Elements {
    std::vector<bool> mine, zero;
};
Elements dq_elements(const Built& bt) {
    const attncheck_problem_v2& p = bt.p;
    Elements e{std::vector<bool>(std::size_t(bt.dq.size())), std::vector<bool>(std::size_t(bt.dq.size()))};
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, b); ++i)
                for (int c = 0; c < p.head_dim; ++c) {
                    const std::size_t at = std::size_t(attncheck::q_offset_v2(p, bt.g.dq, b, h, i, c));
                    e.mine[at] = true;
                    e.zero[at] = !bt.row_sees(b, i);
                }
    return e;
}
Elements kv_elements(const Built& bt, const attncheck_tensor_v2& t, const Buffer& buf, int width) {
    const attncheck_problem_v2& p = bt.p;
    Elements e{std::vector<bool>(std::size_t(buf.size())), std::vector<bool>(std::size_t(buf.size()))};
    for (int b = 0; b < p.batch; ++b)
        for (int hk = 0; hk < p.kv_heads; ++hk)
            for (int j = 0; j < kv_rows_of(p, b); ++j)
                for (int c = 0; c < width; ++c) {
                    const std::size_t at = std::size_t(attncheck::kv_offset_v2(p, t, b, hk, j, c));
                    e.mine[at] = true;
                    e.zero[at] = j >= kv_len_of(p, b) || !bt.key_seen(b, j);
                }
    return e;
}

// One gradient tensor against the truth: every element of the result within kTolerance of the
// tensor's scale (the largest sum of absolute values, `mag`) plus the rounding to the dtype, the
// exact zeros +0, nothing outside it written. Reports at most 5 mismatches.
void check_tensor(const char* name, const Buffer& got, const std::vector<double>& want,
                  const std::vector<double>& mag, const Elements& el, std::int32_t dtype,
                  double tolerance = kTolerance) {
    double scale = 0;
    for (std::size_t e = 0; e < want.size(); ++e)
        if (el.mine[e]) scale = std::max(scale, mag[e]);
    const double allowed = tolerance * std::max(scale, 1e-30);
    int failures = 0;
    double worst = 0;
    for (std::size_t e = 0; e < want.size(); ++e) {
        const double x = got.get(std::int64_t(e));
        bool ok;
        if (!el.mine[e])
            ok = x == kSentinel;
        else if (el.zero[e])
            ok = got.bits_at(std::int64_t(e)) == 0;  // +0 exactly
        else {
            ok = std::abs(x - want[e]) <= allowed + 2 * attncheck::unit_roundoff(dtype) * std::abs(want[e]);
            worst = std::max(worst, std::abs(x - want[e]) / std::max(scale, 1e-30));
        }
        if (!ok && failures++ < 5) {
            INFO(name << " element " << e << (el.mine[e] ? (el.zero[e] ? " (must be +0)" : "") : " (outside the result)")
                      << ": got " << x << ", want " << (el.mine[e] ? want[e] : double(kSentinel)) << ", allowed "
                      << allowed << " (scale " << scale << ")");
            CHECK(ok);
        }
    }
    if (failures > 5) FAIL_CHECK(name << ": " << failures - 5 << " more mismatches");
    INFO(name << ": worst error " << worst << " of the scale " << scale);
    CHECK(failures == 0);
}

// The bits of every input (q, k, v, out, dout, lse).
std::vector<std::uint32_t> input_bits(const Built& bt) {
    std::vector<std::uint32_t> bits;
    for (const Buffer* x : {&bt.q, &bt.k, &bt.v, &bt.out, &bt.dout}) {
        const auto b = x->bits();
        bits.insert(bits.end(), b.begin(), b.end());
    }
    for (const float x : bt.lse) bits.push_back(attncheck::float_to_bits(x));
    return bits;
}

void check_against_truth(Built& bt) {
    INFO(bt.name);
    REQUIRE(attncheck::grads_v2_error(bt.p, bt.g).empty());
    const auto inputs = input_bits(bt);
    REQUIRE(bt.run() == ATTNCHECK_OK);
    CHECK(input_bits(bt) == inputs);  // inputs left unchanged
    const Truth t = truth_of(bt);
    const attncheck_problem_v2& p = bt.p;
    check_tensor("dq", bt.dq, t.dq, t.dq_mag, dq_elements(bt), p.dtype);
    check_tensor("dk", bt.dk, t.dk, t.dk_mag, kv_elements(bt, bt.g.dk, bt.dk, p.head_dim), p.dtype);
    check_tensor("dv", bt.dv, t.dv, t.dv_mag, kv_elements(bt, bt.g.dv, bt.dv, p.value_dim), p.dtype);
}

// The raw bits of dq, dk and dv after one call.
std::vector<std::uint32_t> result_bits(Built& bt) {
    for (Buffer* x : {&bt.dq, &bt.dk, &bt.dv}) x->fill(kSentinel);
    REQUIRE(bt.run() == ATTNCHECK_OK);
    std::vector<std::uint32_t> bits = bt.dq.bits();
    for (const Buffer* x : {&bt.dk, &bt.dv}) {
        const auto b = x->bits();
        bits.insert(bits.end(), b.begin(), b.end());
    }
    return bits;
}

// The cases: each feature alone and combined, lengths on both sides of the 64-row blocks.
std::vector<Case> cases() {
    std::vector<Case> all;
    const auto add = [&](Case s) {
        s.seed = all.size() + 1;
        all.push_back(s);
    };
    constexpr std::int32_t f16 = ATTNCHECK_DTYPE_F16, bf16 = ATTNCHECK_DTYPE_BF16;
    add(dims(prefill(130), 64));                                             // causal prefill, 3 blocks
    { Case s = dims(prefill(300, 4, 2), 64); s.layout = Layout::bthd; add(s); }  // 5 x 5 blocks, GQA
    { Case s = dims(prefill(97, 8, 2), 64); s.layout = Layout::bthd; add(s); }   // GQA
    add(dims(prefill(65, 4, 2, f16), 17, 16));
    add(dims(prefill(63, 8, 2, bf16), 128, 64));
    { Case s = dims(sequences({50}, {130}, {40}), 16); s.causal = false; add(s); }  // non-causal
    add(dims(prefill(1), 1));                                                // Tq = Tk = 1, Dk = 1
    add(dims(prefill(63), 1, 17));
    // Decode steps over padded caches (kv_lens, NaN past them).
    { Case s = dims(sequences({1, 1}, {97, 65}, {96, 64}, 8, 2), 64); s.kv_capacity = 97 + 40; add(s); }
    { Case s = dims(sequences({1, 1}, {1, 130}, {0, 129}, 1, 1, bf16), 16); s.kv_capacity = 130 + 3; add(s); }
    // A chunk of 16 rows after 100 cached keys; a chunk whose rows run past the keys (rows that
    // see no key under a window: exact zeros).
    add(dims(rows_over_keys(16, 116), 64));
    { Case s = dims(sequences({40}, {20}, {10}), 16); s.window_left = 8; s.kv_capacity = 20 + 5; add(s); }
    // Windows: causal sliding (keys before it never read), and two-sided non-causal.
    { Case s = dims(prefill(200, 2, 1), 64); s.window_left = 16; add(s); }
    { Case s = dims(prefill(97), 16); s.causal = false; s.window_left = 10; s.window_right = 5; add(s); }
    { Case s = dims(prefill(130), 16); s.causal = false; s.window_left = 0; s.window_right = 0; add(s); }
    // Softcap (tanh saturates for the larger scores) and ALiBi, alone and together with GQA.
    { Case s = dims(prefill(97), 16); s.softcap = 2.0f; s.input_scale = 2.0f; add(s); }
    { Case s = dims(prefill(130, 4, 2), 64); s.alibi = halving_alibi_slopes(4); add(s); }
    { Case s = dims(prefill(65, 8, 2, f16), 16); s.alibi = halving_alibi_slopes(8); s.softcap = 5.0f;
      s.input_scale = 3.0f; add(s); }
    // Varlen: sequences of different lengths, a decode step, an empty sequence's keys.
    { Case s = dims(sequences({5, 70, 1, 3}, {5, 130, 33, 0}, {0, 60, 32, 0}, 8, 2), 64); s.varlen = true; add(s); }
    { Case s = dims(sequences({65, 2}, {65, 97}, {0, 95}, 1, 1, bf16), 17, 16); s.varlen = true; s.window_left = 20;
      add(s); }
    // Strided views with gaps everywhere (nothing in a gap is read or written).
    { Case s = dims(prefill(65, 4, 2), 16); s.layout = Layout::gappy; s.kv_capacity = 65 + 2; add(s); }
    { Case s = dims(prefill(70, 1, 1, f16), 17); s.layout = Layout::gappy; s.causal = false; add(s); }
    return all;
}

}  // namespace

TEST_CASE("the backward pass agrees with float64, never reads what no row reads, and writes exact zeros",
          "[optimized][backward]") {
    for (const Case& s : cases()) {
        Built bt(s, kNaN);
        check_against_truth(bt);
    }
}

TEST_CASE("the backward pass is within the suite's a-priori bound of the float64 oracle and agrees with "
          "the reference backward kernel",
          "[optimized][backward]") {
    for (const Case& s : cases()) {
        INFO(s.name());
        Built bt(s, kNaN);
        REQUIRE(attncheck_reference_kernel_v2_backward(&bt.p, &bt.g) == ATTNCHECK_OK);
        const Buffer ref_dq = bt.dq, ref_dk = bt.dk, ref_dv = bt.dv;
        for (Buffer* x : {&bt.dq, &bt.dk, &bt.dv}) x->fill(kSentinel);
        REQUIRE(bt.run() == ATTNCHECK_OK);
        // The reference kernel's results (the oracle rounded to the dtype) as the truth. The oracle
        // recomputes out and D = dout . out exactly where the kernel reads the stored out (the ABI's
        // D): in float16 / bfloat16 they differ by the rounding of out, up to about u of the scale.
        const Truth t = truth_of(bt);
        const double tol = kTolerance + 2 * attncheck::unit_roundoff(s.dtype);
        const auto as_truth = [](const Buffer& b) {
            std::vector<double> x(std::size_t(b.size()));
            for (std::size_t e = 0; e < x.size(); ++e) x[e] = b.get(std::int64_t(e));
            return x;
        };
        check_tensor("dq vs reference", bt.dq, as_truth(ref_dq), t.dq_mag, dq_elements(bt), s.dtype, tol);
        check_tensor("dk vs reference", bt.dk, as_truth(ref_dk), t.dk_mag, kv_elements(bt, bt.g.dk, bt.dk, s.head_dim),
                     s.dtype, tol);
        check_tensor("dv vs reference", bt.dv, as_truth(ref_dv), t.dv_mag, kv_elements(bt, bt.g.dv, bt.dv, s.value_dim),
                     s.dtype, tol);

        // Every element within the bound any correct evaluation meets (reference/attention_grad.hpp).
        const attncheck::reference::GradOracle o = attncheck::reference::attention_grad_oracle(bt.p, bt.g.dout);
        const attncheck_problem_v2& p = bt.p;
        double worst = 0;
        int failures = 0;
        const auto bound_check = [&](const char* name, double got, double want, double bound, int b, int h, int i, int c) {
            const double ratio = got == want ? 0.0 : std::abs(got - want) / bound;  // a bound of 0: exact
            if (!(ratio <= 1.0) && failures++ < 5) {
                INFO(name << " b=" << b << " head=" << h << " row=" << i << " c=" << c << ": " << got << " vs " << want
                          << ", bound " << bound);
                CHECK(ratio <= 1.0);
            }
            if (std::isfinite(ratio)) worst = std::max(worst, ratio);
        };
        for (int b = 0; b < p.batch; ++b) {
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < q_len_of(p, b); ++i)
                    for (int c = 0; c < p.head_dim; ++c) {
                        const std::size_t e = o.row(b, h, i) * std::size_t(p.head_dim) + std::size_t(c);
                        bound_check("dq", bt.dq.get(attncheck::q_offset_v2(p, bt.g.dq, b, h, i, c)), o.dq[e], o.dq_bound[e],
                                    b, h, i, c);
                    }
            for (int hk = 0; hk < p.kv_heads; ++hk)
                for (int j = 0; j < kv_rows_of(p, b); ++j) {
                    for (int c = 0; c < p.head_dim; ++c) {
                        const std::size_t e = o.key(b, hk, j) * std::size_t(p.head_dim) + std::size_t(c);
                        bound_check("dk", bt.dk.get(attncheck::kv_offset_v2(p, bt.g.dk, b, hk, j, c)), o.dk[e],
                                    o.dk_bound[e], b, hk, j, c);
                    }
                    for (int c = 0; c < p.value_dim; ++c) {
                        const std::size_t e = o.key(b, hk, j) * std::size_t(p.value_dim) + std::size_t(c);
                        bound_check("dv", bt.dv.get(attncheck::kv_offset_v2(p, bt.g.dv, b, hk, j, c)), o.dv[e],
                                    o.dv_bound[e], b, hk, j, c);
                    }
                }
        }
        INFO("worst error / bound " << worst);
        CHECK(failures == 0);
    }
}

TEST_CASE("the backward pass gives the same bits on 1, 2 and 3 threads and under both work splits",
          "[optimized][backward]") {
    for (const Case& s : cases()) {
        INFO(s.name());
        Built bt(s, kNaN);
        std::vector<std::uint32_t> first;
        for (const Schedule schedule : {Schedule::automatic, Schedule::fused, Schedule::two_phase})
            for (const int threads : {1, 2, 3}) {
                INFO("schedule " << int(schedule) << ", threads " << threads);
                const attncheck::testing::ThreadCount tc(threads);
                set_schedule_for_test(schedule);
                const auto bits = result_bits(bt);
                set_schedule_for_test(Schedule::automatic);
                if (first.empty())
                    first = bits;
                else
                    CHECK(bits == first);
            }
    }
}

TEST_CASE("the backward pass reads nothing it must not: NaN or zeros there give the same bits",
          "[optimized][backward]") {
    for (const Case& s : cases()) {
        INFO(s.name());
        Built poisoned(s, kNaN), clean(s, 0.0f);
        CHECK(result_bits(poisoned) == result_bits(clean));
    }
}

TEST_CASE("the backward pass's intervals are the ABI's visibility", "[optimized][backward]") {
    namespace bd = attncheck::optimized::backward_detail;
    // Every combination of causality and windows over a sequence that starts before, at and past
    // its keys.
    for (const int causal : {0, 1})
        for (const int wl : {-1, 0, 3})
            for (const int wr : {-1, 0, 2}) {
                if (causal && wr >= 0) continue;
                for (const int pos : {0, 5, 30}) {
                    attncheck_problem_v2 p = attncheck::make_problem_v2({.causal = bool(causal), .window_left = wl,
                                                                          .window_right = wr});
                    const std::int32_t q_pos[1] = {pos};
                    p.q_pos = q_pos;
                    p.q_len = 12;
                    p.kv_len = 20;
                    for (int i = 0; i < p.q_len; ++i)
                        for (int j = -1; j <= p.kv_len; ++j) {
                            INFO("causal=" << causal << " wl=" << wl << " wr=" << wr << " pos=" << pos << " i=" << i
                                           << " j=" << j);
                            const bd::Interval keys = bd::keys_of_row(p, p.kv_len, pos + i);
                            const bd::Interval rows = bd::rows_of_key(p, p.q_len, p.kv_len, pos, j);
                            const bool vis = visible_v2(p, 0, i, j);
                            REQUIRE(vis == (j >= keys.lo && j <= keys.hi));
                            REQUIRE(vis == (i >= rows.lo && i <= rows.hi));
                        }
                }
            }
}

TEST_CASE("the backward pass refuses a block table, a null lse and a malformed grads struct, writing nothing",
          "[optimized][backward]") {
    const Case s = dims(prefill(20), 16);
    Built bt(s, kNaN);
    const auto untouched = [&] {
        for (const Buffer* x : {&bt.dq, &bt.dk, &bt.dv})
            for (std::int64_t e = 0; e < x->size(); ++e) REQUIRE(x->get(e) == kSentinel);
    };
    SECTION("a paged cache") {
        // The same keys as one block of 32 rows: a well-formed paged problem, which a backward
        // call refuses (a paged cache is an inference layout).
        const std::int32_t table[1] = {0};
        bt.p.block_table = table;
        bt.p.block_table_stride = 1;
        bt.p.block_size = 32;
        bt.p.num_blocks = 1;
        bt.p.kv_lens = nullptr;
        REQUIRE(attncheck::problem_v2_error(bt.p).empty());
        CHECK(bt.run() == ATTNCHECK_UNSUPPORTED);
        untouched();
    }
    SECTION("no lse") {
        bt.p.lse = nullptr;
        CHECK(bt.run() == ATTNCHECK_UNSUPPORTED);
        untouched();
    }
    SECTION("an older grads struct, a null gradient, a negative stride, a null call") {
        bt.g.struct_size = 8;
        CHECK(bt.run() == ATTNCHECK_UNSUPPORTED);
        bt.g.struct_size = std::int32_t(sizeof(attncheck_grads_v2));
        bt.g.dk.data = nullptr;
        CHECK(bt.run() == ATTNCHECK_UNSUPPORTED);
        bt.g.dk.data = bt.dk.data();
        bt.g.dv.stride[2] = -1;
        CHECK(bt.run() == ATTNCHECK_UNSUPPORTED);
        CHECK(attncheck_optimized_kernel_v2_backward(nullptr, &bt.g) == ATTNCHECK_UNSUPPORTED);
        CHECK(attncheck_optimized_kernel_v2_backward(&bt.p, nullptr) == ATTNCHECK_UNSUPPORTED);
        untouched();
    }
}

TEST_CASE("the backward pass gives the same bits on the avx2 and avx512 paths, and agrees on scalar",
          "[optimized][backward][isa]") {
    using attncheck::optimized::isa_choice;
    using attncheck::optimized::use_isa_path_for_test;
    const std::string& available = isa_choice().available;
    const auto has = [&](const char* path) { return available.find(path) != std::string::npos; };
    for (const Case& s : cases()) {
        INFO(s.name() << " (paths: " << available << ")");
        Built bt(s, kNaN);
        if (has("avx512") && has("avx2")) {
            REQUIRE(use_isa_path_for_test("avx512"));
            const auto a = result_bits(bt);
            REQUIRE(use_isa_path_for_test("avx2"));
            const auto b = result_bits(bt);
            CHECK(a == b);
        }
        // The scalar path (std::exp instead of the vector exp) within the same tolerance.
        REQUIRE(use_isa_path_for_test("scalar"));
        check_against_truth(bt);
        REQUIRE(use_isa_path_for_test(isa_choice().path));
    }
}
