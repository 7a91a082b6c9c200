// tests/reference/attention_grad_test.cpp — the float64 oracle of the backward pass
// (reference/attention_grad.hpp), its bound, and attncheck_reference_kernel_v2_backward.
//
// The oracle's gradients are checked against central finite differences of the float64 forward
// oracle (attention_v2_oracle) of L = sum dout . out, on problems with every feature the backward
// takes (GQA, windows, softcap, ALiBi, varlen, padding, empty rows). Its bound is checked the way
// the forward's is: float32 evaluations written here in different orders (P from lse or from a
// whole softmax, D from out or from P, keys forwards or backwards) stay below it, and planted bugs
// (the D term dropped, the scale missing, the softcap derivative dropped) go far above it.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <xmmintrin.h>

#include <catch2/catch.hpp>

#include "attncheck/kernels.hpp"
#include "reference/attention_grad.hpp"
#include "reference/attention_v2.hpp"
#include "v2_case.hpp"

namespace {

using attncheck::test::Buffer;
using attncheck::test::Spec;
using attncheck::test::V2Case;
using attncheck::reference::GradOracle;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A case with dout and gradient tensors laid out as out, q, k and v (NaN everywhere the problem
// does not address), out and lse written by the reference forward.
struct GradCase {
    V2Case c;
    Buffer dout, dq, dk, dv;
    std::vector<float> sinks, dsinks;
    attncheck_grads_v2 g{};

    explicit GradCase(const Spec& s, std::uint32_t seed, float range = 2.0f, std::vector<float> sink_logits = {})
        : c(s), sinks(std::move(sink_logits)) {
        if (!sinks.empty()) {
            c.p.sinks = sinks.data();
            dsinks.assign(sinks.size(), std::numeric_limits<float>::quiet_NaN());
            g.dsinks = dsinks.data();
        }
        // Multiples of 1/64: a finite difference of 2^-10 on them is exact in float32.
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> pick(-int(64 * range), int(64 * range));
        c.fill([&] { return float(pick(rng)) / 64.0f; });
        dout.resize(s.dtype, c.out.size(), kNaN);
        dq.resize(s.dtype, c.q.size(), kNaN);
        dk.resize(s.dtype, c.k.size(), kNaN);
        dv.resize(s.dtype, c.v.size(), kNaN);
        g.struct_size = sizeof(attncheck_grads_v2);
        bind(g.dout, dout, c.p.out, c.out_guard);
        bind(g.dq, dq, c.p.q, 0);
        bind(g.dk, dk, c.p.k, 0);
        bind(g.dv, dv, c.p.v, 0);
        for (int b = 0; b < c.p.batch; ++b)
            for (int h = 0; h < c.p.q_heads; ++h)
                for (int i = 0; i < c.tq(b); ++i)
                    for (int col = 0; col < c.p.value_dim; ++col)
                        dout.set(c.out_guard + attncheck::q_offset_v2(c.p, g.dout, b, h, i, col), float(pick(rng)) / 64.0f);
        forward();
    }
    void forward() { REQUIRE(attncheck_reference_kernel_v2(&c.p) == ATTNCHECK_OK); }
    static void bind(attncheck_tensor_v2& t, Buffer& buffer, const attncheck_tensor_v2& like, std::int64_t offset) {
        t.data = static_cast<char*>(buffer.data()) + offset * std::int64_t(attncheck::dtype_size(buffer.dtype));
        for (int d = 0; d < 4; ++d) t.stride[d] = like.stride[d];
    }
    GradOracle oracle(const attncheck::reference::GradOracleOptions& o = {}) const {
        return attncheck::reference::attention_grad_oracle(c.p, g.dout, o);
    }
    // L = sum over rows of dout . out, out from the float64 forward oracle.
    double loss() const {
        const attncheck::reference::OracleV2 o = attncheck::reference::attention_v2_oracle(c.p);
        double L = 0;
        for (int b = 0; b < c.p.batch; ++b)
            for (int h = 0; h < c.p.q_heads; ++h)
                for (int i = 0; i < c.tq(b); ++i)
                    for (int col = 0; col < c.p.value_dim; ++col)
                        L += double(attncheck::load_element(c.p.dtype, g.dout.data, attncheck::q_offset_v2(c.p, g.dout, b, h, i, col))) *
                             o.out[o.row(b, h, i) * std::size_t(c.p.value_dim) + std::size_t(col)];
        return L;
    }
};

// (L(x + d) - L(x - d)) / 2d for the element at `offset` of `buffer`.
double finite_difference(GradCase& gc, Buffer& buffer, std::int64_t offset) {
    constexpr float d = 0x1p-10f;
    const float x = buffer.get(offset);
    buffer.set(offset, x + d);
    const double up = gc.loss();
    buffer.set(offset, x - d);
    const double down = gc.loss();
    buffer.set(offset, x);
    return (up - down) / (2.0 * double(d));
}

// (L(sink + d) - L(sink - d)) / 2d for sink h.
double finite_difference_sink(GradCase& gc, std::size_t h) {
    constexpr float d = 0x1p-10f;
    const float x = gc.sinks[h];
    gc.sinks[h] = x + d;
    const double up = gc.loss();
    gc.sinks[h] = x - d;
    const double down = gc.loss();
    gc.sinks[h] = x;
    return (up - down) / (2.0 * double(d));
}

// Every gradient element of the oracle against its finite difference: |fd - g| <= 1e-5 (1 + |g|)
// (the difference's truncation error is d^2 / 6 times a third derivative of order one).
void check_finite_differences(const Spec& s, std::uint32_t seed, std::vector<float> sinks = {}) {
    GradCase gc(s, seed, 2.0f, std::move(sinks));
    const GradOracle o = gc.oracle();
    const attncheck_problem_v2& p = gc.c.p;
    const auto close = [](double fd, double g) { return std::abs(fd - g) <= 1e-5 * (1.0 + std::abs(g)); };
    for (std::size_t h = 0; h < gc.sinks.size(); ++h) {
        const double fd = finite_difference_sink(gc, h);
        INFO("dsinks[" << h << "] fd " << fd << " oracle " << o.dsinks[h]);
        CHECK(close(fd, o.dsinks[h]));
        CHECK(o.dsinks[h] != 0.0);
    }
    for (int b = 0; b < p.batch; ++b) {
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < gc.c.tq(b); ++i)
                for (int col = 0; col < p.head_dim; ++col) {
                    const double fd = finite_difference(gc, gc.c.q, gc.c.q_at(b, h, i, col));
                    const double g = o.dq[o.row(b, h, i) * std::size_t(p.head_dim) + std::size_t(col)];
                    INFO("dq (b,h,i,c) = (" << b << "," << h << "," << i << "," << col << ") fd " << fd << " oracle " << g);
                    CHECK(close(fd, g));
                }
        for (int hk = 0; hk < p.kv_heads; ++hk)
            for (int j = 0; j < gc.c.tk(b); ++j) {
                for (int col = 0; col < p.head_dim; ++col) {
                    const double fd = finite_difference(gc, gc.c.k, gc.c.k_at(b, hk, j, col));
                    const double g = o.dk[o.key(b, hk, j) * std::size_t(p.head_dim) + std::size_t(col)];
                    INFO("dk (b,hk,j,c) = (" << b << "," << hk << "," << j << "," << col << ") fd " << fd << " oracle " << g);
                    CHECK(close(fd, g));
                }
                for (int col = 0; col < p.value_dim; ++col) {
                    const double fd = finite_difference(gc, gc.c.v, gc.c.v_at(b, hk, j, col));
                    const double g = o.dv[o.key(b, hk, j) * std::size_t(p.value_dim) + std::size_t(col)];
                    INFO("dv (b,hk,j,c) = (" << b << "," << hk << "," << j << "," << col << ") fd " << fd << " oracle " << g);
                    CHECK(close(fd, g));
                }
            }
    }
}

}  // namespace

