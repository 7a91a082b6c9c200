// tests/zoo/zoo_backward_test.cpp — the backward pass's zoo of kernels/zoo_backward.cpp: the correct
// backward agrees with float64 gradients computed here by plain loops (from the inputs as stored,
// with an exact softmax, never from the kernel's lse or out), writes every gradient element and
// nothing else, reads no key that no row sees (those hold NaN), leaves its inputs unchanged and
// refuses what it must; and every mutant is wrong, on a case the test names, by far more than
// float32 rounding (kMutantGap, a hundred times the base's tolerance).
//
// To add a mutant's case: an entry of gradient_mutant_cases() (sink_mutant_cases() for dsinks)
// with a Spec on which that one bug moves a gradient by more than kMutantGap of its scale.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"
#include "kernels/registry.hpp"
#include "reference/attention_grad.hpp"
#include "reference/attention_v2.hpp"
#include "tests/zoo/spec_v2.hpp"

using namespace attncheck;
using namespace zoo_test;

namespace {

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
Grads float64_backward(Case& c) {
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
Gap gap(const Grads& got, const Grads& want, const std::vector<bool>& zero_dq, const std::vector<bool>& zero_kv_dk,
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
Zeros contract_zeros(const Case& c) {
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
double tolerance(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F32 ? 1e-4 : dtype == ATTNCHECK_DTYPE_F16 ? 4e-3 : 3e-2;
}
// How far a mutant must be from the float64 gradients (relative to their scale) to count as
// caught: a hundred times the float32 tolerance, far beyond any rounding.
constexpr double kMutantGap = 1e-2;
// And how far outside the float64 oracle's bound (a correct kernel stays below 1).
constexpr double kMutantOracleRatio = 100.0;

const KernelEntry& entry(const std::string& name) {
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
double oracle_ratio(const Case& c, const Grads& got) {
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
bool untouched_elsewhere(const Buffer& after, const std::vector<std::uint8_t>& before, const std::vector<std::int64_t>& at) {
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
void base_is_right(Case& c) {
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

// The mutant `name` is wrong on the case `shows` (named in its table) by more than kMutantGap of
// the gradient scale, where the base is right.
void shows_bug(const std::string& name, const Spec& shows) {
    const KernelEntry& m = entry(name);
    REQUIRE(m.role == KernelRole::mutant);
    Case c(shows, m.fn_v2);
    base_is_right(c);
    const Grads got = c.run(m.backward_v2);
    INFO(name << " (" << m.bug << ") on " << describe_v2(c.p));
    REQUIRE(got.rc == ATTNCHECK_OK);
    const Zeros z = contract_zeros(c);
    const Gap g = gap(got, float64_backward(c), z.dq, z.dk, z.dv);
    INFO("worst: " << g.where);
    CHECK(g.worst > kMutantGap);
    CHECK(oracle_ratio(c, got) > kMutantOracleRatio);
}

}  // namespace

TEST_CASE("the backward zoo: bwd_naive and at least 18 mutants, forward the reference kernel, one-line bugs") {
    std::set<std::string> bases, mutants;
    for (const KernelEntry& e : kernel_registry()) {
        if (e.name.rfind("bwd_", 0) != 0) continue;
        INFO(e.name);
        CHECK(e.fn == nullptr);
        CHECK(e.fn_v2 == &attncheck_reference_kernel_v2);  // the bugs are in the backward only
        CHECK(e.backward_v2 != nullptr);
        CHECK(e.declaration == "sinks=yes");  // the forward (the reference kernel) and the backward take sinks
        if (e.role == KernelRole::zoo_base) {
            bases.insert(e.name);
            CHECK(e.bug.empty());
            CHECK_FALSE(e.reads_out_of_bounds);
            CHECK_FALSE(e.writes_out_of_bounds);
        } else {
            REQUIRE(e.role == KernelRole::mutant);
            CHECK(mutants.insert(e.name).second);
            CHECK(!e.bug.empty());
            CHECK(e.bug.find('\n') == std::string::npos);
            CHECK(e.description.rfind("bwd_naive", 0) == 0);
        }
    }
    CHECK(bases == std::set<std::string>{"bwd_naive"});
    CHECK(mutants.size() >= 18);
}

TEST_CASE("bwd_naive refuses a malformed call and a block table") {
    const KernelEntry& base = entry("bwd_naive");
    Case c(prefill(4), base.fn_v2);
    CHECK(base.backward_v2(nullptr, &c.g) == ATTNCHECK_UNSUPPORTED);
    CHECK(base.backward_v2(&c.p, nullptr) == ATTNCHECK_UNSUPPORTED);
    attncheck_problem_v2 p = c.p;
    p.kv_heads = 3;  // does not divide q_heads = 2
    CHECK(base.backward_v2(&p, &c.g) == ATTNCHECK_UNSUPPORTED);
    p = c.p;
    p.lse = nullptr;  // a backward reads the forward's lse
    CHECK(base.backward_v2(&p, &c.g) == ATTNCHECK_UNSUPPORTED);
    // A paged cache: the backward refuses it as a whole (a well-formed table otherwise).
    p = c.p;
    const std::int32_t table[1] = {0};
    const std::int32_t kv_lens[1] = {4};
    p.block_table = table, p.block_table_stride = 1, p.block_size = 4, p.num_blocks = 1, p.kv_lens = kv_lens;
    REQUIRE(problem_v2_error(p).empty());
    CHECK(base.backward_v2(&p, &c.g) == ATTNCHECK_UNSUPPORTED);
    attncheck_grads_v2 g = c.g;
    g.struct_size = 8;
    CHECK(base.backward_v2(&c.p, &g) == ATTNCHECK_UNSUPPORTED);
    g = c.g;
    g.dk.data = nullptr;
    CHECK(base.backward_v2(&c.p, &g) == ATTNCHECK_UNSUPPORTED);
    // Nothing written by a refusal.
    const Grads got = c.run([](const attncheck_problem_v2* pp, const attncheck_grads_v2* gg) {
        attncheck_problem_v2 bad = *pp;
        bad.kv_heads = 3;
        return entry("bwd_naive").backward_v2(&bad, gg);
    });
    CHECK(got.rc == ATTNCHECK_UNSUPPORTED);
    for (double x : got.dq) CHECK(std::isnan(x));
}

TEST_CASE("bwd_naive agrees with float64 gradients on hand-made calls of every feature") {
    std::vector<Spec> specs;
    for (int dtype : {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_F16, ATTNCHECK_DTYPE_BF16}) {
        Spec s = prefill(100);  // two 64-key blocks
        s.dtype = dtype;
        specs.push_back(s);
    }
    { Spec s = decode(97); s.Hq = 6, s.Hk = 2; specs.push_back(s); }      // GQA, across blocks
    { Spec s = prefill(70); s.Hq = 4, s.Hk = 1; specs.push_back(s); }     // MQA: dk/dv over 4 heads
    { Spec s = prefill(20); s.layout = Layout::bthd; specs.push_back(s); }
    { Spec s = prefill(20); s.layout = Layout::gapped, s.grad_layout = Layout::bthd; s.Dv = 5; specs.push_back(s); }
    { Spec s = prefill(20); s.grad_layout = Layout::gapped; s.Hq = 4; specs.push_back(s); }
    { Spec s = prefill(130); s.window_left = 40; specs.push_back(s); }    // keys before the window unseen
    { Spec s = prefill(30); s.causal = 0, s.window_left = 3, s.window_right = 7; specs.push_back(s); }
    { Spec s = prefill(30); s.causal = 0; specs.push_back(s); }
    { Spec s = prefill(30); s.softcap = 2.0f, s.scale = 2.0f, s.magnitude = 2.0f; specs.push_back(s); }
    { Spec s = prefill(30); s.alibi = true; specs.push_back(s); }
    {   // chunked prefill with ALiBi: positions past 0
        Spec s; s.q_rows = {5}, s.keys = {40}, s.q_pos = {35}, s.alibi = true; specs.push_back(s);
    }
    {   // kv_lens below the capacity (padding rows: dk/dv 0), one sequence empty (dq 0)
        Spec s; s.q_rows = {1, 1, 1}, s.keys = {10, 0, 120}, s.q_pos = {9, 0, 119}, s.capacity = 130;
        s.with_kv_lens = true; specs.push_back(s);
    }
    {   // varlen, an empty sequence of rows and one of keys' rows unseen
        Spec s; s.mode = Mode::varlen; s.q_rows = {3, 0, 7}, s.keys = {9, 4, 7}, s.q_pos = {6, 4, 0};
        specs.push_back(s);
    }
    {   // rows with no visible key among rows that see keys: dq 0
        Spec s; s.q_rows = {8}, s.keys = {4}, s.window_left = 1; specs.push_back(s);
    }
    { Spec s = prefill(12); s.window_left = 0; specs.push_back(s); }  // the diagonal only
    const KernelEntry& base = entry("bwd_naive");
    for (const Spec& s : specs) {
        Case c(s, base.fn_v2);
        base_is_right(c);
    }
}

TEST_CASE("bwd_naive agrees with float64 gradients on random calls (NaN in every key no row sees)") {
    const KernelEntry& base = entry("bwd_naive");
    for (std::uint32_t seed = 1; seed <= 100; ++seed) {
        Case c(random_spec(seed, kBackwardRanges), base.fn_v2);
        INFO("seed " << seed);
        base_is_right(c);
    }
}

// ---- each mutant on a case that shows its bug ---------------------------------------------------

namespace {

// s after set(s): a Spec changed in one expression.
template <class Set>
Spec with(Spec s, Set&& set) {
    set(s);
    return s;
}

// A mutant, its bug and the case that shows it, in words (the section's name), and that case.
struct MutantCase {
    std::string mutant, shown;
    Spec shows;
};

// The case of each mutant of dq, dk and dv: its one bug moves a gradient by more than kMutantGap
// of its scale there (shows_bug()).
std::vector<MutantCase> gradient_mutant_cases() {
    const Spec chunk = with(Spec{}, [](Spec& s) { s.q_rows = {5}, s.keys = {40}, s.q_pos = {35}; });
    const Spec near_cap = with(prefill(30), [](Spec& s) { s.softcap = 2.0f, s.scale = 2.0f, s.magnitude = 2.0f; });
    return {
        {"bwd_d_term_dropped", "D term dropped, on a causal prefill of 6", prefill(6)},
        {"bwd_d_sign_flipped", "D with the wrong sign, on a causal prefill of 6", prefill(6)},
        // Six keys per row: their exp(s - max) sum to far more than 1.
        {"bwd_p_unnormalised", "P unnormalised, on a non-causal prefill of 6", with(prefill(6), [](Spec& s) { s.causal = 0; })},
        {"bwd_lse_read_as_log2", "lse read as log2, on a non-causal prefill of 20 (lse near log 20)",
         with(prefill(20), [](Spec& s) { s.causal = 0; })},
        {"bwd_causal_forgotten", "causal mask forgotten, on a causal prefill of 6", prefill(6)},
        {"bwd_window_off_by_one", "window one key short, on a prefill of 30 with window_left 3",
         with(prefill(30), [](Spec& s) { s.window_left = 3; })},
        {"bwd_mask_top_left", "mask at the row index, on a chunk of 5 rows at q_pos 35 of 40 keys", chunk},
        {"bwd_alibi_forgotten", "ALiBi forgotten, on a prefill of 30 with ALiBi", with(prefill(30), [](Spec& s) { s.alibi = true; })},
        {"bwd_alibi_row_relative", "ALiBi at the row index, on a chunk of 5 rows at q_pos 35 with ALiBi",
         with(chunk, [](Spec& s) { s.alibi = true; })},
        {"bwd_softcap_derivative_dropped", "softcap derivative dropped, on a prefill of 30, softcap 2, scores near the cap", near_cap},
        {"bwd_softcap_derivative_linear", "softcap derivative 1 - t, on a prefill of 30, softcap 2, scores near the cap", near_cap},
        {"bwd_dk_unscaled", "dk without the scale, on a prefill of 6 at scale 0.3", prefill(6)},
        {"bwd_dq_unscaled", "dq without the scale, on a prefill of 6 at scale 0.3", prefill(6)},
        {"bwd_dv_from_ds", "dv from dS, on a causal prefill of 6", prefill(6)},
        {"bwd_gqa_last_head_wins", "GQA last head wins, on a prefill of 10 with Hq 4, Hk 2",
         with(prefill(10), [](Spec& s) { s.Hq = 4, s.Hk = 2; })},
        {"bwd_gqa_head_modulo", "GQA head by modulus, on a prefill of 10 with Hq 6, Hk 2",
         with(prefill(10), [](Spec& s) { s.Hq = 6, s.Hk = 2; })},
        {"bwd_padding_rows_unwritten", "padding rows unwritten, on decode steps at kv_lens 10 and 20 of capacity 30",
         with(Spec{}, [](Spec& s) {
             s.q_rows = {1, 1}, s.keys = {10, 20}, s.q_pos = {9, 19}, s.capacity = 30, s.with_kv_lens = true;
         })},
        {"bwd_unseen_keys_unwritten", "unseen keys unwritten, on a decode step at 20 keys with window_left 4",
         with(decode(20), [](Spec& s) { s.window_left = 4; })},
        {"bwd_empty_row_nan", "NaN on an empty row, on 8 rows of 4 keys with window_left 1 (rows 5-7 empty)",
         with(Spec{}, [](Spec& s) { s.q_rows = {8}, s.keys = {4}, s.window_left = 1; })},
        // dk rows written inside dk.
        {"bwd_varlen_dkv_from_q", "varlen dk/dv by cu_seqlens_q, on varlen rows {2, 3} of keys {5, 3}",
         with(Spec{}, [](Spec& s) { s.mode = Mode::varlen, s.q_rows = {2, 3}, s.keys = {5, 3}, s.q_pos = {3, 0}; })},
        {"bwd_dq_block_overwrite", "dq of a key block overwritten, on a causal prefill of 100 (two 64-key blocks)", prefill(100)},
        {"bwd_d_over_all_keys", "D over masked keys too, on a causal prefill of 6", prefill(6)},
        // dout in the same span as out's: the wrong reads stay inside dout.
        {"bwd_dout_with_out_strides", "dout through out's strides, on a prefill of 6, out [B,H,T,D], dout [B,T,H,D]",
         with(prefill(6), [](Spec& s) { s.grad_layout = Layout::bthd; })},
    };
}

// The sinks' mutants change dsinks only: the sink mutant `name` is off there, on `shows`, by more
// than kMutantGap of the largest sink gradient, where the base agrees with the reference
// backward (the float64 oracle rounded: this file's float64 loops have no sinks).
void shows_sink_bug(const std::string& name, const Spec& shows) {
    const KernelEntry& m = entry(name);
    REQUIRE(m.role == KernelRole::mutant);
    REQUIRE(!shows.sinks.empty());
    const auto dsinks_of = [&](attncheck_kernel_v2_backward_fn fn) {
        Case c(shows, m.fn_v2);
        REQUIRE(fn(&c.p, &c.g) == ATTNCHECK_OK);
        return c.dsinks;
    };
    const std::vector<float> want = dsinks_of(attncheck_reference_kernel_v2_backward);
    const std::vector<float> base = dsinks_of(entry("bwd_naive").backward_v2), got = dsinks_of(m.backward_v2);
    double scale = 0, base_gap = 0, gap = 0;
    for (float x : want) scale = std::max(scale, double(std::fabs(x)));
    for (std::size_t h = 0; h < want.size(); ++h) {
        base_gap = std::max(base_gap, std::fabs(double(base[h]) - want[h]) / scale);
        gap = std::isfinite(got[h]) ? std::max(gap, std::fabs(double(got[h]) - want[h]) / scale) : INFINITY;
    }
    INFO(name << " (" << m.bug << "): dsinks off by " << gap << " of their scale " << scale << ", the base by " << base_gap);
    CHECK(scale > 0);
    CHECK(base_gap < 1e-4);
    CHECK(gap > kMutantGap);
}

Spec with_sinks(Spec s) {
    s.sinks.clear();
    for (int h = 0; h < s.Hq; ++h) s.sinks.push_back(0.5f - 0.75f * float(h));
    return s;
}

// The case of each mutant of dsinks (shows_sink_bug()).
std::vector<MutantCase> sink_mutant_cases() {
    return {
        {"bwd_dsinks_sign_flipped", "dsinks with the wrong sign, on a causal prefill of 6 with sinks", with_sinks(prefill(6))},
        {"bwd_dsinks_per_sequence", "dsinks reset per sequence, on a varlen batch of two",
         with(with_sinks(prefill(5)),
              [](Spec& s) { s.mode = Mode::varlen, s.q_rows = {5, 3}, s.keys = {5, 3}, s.q_pos = {0, 0}; })},
        {"bwd_dsinks_unwritten", "dsinks unwritten, on a causal prefill of 6 with sinks", with_sinks(prefill(6))},
    };
}

}  // namespace

TEST_CASE("backward mutants of dq, dk and dv: each wrong by far more than rounding on the case that shows its bug") {
    for (const MutantCase& m : gradient_mutant_cases())
        DYNAMIC_SECTION(m.shown) { shows_bug(m.mutant, m.shows); }
}

TEST_CASE("backward mutants of dsinks: each wrong by far more than rounding on the case that shows its bug") {
    for (const MutantCase& m : sink_mutant_cases())
        DYNAMIC_SECTION(m.shown) { shows_sink_bug(m.mutant, m.shows); }
}

TEST_CASE("every backward mutant has a targeted case above") {
    // The mutants the two tables above show, each once.
    std::set<std::string> targeted;
    for (const auto& cases : {gradient_mutant_cases(), sink_mutant_cases()})
        for (const MutantCase& m : cases) CHECK(targeted.insert(m.mutant).second);
    std::set<std::string> registered;
    for (const KernelEntry& e : kernel_registry())
        if (e.role == KernelRole::mutant && e.backward_v2) registered.insert(e.name);
    CHECK(registered == targeted);
}

TEST_CASE("backward mutants equal bwd_naive bit for bit where their bug cannot show") {
    // Each mutant is its one bug and nothing else: on calls its bug does not reach, it writes
    // exactly what the base writes (the mutants of the D term, of P's normalisation and of dv's
    // factor change every call, and are absent here).
    const std::vector<std::pair<std::string, std::vector<Spec>>> hides = {
        {"bwd_causal_forgotten", {with(prefill(6), [](Spec& s) { s.causal = 0; })}},
        {"bwd_window_off_by_one", {prefill(30)}},
        {"bwd_mask_top_left", {with(prefill(30), [](Spec& s) { s.window_left = 3; })}},  // q_pos 0
        {"bwd_alibi_forgotten", {prefill(30)}},
        {"bwd_alibi_row_relative", {with(prefill(30), [](Spec& s) { s.alibi = true; })}},  // q_pos 0
        {"bwd_softcap_derivative_dropped", {prefill(30)}},
        {"bwd_softcap_derivative_linear", {prefill(30)}},
        {"bwd_dk_unscaled", {with(prefill(6), [](Spec& s) { s.scale = 1.0f; })}},
        {"bwd_dq_unscaled", {with(prefill(6), [](Spec& s) { s.scale = 1.0f; })}},
        {"bwd_gqa_last_head_wins", {prefill(10)}},  // MHA: one query head per group
        {"bwd_gqa_head_modulo", {prefill(10), with(prefill(10), [](Spec& s) { s.Hq = 4, s.Hk = 1; })}},
        {"bwd_padding_rows_unwritten", {decode(20)}},  // no kv_lens: no padding rows
        {"bwd_unseen_keys_unwritten", {prefill(30)}},  // the last row sees every key
        {"bwd_empty_row_nan", {with(prefill(30), [](Spec& s) { s.window_left = 3; })}},
        {"bwd_varlen_dkv_from_q",
         {prefill(6), with(Spec{}, [](Spec& s) { s.mode = Mode::varlen, s.q_rows = {4, 3}, s.keys = {4, 3}, s.q_pos = {0, 0}; })}},
        {"bwd_dq_block_overwrite", {prefill(64), decode(64)}},  // one 64-key block
        {"bwd_dout_with_out_strides", {prefill(6)}},           // dout laid out as out
    };
    const KernelEntry& base = entry("bwd_naive");
    const auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                          [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); });
    };
    for (const auto& [name, specs] : hides) {
        const KernelEntry& m = entry(name);
        for (const Spec& s : specs) {
            Case c(s, base.fn_v2);
            INFO(name << " on " << describe_v2(c.p));
            const Grads want = c.run(base.backward_v2), got = c.run(m.backward_v2);
            REQUIRE(got.rc == ATTNCHECK_OK);
            CHECK(same(got.dq, want.dq));
            CHECK(same(got.dk, want.dk));
            CHECK(same(got.dv, want.dv));
        }
    }
}