TEST_CASE("grad oracle: central finite differences of the float64 forward", "[reference][grad]") {
    SECTION("causal prefill, MHA") {
        check_finite_differences({.q_heads = 2, .kv_heads = 2, .head_dim = 3, .value_dim = 2, .tq = {5}, .tk = {5},
                                  .scale = 0.5f},
                                 1);
    }
    SECTION("GQA: dk and dv summed over the group") {
        check_finite_differences({.q_heads = 4, .kv_heads = 2, .head_dim = 2, .value_dim = 3, .tq = {3}, .tk = {6},
                                  .q_pos = {3}, .scale = 0.7f},
                                 2);
    }
    SECTION("non-causal window on both sides, ALiBi") {
        check_finite_differences({.q_heads = 2, .kv_heads = 1, .head_dim = 2, .value_dim = 2, .tq = {4}, .tk = {6},
                                  .q_pos = {1}, .causal = false, .window_left = 1, .window_right = 2, .scale = 0.6f,
                                  .alibi = {0.25f, 0.5f}},
                                 3);
    }
    SECTION("softcap: the derivative of cap tanh(s / cap)") {
        check_finite_differences({.q_heads = 1, .kv_heads = 1, .head_dim = 4, .value_dim = 2, .tq = {4}, .tk = {4},
                                  .scale = 1.0f, .softcap = 2.0f},
                                 4);
    }
    SECTION("attention sinks: the sinks' own gradient, and the keys' with a sink in the softmax") {
        check_finite_differences({.batch = 2, .q_heads = 4, .kv_heads = 2, .head_dim = 2, .value_dim = 3, .tq = {3, 2},
                                  .tk = {5, 0}, .q_pos = {2, 0}, .varlen = true, .scale = 0.5f},
                                 8, {0.5f, -1.25f, 2.0f, 0.0f});
    }
    SECTION("varlen with an empty sequence, padding in a dense batch") {
        check_finite_differences({.batch = 3, .q_heads = 2, .kv_heads = 1, .head_dim = 2, .value_dim = 2,
                                  .tq = {2, 3, 1}, .tk = {4, 0, 2}, .q_pos = {2, 0, 1}, .varlen = true, .scale = 0.5f},
                                 5);
        check_finite_differences({.batch = 2, .q_heads = 1, .kv_heads = 1, .head_dim = 2, .value_dim = 2,
                                  .tq = {2, 2}, .tk = {3, 1}, .q_pos = {1, 0}, .kv_capacity = 4, .kv_lens = true,
                                  .causal = false, .scale = 0.5f},
                                 6);
    }
}

TEST_CASE("grad oracle: exact zeros where nothing reaches", "[reference][grad]") {
    // Sequence 1 has no keys (every row empty); sequence 0's keys past kv_lens are padding and
    // its window leaves key 0 unseen by every row.
    GradCase gc({.batch = 2, .q_heads = 2, .kv_heads = 1, .head_dim = 2, .value_dim = 2, .tq = {2, 2}, .tk = {4, 0},
                 .q_pos = {2, 0}, .kv_capacity = 6, .kv_lens = true, .window_left = 1, .scale = 0.5f},
                7);
    const GradOracle o = gc.oracle();
    for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 2; ++i)
            for (int col = 0; col < 2; ++col) {
                CHECK(o.dq[o.row(1, h, i) * 2 + std::size_t(col)] == 0.0);
                CHECK(o.dq_bound[o.row(1, h, i) * 2 + std::size_t(col)] == 0.0);
            }
    for (int j : {0, 4, 5})
        for (int col = 0; col < 2; ++col) {
            CHECK(o.key_seen[o.key(0, 0, j)] == 0);
            CHECK(o.dk[o.key(0, 0, j) * 2 + std::size_t(col)] == 0.0);
            CHECK(o.dv_bound[o.key(0, 0, j) * 2 + std::size_t(col)] == 0.0);
        }
    CHECK(o.key_seen[o.key(0, 0, 1)] == 1);
}

namespace {

// A float32 backward written from the ABI's text, with the choices a correct kernel may make.
struct F32Choices {
    bool softmax_recompute = false;  // P from a whole softmax of the recomputed scores, not from lse
    bool d_from_p = false;           // D = sum_j P_j dP_j instead of dout . out
    bool keys_backwards = false;     // every sum over keys (and over rows) in descending order
    // Every float32 result below 2^-126 flushed to 0, and such inputs read as 0 (FTZ and DAZ, as
    // -ffast-math and CUDA's --use_fast_math compile a kernel).
    bool flush_to_zero = false;
    // Planted bugs.
    bool drop_d = false, drop_scale_dk = false, drop_softcap_derivative = false;
};

struct F32Grads {
    std::vector<float> dq, dk, dv;  // logical order, as GradOracle
};

// Sets the calling thread's MXCSR flush-to-zero and denormals-are-zero modes while it lives.
class FlushToZero {
  public:
    explicit FlushToZero(bool on) : saved_(_mm_getcsr()) {
        if (on) _mm_setcsr(saved_ | 0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
    }
    ~FlushToZero() { _mm_setcsr(saved_); }
    FlushToZero(const FlushToZero&) = delete;
    FlushToZero& operator=(const FlushToZero&) = delete;

  private:
    unsigned saved_;
};

F32Grads f32_backward(const GradCase& gc, const GradOracle& layout, const F32Choices& ch) {
    const FlushToZero ftz(ch.flush_to_zero);
    const attncheck_problem_v2& p = gc.c.p;
    const int Dk = p.head_dim, Dv = p.value_dim;
    F32Grads r{std::vector<float>(layout.dq.size()), std::vector<float>(layout.dk.size()), std::vector<float>(layout.dv.size())};
    const auto ld = [&](const attncheck_tensor_v2& t, std::int64_t off) { return attncheck::load_element(p.dtype, t.data, off); };
    std::vector<float> dk(layout.dk.size()), dv(layout.dv.size());
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = attncheck::kv_head_of(p, h);
            const int tq = gc.c.tq(b);
            for (int ii = 0; ii < tq; ++ii) {
                const int i = ch.keys_backwards ? tq - 1 - ii : ii;
                std::vector<int> js;
                for (int j = 0; j < gc.c.tk(b); ++j)
                    if (attncheck::visible_v2(p, b, i, j)) js.push_back(j);
                if (ch.keys_backwards) std::reverse(js.begin(), js.end());
                if (js.empty()) continue;
                std::vector<float> s(js.size()), s0(js.size()), P(js.size()), dP(js.size());
                for (std::size_t t = 0; t < js.size(); ++t) {
                    float dot = 0;
                    for (int col = 0; col < Dk; ++col)
                        dot += ld(p.q, attncheck::q_offset_v2(p, p.q, b, h, i, col)) * ld(p.k, attncheck::kv_offset_v2(p, p.k, b, hk, js[t], col));
                    s0[t] = p.scale * dot;
                    s[t] = p.softcap > 0 ? p.softcap * std::tanh(s0[t] / p.softcap) : s0[t];
                    if (p.alibi_slopes) s[t] -= p.alibi_slopes[h] * float(p.q_pos[b] + i - js[t]);
                }
                const float lse = p.lse[attncheck::lse_offset_v2(p, b, h, i)];
                if (ch.softmax_recompute) {
                    const float m = *std::max_element(s.begin(), s.end());
                    float z = 0;
                    for (std::size_t t = 0; t < js.size(); ++t) z += (P[t] = std::exp(s[t] - m));
                    for (float& x : P) x /= z;
                } else {
                    for (std::size_t t = 0; t < js.size(); ++t) P[t] = std::exp(s[t] - lse);
                }
                std::vector<float> dO(std::size_t(Dv), 0.0f);
                for (int col = 0; col < Dv; ++col) dO[std::size_t(col)] = ld(gc.g.dout, attncheck::q_offset_v2(p, gc.g.dout, b, h, i, col));
                float D = 0;
                for (std::size_t t = 0; t < js.size(); ++t) {
                    float x = 0;
                    for (int col = 0; col < Dv; ++col) x += dO[std::size_t(col)] * ld(p.v, attncheck::kv_offset_v2(p, p.v, b, hk, js[t], col));
                    dP[t] = x;
                    if (ch.d_from_p) D += P[t] * x;
                }
                if (!ch.d_from_p)
                    for (int col = 0; col < Dv; ++col) D += dO[std::size_t(col)] * ld(p.out, attncheck::q_offset_v2(p, p.out, b, h, i, col));
                if (ch.drop_d) D = 0;
                const std::size_t row = layout.row(b, h, i);
                for (std::size_t t = 0; t < js.size(); ++t) {
                    float dS = P[t] * (dP[t] - D);
                    if (p.softcap > 0 && !ch.drop_softcap_derivative) {
                        const float th = std::tanh(s0[t] / p.softcap);
                        dS *= 1.0f - th * th;
                    }
                    const std::size_t kr = layout.key(b, hk, js[t]);
                    for (int col = 0; col < Dk; ++col) {
                        r.dq[row * std::size_t(Dk) + std::size_t(col)] += p.scale * dS * ld(p.k, attncheck::kv_offset_v2(p, p.k, b, hk, js[t], col));
                        dk[kr * std::size_t(Dk) + std::size_t(col)] +=
                            (ch.drop_scale_dk ? 1.0f : p.scale) * dS * ld(p.q, attncheck::q_offset_v2(p, p.q, b, h, i, col));
                    }
                    for (int col = 0; col < Dv; ++col) dv[kr * std::size_t(Dv) + std::size_t(col)] += P[t] * dO[std::size_t(col)];
                }
            }
        }
    r.dk = dk, r.dv = dv;
    return r;
}

// The largest |candidate - oracle| / bound over dq, dk and dv (an element with bound 0 must be
// exact: any difference there counts as infinite).
double worst_ratio(const F32Grads& f, const GradOracle& o) {
    double worst = 0;
    const auto scan = [&](const std::vector<float>& x, const std::vector<double>& y, const std::vector<double>& bound) {
        for (std::size_t e = 0; e < x.size(); ++e) {
            const double d = std::abs(double(x[e]) - y[e]);
            worst = std::max(worst, d == 0 ? 0.0 : bound[e] > 0 ? d / bound[e] : std::numeric_limits<double>::infinity());
        }
    };
    scan(f.dq, o.dq, o.dq_bound);
    scan(f.dk, o.dk, o.dk_bound);
    scan(f.dv, o.dv, o.dv_bound);
    return worst;
}

std::vector<Spec> bound_specs() {
    return {
        {.q_heads = 4, .kv_heads = 2, .head_dim = 16, .value_dim = 8, .tq = {40}, .tk = {40}, .scale = 0.25f},
        {.batch = 2, .q_heads = 2, .kv_heads = 1, .head_dim = 8, .value_dim = 8, .tq = {3, 5}, .tk = {30, 7},
         .q_pos = {27, 2}, .varlen = true, .window_left = 9, .scale = 0.35f, .alibi = {0.125f, 0.0625f}},
        {.q_heads = 2, .kv_heads = 2, .head_dim = 32, .value_dim = 16, .tq = {24}, .tk = {24}, .scale = 0.5f, .softcap = 5.0f},
        {.q_heads = 1, .kv_heads = 1, .head_dim = 64, .value_dim = 64, .tq = {1}, .tk = {300}, .q_pos = {299},
         .scale = 0.125f},
        {.q_heads = 2, .kv_heads = 1, .head_dim = 8, .value_dim = 8, .tq = {16}, .tk = {20}, .q_pos = {2},
         .causal = false, .window_left = 5, .window_right = 3, .scale = 2.0f},
    };
}

}  // namespace

TEST_CASE("grad bound: correct float32 evaluations in several orders stay below it", "[reference][grad][bound]") {
    double worst = 0;
    std::uint32_t seed = 100;
    for (const Spec& s : bound_specs())
        for (const F32Choices ch : {F32Choices{}, F32Choices{.softmax_recompute = true}, F32Choices{.d_from_p = true},
                                    F32Choices{.softmax_recompute = true, .d_from_p = true, .keys_backwards = true}}) {
            GradCase gc(s, ++seed);
            const GradOracle o = gc.oracle();
            const double r = worst_ratio(f32_backward(gc, o, ch), o);
            INFO("spec " << attncheck::describe_v2(gc.c.p) << " seed " << seed << " ratio " << r);
            CHECK(r < 1.0);
            worst = std::max(worst, r);
        }
    // The bound is a bound, not a guess at the error: correct kernels sit well below it.
    CHECK(worst < 0.5);
    WARN("largest test ratio of the correct float32 evaluations: " << worst);
}

TEST_CASE("grad bound: flush-to-zero evaluations of widely spread scores stay below it", "[reference][grad][bound]") {
    // Scores with a standard deviation of about 30, as bench's spread-512: many weights between
    // 2^-149 and 2^-100, whose products (dS = P (dP - D), P dO, dS k) fall below 2^-126.
    double worst = 0;
    for (std::uint32_t seed = 1; seed <= 6; ++seed)
        for (const Spec& s : {Spec{.q_heads = 2, .kv_heads = 1, .head_dim = 16, .value_dim = 8, .tq = {48}, .tk = {48}, .scale = 1.5f},
                              Spec{.q_heads = 1, .kv_heads = 1, .head_dim = 8, .value_dim = 8, .tq = {64}, .tk = {64}, .scale = 4.0f}})
            for (const F32Choices ch : {F32Choices{.flush_to_zero = true}, F32Choices{.d_from_p = true, .flush_to_zero = true}}) {
                GradCase gc(s, seed, 4.0f);
                const GradOracle o = gc.oracle();
                const double r = worst_ratio(f32_backward(gc, o, ch), o);
                INFO("spec " << attncheck::describe_v2(gc.c.p) << " seed " << seed << " ratio " << r);
                CHECK(r < 1.0);
                worst = std::max(worst, r);
            }
    WARN("largest test ratio of the flush-to-zero evaluations: " << worst);

    // The case that needs the underflow terms of the products: row 1 gives key 1 the weight
    // P = e^-83 (about 2^-120, normal) against P = 1 for key 0, and dP_1 - D = 2^-12, so
    // dS = 2^-132 and P dO = 2^-126.x are flushed to 0: dk_1 and dv_1 come out 0, off by all of
    // their exact values, which no relative term of the bound covers.
    GradCase gc({.q_heads = 1, .kv_heads = 1, .head_dim = 1, .value_dim = 1, .tq = {2}, .tk = {2}, .scale = 1.0f}, 1);
    const float q[] = {1, 1}, k[] = {0, -83}, v[] = {1, 1 + 0x1p-6f}, dout[] = {0x1p-6f, 0x1p-6f};
    for (int i = 0; i < 2; ++i) {
        gc.c.q.set(gc.c.q_at(0, 0, i, 0), q[i]);
        gc.c.k.set(gc.c.k_at(0, 0, i, 0), k[i]);
        gc.c.v.set(gc.c.v_at(0, 0, i, 0), v[i]);
        gc.dout.set(gc.c.out_at(0, 0, i, 0), dout[i]);
    }
    gc.forward();
    const GradOracle o = gc.oracle();
    const F32Grads f = f32_backward(gc, o, {.flush_to_zero = true});
    CHECK(f.dk[o.key(0, 0, 1)] == 0.0f);  // flushed, as the case intends
    CHECK(o.dk[o.key(0, 0, 1)] != 0.0);
    CHECK(worst_ratio(f, o) < 1.0);
}

TEST_CASE("grad bound: planted bugs exceed it by far", "[reference][grad][bound]") {
    const std::vector<Spec> specs = bound_specs();
    const auto ratio = [&](const Spec& s, const F32Choices& ch) {
        GradCase gc(s, 7);
        const GradOracle o = gc.oracle();
        return worst_ratio(f32_backward(gc, o, ch), o);
    };
    CHECK(ratio(specs[0], {.drop_d = true}) > 100.0);
    CHECK(ratio(specs[0], {.drop_scale_dk = true}) > 100.0);
    CHECK(ratio(specs[2], {.drop_softcap_derivative = true}) > 100.0);
}

TEST_CASE("grad bound: charges the distance of the given lse and out", "[reference][grad][bound]") {
    GradCase gc({.q_heads = 1, .kv_heads = 1, .head_dim = 8, .value_dim = 8, .tq = {8}, .tk = {8}, .scale = 0.5f}, 11);
    const GradOracle exact_inputs = gc.oracle();
    gc.c.lse[std::size_t(gc.c.out_guard) + 3] += 1e-3f;  // row 3's lse off by 1e-3
    const GradOracle off = gc.oracle();
    // Row 3's gradients may now be about 1e-3 relatively off, and the bound says so.
    CHECK(off.dq_bound[3 * 8] > 10.0 * exact_inputs.dq_bound[3 * 8]);
    CHECK(off.dq_bound[2 * 8] == exact_inputs.dq_bound[2 * 8]);
}

TEST_CASE("reference backward: the oracle rounded, every element of dq, dk, dv written", "[reference][grad][kernel]") {
    for (const std::int32_t dtype : {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_F16, ATTNCHECK_DTYPE_BF16}) {
        GradCase gc({.dtype = dtype, .batch = 2, .q_heads = 4, .kv_heads = 2, .head_dim = 5, .value_dim = 3,
                     .tq = {3, 3}, .tk = {6, 2}, .q_pos = {3, 0}, .kv_capacity = 7, .kv_lens = true,
                     .layout = attncheck::test::Layout::bthd, .row_gap = 2, .scale = 0.5f, .softcap = 3.0f},
                    21);
        REQUIRE(attncheck_reference_kernel_v2_backward(&gc.c.p, &gc.g) == ATTNCHECK_OK);
        const GradOracle o = gc.oracle();
        const attncheck_problem_v2& p = gc.c.p;
        for (int b = 0; b < 2; ++b) {
            for (int h = 0; h < 4; ++h)
                for (int i = 0; i < 3; ++i)
                    for (int col = 0; col < 5; ++col)
                        CHECK(gc.dq.get(attncheck::q_offset_v2(p, gc.g.dq, b, h, i, col)) ==
                              attncheck::reference::round_double_to(dtype, o.dq[o.row(b, h, i) * 5 + std::size_t(col)]));
            for (int hk = 0; hk < 2; ++hk)
                for (int j = 0; j < 7; ++j) {  // every row of the capacity, padding included
                    for (int col = 0; col < 5; ++col)
                        CHECK(gc.dk.get(attncheck::kv_offset_v2(p, gc.g.dk, b, hk, j, col)) ==
                              attncheck::reference::round_double_to(dtype, o.dk[o.key(b, hk, j) * 5 + std::size_t(col)]));
                    for (int col = 0; col < 3; ++col) {
                        const float x = gc.dv.get(attncheck::kv_offset_v2(p, gc.g.dv, b, hk, j, col));
                        CHECK(x == attncheck::reference::round_double_to(dtype, o.dv[o.key(b, hk, j) * 3 + std::size_t(col)]));
                        if (j >= gc.c.tk(b)) CHECK(x == 0.0f);
                    }
                }
        }
        // Nothing else written: the gaps between rows still hold their NaN.
        std::size_t written = 0;
        for (std::int64_t e = 0; e < gc.dq.size(); ++e) written += std::isnan(gc.dq.get(e)) ? 0 : 1;
        CHECK(written == std::size_t(2 * 4 * 3 * 5));
    }
}

TEST_CASE("reference backward: refuses a malformed call and writes nothing", "[reference][grad][kernel]") {
    GradCase gc({.q_heads = 1, .kv_heads = 1, .head_dim = 2, .value_dim = 2, .tq = {2}, .tk = {2}}, 31);
    attncheck_problem_v2 p = gc.c.p;
    p.lse = nullptr;
    CHECK(attncheck_reference_kernel_v2_backward(&p, &gc.g) != ATTNCHECK_OK);
    attncheck_grads_v2 g = gc.g;
    g.struct_size = 8;
    CHECK(attncheck_reference_kernel_v2_backward(&gc.c.p, &g) != ATTNCHECK_OK);
    g = gc.g;
    g.dk.data = nullptr;
    CHECK(attncheck_reference_kernel_v2_backward(&gc.c.p, &g) != ATTNCHECK_OK);
    CHECK(attncheck_reference_kernel_v2_backward(&gc.c.p, nullptr) != ATTNCHECK_OK);
    for (std::int64_t e = 0; e < gc.dq.size(); ++e) CHECK(std::isnan(gc.dq.get(e)));
}

TEST_CASE("sinks in the forward oracle: rows sum to 1 less the sink's weight, an empty row's lse is the sink", "[reference][grad][sinks]") {
    // One row that sees keys 0..2 with equal scores 0 (q = 0), and one sequence with no key.
    GradCase gc({.batch = 2, .q_heads = 1, .kv_heads = 1, .head_dim = 2, .value_dim = 1, .tq = {1, 1}, .tk = {3, 0},
                 .q_pos = {2, 0}, .varlen = true, .scale = 1.0f},
                41, 2.0f, {1.0f});
    for (int col = 0; col < 2; ++col) gc.c.q.set(gc.c.q_at(0, 0, 0, col), 0.0f);
    for (int j = 0; j < 3; ++j) gc.c.v.set(gc.c.v_at(0, 0, j, 0), 1.0f);
    const attncheck::reference::OracleV2 o = attncheck::reference::attention_v2_oracle(gc.c.p);
    // z = 3 e^0 + e^1: the row's output (all-ones values) is 3 / (3 + e), lse = log(3 + e).
    CHECK(o.out[o.row(0, 0, 0)] == Approx(3.0 / (3.0 + std::exp(1.0))).epsilon(1e-15));
    CHECK(o.lse[o.row(0, 0, 0)] == Approx(std::log(3.0 + std::exp(1.0))).epsilon(1e-15));
    CHECK(o.out[o.row(1, 0, 0)] == 0.0);
    CHECK(o.lse[o.row(1, 0, 0)] == Approx(1.0).epsilon(1e-15));
    // The reference kernel's backward writes dsinks, float32, from the oracle.
    REQUIRE(attncheck_reference_kernel_v2_backward(&gc.c.p, &gc.g) == ATTNCHECK_OK);
    const GradOracle g = gc.oracle();
    CHECK(gc.dsinks[0] == float(g.dsinks[0]));
    // A call with sinks but no dsinks is malformed.
    attncheck_grads_v2 without = gc.g;
    without.dsinks = nullptr;
    CHECK(attncheck_reference_kernel_v2_backward(&gc.c.p, &without) != ATTNCHECK_OK);
}
