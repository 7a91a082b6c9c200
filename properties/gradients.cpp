// properties/gradients.cpp — the gradient properties: a kernel's backward pass (attncheck_grads_v2)
// against the float64 gradient oracle and its bound (reference/attention_grad.hpp), and the
// metamorphic and structural facts every correct backward obeys. The call itself and the
// read-back are at the top (call_backward); the properties follow, each one screen.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq(b) / Tk(b), Dk, Dv.
#include "properties/gradients.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "attncheck/tolerance.hpp"
#include "properties/calls.hpp"
#include "properties/stream.hpp"
#include "properties/thread_counts.hpp"

namespace attncheck::properties {

namespace {

// "[b,h,i,c]" of dq's logical element e, or "[b,hk,j,c]" of dk's / dv's.
std::string q_element(const GradCall& r, std::size_t e, int width) {
    return r.built.element(e / std::size_t(width), int(e % std::size_t(width)));
}
std::string key_element(const reference::GradOracle& o, std::size_t e, int width) {
    const std::size_t row = e / std::size_t(width);
    std::size_t b = 0;
    while (b + 1 < o.first_key.size() && o.first_key[b + 1] <= row) ++b;
    const std::size_t in_b = row - o.first_key[b], n = std::size_t(std::max(1, o.key_rows[b]));
    // Appended piece by piece: "[" + std::string trips g++ 12's false -Wrestrict once inlined.
    std::string s = "[";
    for (const std::size_t x : {b, in_b / n, in_b % n}) (s += std::to_string(x)) += ',';
    return (s += std::to_string(e % std::size_t(width))) += ']';
}

// Logical offsets (GradOracle order) of the key rows of a call: for b, for hk, for j < kv_rows_of.
template <class F>
void for_each_key_row(const attncheck_problem_v2& p, F&& f) {
    for (int b = 0; b < p.batch; ++b)
        for (int hk = 0; hk < p.kv_heads; ++hk)
            for (int j = 0; j < kv_rows_of(p, b); ++j) f(b, hk, j);
}

// Each of dq, dk, dv against the oracle, every element within its bound.
Verdict agree_grads(const std::string& what, const GradCall& r) {
    const reference::GradOracle& o = r.oracle;
    const struct {
        const char* name;
        const std::vector<float>& x;
        const std::vector<double>& y;
        const std::vector<double>& bound;
        int width;
        bool per_key;
    } grads[] = {{"dq", r.dq, o.dq, o.dq_bound, o.head_dim, false},
                 {"dk", r.dk, o.dk, o.dk_bound, o.head_dim, true},
                 {"dv", r.dv, o.dv, o.dv_bound, o.value_dim, true}};
    for (const auto& g : grads) {
        const Agreement a = check_against_bound(g.x, g.y, g.bound);
        if (a.ok) continue;
        const std::string at = g.per_key ? key_element(o, a.worst_index, g.width) : q_element(r, a.worst_index, g.width);
        return Verdict::fail(what + g.name + at + (g.per_key ? " [b,hk,j,c]: " : " [b,h,i,c]: ") + a.describe());
    }
    if (const Agreement a = check_against_bound(r.dsinks, o.dsinks, o.dsinks_bound); !a.ok)
        return Verdict::fail(what + "dsinks[" + std::to_string(a.worst_index) + "] [h]: " + a.describe());
    return Verdict::pass();
}

// x and y equal (-0 = +0; NaN never equal), or within the sum of two bounds for a kernel that
// declares deterministic_backward=no.
// (The bounds are there only for such a kernel: the calls of a deterministic one skip the oracle.)
bool same_gradient(const KernelUnderTest& kernel, float x, float y, const std::vector<double>& bound_x,
                   const std::vector<double>& bound_y, std::size_t e) {
    if (kernel.declaration.deterministic_backward) return x == y;
    return std::abs(double(x) - double(y)) <= bound_x[e] + bound_y[e];
}

std::string declared_deterministic(const KernelUnderTest& kernel) {
    return kernel.declaration.deterministic_backward
               ? " (the kernel declares deterministic_backward=yes, the default; one that is not by design declares "
                 "deterministic_backward=no)"
               : " (beyond the sum of the two bounds)";
}

}  // namespace

std::vector<float> dout_of(const KernelCase& c) {
    std::size_t rows = 0;
    for (int b = 0; b < c.batch; ++b) rows += std::size_t(c.q_heads) * std::size_t(c.q_lens[std::size_t(b)]);
    std::vector<float> dout(rows * std::size_t(c.value_dim));
    Stream rng(c.data_seed ^ 0xD0D7u);
    for (float& x : dout) x = round_to(c.dtype, float(rng.normal()));
    return dout;
}

GradCall call_backward(const KernelUnderTest& kernel, const KernelCase& c0, const KernelInputs& in,
                       const std::vector<float>& dout, const GradOptions& options) {
    if (!kernel.backward)
        throw std::invalid_argument(kernel.name + " has no backward pass: a gradient property cannot run on it");
    KernelCase c = c0;
    c.want_lse = true;
    GradCall r;
    r.built = build_case(c, in, options.build);
    attncheck_problem_v2& p = r.built.problem;
    if (options.forward == ForwardFrom::reference) {
        if (attncheck_reference_kernel_v2(&p) != ATTNCHECK_OK)
            throw std::logic_error("the reference forward refused a generated case: " + describe(c));
    } else if ((r.rc = invoke(kernel, p)) != 0) {
        r.forward_refused = true;
        return r;
    }
    const std::int32_t dt = c.dtype;
    const std::size_t es = dtype_size(dt), Dk = std::size_t(c.head_dim), Dv = std::size_t(c.value_dim);
    const std::vector<unsigned char> out_before = r.built.out_bytes;
    const std::vector<float> lse_before = r.built.lse_buffer;

    // dout in a layout of its own, rows Dv + 3 apart ([B, Hq, T, Dv + 3]; varlen [T, Hq, Dv + 3]),
    // so a kernel that reads it through out's strides is wrong; a layout=contiguous kernel gets
    // out's dense layout. What no row reads holds NaN (large finite values under
    // padding_values=finite).
    attncheck_grads_v2 g{};
    g.struct_size = std::int32_t(sizeof(attncheck_grads_v2));
    if (kernel.declaration.layout_any) {
        const std::int64_t row = c.value_dim + 3;
        if (p.cu_seqlens_q) g.dout.stride[0] = 0, g.dout.stride[1] = row, g.dout.stride[2] = row * c.q_heads;
        else g.dout.stride[2] = row, g.dout.stride[1] = row * p.q_len, g.dout.stride[0] = row * p.q_len * c.q_heads;
        g.dout.stride[3] = 1;
    } else {
        std::memcpy(g.dout.stride, p.out.stride, sizeof g.dout.stride);
    }
    std::int64_t dout_span = 1;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < r.built.q_lens[std::size_t(b)]; ++i)
                dout_span = std::max(dout_span, q_offset_v2(p, g.dout, b, h, i, c.value_dim - 1) + 1);
    std::vector<unsigned char> dout_bytes(std::size_t(dout_span) * es);
    const float unread = kernel.declaration.padding_finite ? 1024.0f : std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t e = 0; e < dout_span; ++e) store_element(dt, dout_bytes.data(), e, unread);
    g.dout.data = dout_bytes.data();
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < r.built.q_lens[std::size_t(b)]; ++i)
                for (int col = 0; col < c.value_dim; ++col)
                    store_element(dt, dout_bytes.data(), q_offset_v2(p, g.dout, b, h, i, col),
                                  dout[r.built.row_of(b, h, i) * Dv + std::size_t(col)]);
    const std::vector<unsigned char> dout_before = dout_bytes;

    // dq, dk, dv laid out as q, k, v, each between guards.
    std::vector<std::int64_t> wq, wk, wv;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < r.built.q_lens[std::size_t(b)]; ++i)
                for (int col = 0; col < c.head_dim; ++col) wq.push_back(q_offset_v2(p, p.q, b, h, i, col));
    for_each_key_row(p, [&](int b, int hk, int j) {
        for (int col = 0; col < c.head_dim; ++col) wk.push_back(kv_offset_v2(p, p.k, b, hk, j, col));
        for (int col = 0; col < c.value_dim; ++col) wv.push_back(kv_offset_v2(p, p.v, b, hk, j, col));
    });
    const auto span = [](const std::vector<std::int64_t>& w) {
        return w.empty() ? std::size_t(1) : std::size_t(*std::max_element(w.begin(), w.end()) + 1);
    };
    GuardedTensor dq(dt, span(wq), wq), dk(dt, span(wk), wk), dv(dt, span(wv), wv);
    // With sinks, their gradients: Hq float32 between guards.
    std::vector<std::int64_t> ws;
    for (int h = 0; p.sinks && h < p.q_heads; ++h) ws.push_back(h);
    GuardedTensor ds(ATTNCHECK_DTYPE_F32, std::max<std::size_t>(ws.size(), 1), ws);
    if (options.zero_outputs) dq.reset(true), dk.reset(true), dv.reset(true), ds.reset(true);
    g.dq.data = dq.data(), g.dk.data = dk.data(), g.dv.data = dv.data();
    g.dsinks = p.sinks ? static_cast<float*>(ds.data()) : nullptr;
    std::memcpy(g.dq.stride, p.q.stride, sizeof g.dq.stride);
    std::memcpy(g.dk.stride, p.k.stride, sizeof g.dk.stride);
    std::memcpy(g.dv.stride, p.v.stride, sizeof g.dv.stride);

    if (options.oracle) {
        r.oracle = reference::attention_grad_oracle(p, g.dout, oracle_options(kernel.declaration));
    } else {  // its layout only: where each logical row is
        r.oracle.head_dim = c.head_dim, r.oracle.value_dim = c.value_dim;
        r.oracle.first_row = r.built.first_row;
        r.oracle.q_len = r.built.q_lens;
        r.oracle.first_key.assign(std::size_t(p.batch) + 1, 0);
        for (int b = 0; b < p.batch; ++b) {
            r.oracle.key_rows.push_back(kv_rows_of(p, b));
            r.oracle.first_key[std::size_t(b) + 1] = r.oracle.first_key[std::size_t(b)] + std::size_t(p.kv_heads * kv_rows_of(p, b));
        }
    }
    r.rc = kernel.backward(&p, &g);

    // What the call must not have done, first found first.
    for (const auto& [name, t] : {std::pair<const char*, const GuardedTensor*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"dsinks", &ds}})
        if (r.side_effect.empty())
            if (const std::string w = t->write_outside(name); !w.empty()) r.side_effect = "the backward " + w;
    if (r.side_effect.empty()) r.side_effect = r.built.input_change();
    if (r.side_effect.empty() && r.built.out_bytes != out_before) r.side_effect = "out (an input of the backward) changed";
    if (r.side_effect.empty() && std::memcmp(r.built.lse_buffer.data(), lse_before.data(), lse_before.size() * sizeof(float)) != 0)
        r.side_effect = "lse (an input of the backward) changed";
    if (r.side_effect.empty() && dout_bytes != dout_before) r.side_effect = "dout changed";
    if (r.rc != 0) return r;

    // The results in logical order.
    for (std::size_t e = 0; e < wq.size(); ++e) {
        if (r.side_effect.empty() && dq.unwritten(wq[e]))
            r.side_effect = "dq" + r.built.element(e / Dk, int(e % Dk)) + " [b,h,i,c] was never written";
        r.dq.push_back(dq.at(wq[e]));
    }
    for (const std::int64_t h : ws) {
        if (r.side_effect.empty() && ds.unwritten(h)) r.side_effect = "dsinks[" + std::to_string(h) + "] was never written";
        r.dsinks.push_back(ds.at(h));
    }
    for (std::size_t e = 0; e < wk.size(); ++e) r.dk.push_back(dk.at(wk[e]));
    for (std::size_t e = 0; e < wv.size(); ++e) r.dv.push_back(dv.at(wv[e]));
    for (const auto& [name, w, t] : {std::tuple<const char*, const std::vector<std::int64_t>*, const GuardedTensor*>{"dk", &wk, &dk},
                                     {"dv", &wv, &dv}})
        for (std::size_t e = 0; e < w->size() && r.side_effect.empty(); ++e)
            if (t->unwritten((*w)[e]))
                r.side_effect = std::string(name) + " element " + std::to_string(e) +
                                " (logical order b, hk, j, c) was never written (every k / v row gets its gradient, 0 where no row sees the key)";
    return r;
}

// ---- the properties ---------------------------------------------------------------------------

namespace {

Verdict grad_agreement(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelInputs in = fill_inputs(c);
    const GradCall r = call_backward(kernel, c, in, dout_of(c));
    if (r.rc != 0) return unsupported(r.rc);
    return agree_grads("", r);
}

Verdict grad_writes(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelInputs in = fill_inputs(c);
    const GradCall r = call_backward(kernel, c, in, dout_of(c), {.oracle = false});
    if (!r.side_effect.empty()) return Verdict::fail(r.side_effect);
    if (r.rc != 0) return unsupported(r.rc);
    return Verdict::pass();
}

Verdict grad_causality(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelInputs in = fill_inputs(c);
    const std::vector<float> dout = dout_of(c);
    // Bounds only for a backward that is not deterministic (compared within them, not exactly).
    const GradOptions options{.oracle = !kernel.declaration.deterministic_backward};
    const GradCall f = call_backward(kernel, c, in, dout, options);
    if (f.rc != 0) return unsupported(f.rc);
    const std::size_t Dk = std::size_t(c.head_dim), Dv = std::size_t(c.value_dim);
    Stream rng(c.data_seed ^ 0xCA05A1u);

    // (1) Key j0 of each sequence: the rows that do not see it get another dout. dk_j0 and dv_j0
    //     take nothing from those rows.
    std::vector<float> dout2 = dout;
    std::vector<int> j0(std::size_t(c.batch), -1);
    for (int b = 0; b < c.batch; ++b) {
        const int Tk = c.kv_lens[std::size_t(b)];
        if (Tk == 0) continue;
        j0[std::size_t(b)] = int(c.data_seed % std::uint32_t(Tk));
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i)
                if (!c.visible(b, i, j0[std::size_t(b)]))
                    for (std::size_t col = 0; col < Dv; ++col)
                        dout2[f.built.row_of(b, h, i) * Dv + col] = round_to(c.dtype, float(rng.normal() * 4));
    }
    const GradCall s = call_backward(kernel, c, in, dout2, options);
    if (s.rc != 0) return Verdict::fail("the backward refused (returned " + std::to_string(s.rc) + ") the case it took with another dout");
    for (int b = 0; b < c.batch; ++b) {
        if (j0[std::size_t(b)] < 0) continue;
        for (int hk = 0; hk < c.kv_heads; ++hk) {
            const std::size_t kr = f.oracle.key(b, hk, j0[std::size_t(b)]);
            for (const auto& [name, x, y, bx, by, width] :
                 {std::tuple{"dk", &f.dk, &s.dk, &f.oracle.dk_bound, &s.oracle.dk_bound, Dk},
                  std::tuple{"dv", &f.dv, &s.dv, &f.oracle.dv_bound, &s.oracle.dv_bound, Dv}})
                for (std::size_t col = 0; col < width; ++col) {
                    const std::size_t e = kr * width + col;
                    if (!same_gradient(kernel, (*x)[e], (*y)[e], *bx, *by, e))
                        return Verdict::fail(std::string(name) + key_element(f.oracle, e, int(width)) + " [b,hk,j,c] was " +
                                             fmt((*x)[e]) + ", now " + fmt((*y)[e]) + " after dout changed in the rows that do not see key " +
                                             std::to_string(j0[std::size_t(b)]) + declared_deterministic(kernel));
                }
        }
    }

    // (2) Row r of each sequence: the keys it does not see get other k and v (out and lse of the
    //     other rows follow them). dq of row r takes nothing from those keys.
    KernelInputs moved = in;
    std::vector<int> row(std::size_t(c.batch));
    bool any = false;
    for (int b = 0; b < c.batch; ++b) {
        const int Tq = c.q_lens[std::size_t(b)];
        row[std::size_t(b)] = Tq > 1 ? int(c.data_seed % std::uint32_t(Tq - 1)) : 0;
        for (int hk = 0; hk < c.kv_heads; ++hk)
            for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) {
                if (c.visible(b, row[std::size_t(b)], j)) continue;
                any = true;
                for (int col = 0; col < c.head_dim; ++col) moved.k_at(b, hk, j, col, c) = round_to(c.dtype, float(rng.normal() * 4));
                for (int col = 0; col < c.value_dim; ++col) moved.v_at(b, hk, j, col, c) = round_to(c.dtype, float(rng.normal() * 4));
            }
    }
    if (!any) return Verdict::pass();
    const GradCall m = call_backward(kernel, c, moved, dout, options);
    if (m.rc != 0) return Verdict::fail("the backward refused (returned " + std::to_string(m.rc) + ") the case it took with other keys");
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h) {
            const std::size_t rr = f.built.row_of(b, h, row[std::size_t(b)]);
            for (std::size_t col = 0; col < Dk; ++col) {
                const std::size_t e = rr * Dk + col;
                if (!same_gradient(kernel, f.dq[e], m.dq[e], f.oracle.dq_bound, m.oracle.dq_bound, e))
                    return Verdict::fail("dq" + f.built.element(rr, int(col)) + " [b,h,i,c] was " + fmt(f.dq[e]) + ", now " +
                                         fmt(m.dq[e]) + " after the keys and values row " + std::to_string(row[std::size_t(b)]) +
                                         " does not see were replaced" + declared_deterministic(kernel));
            }
        }
    return Verdict::pass();
}

Verdict grad_invisible_zero(const KernelUnderTest& kernel, const KernelCase& c) {
    // NaN (or Inf) in padding and gaps, large finite garbage in the keys no row sees.
    KernelCase poisoned = c;
    poisoned.poison_invisible = true;
    const KernelInputs in = fill_inputs(c);
    const GradCall r = call_backward(kernel, poisoned, in, dout_of(c));
    if (r.rc != 0) return unsupported(r.rc);
    const reference::GradOracle& o = r.oracle;
    for (std::size_t kr = 0; kr < o.key_seen.size(); ++kr) {
        if (o.key_seen[kr]) continue;
        for (const auto& [name, x, width] : {std::tuple{"dk", &r.dk, o.head_dim}, std::tuple{"dv", &r.dv, o.value_dim}})
            for (int col = 0; col < width; ++col) {
                const std::size_t e = kr * std::size_t(width) + std::size_t(col);
                if ((*x)[e] != 0.0f)
                    return Verdict::fail(std::string(name) + key_element(o, e, width) + " [b,hk,j,c] is " + fmt((*x)[e]) +
                                         " for a key no row sees (padding, outside every window, or after every row): must be exactly 0");
            }
    }
    const std::vector<char> empty = empty_rows_of(c);
    for (std::size_t row = 0; row < empty.size(); ++row)
        for (int col = 0; empty[row] && col < o.head_dim; ++col)
            if (const float x = r.dq[row * std::size_t(o.head_dim) + std::size_t(col)]; x != 0.0f)
                return Verdict::fail("dq" + r.built.element(row, col) + " [b,h,i,c] is " + fmt(x) +
                                     " in a row with no visible key: must be exactly 0");
    return agree_grads("with garbage in the keys no row sees and NaN/Inf in the padding: ", r);
}

Verdict grad_determinism(const KernelUnderTest& kernel, const KernelCase& c) {
    // The same call again with dq, dk, dv prefilled with zeros (a kernel must not read them),
    // and once on another thread count (other_thread_count).
    const KernelInputs in = fill_inputs(c);
    const std::vector<float> dout = dout_of(c);
    const GradCall a = call_backward(kernel, c, in, dout, {.oracle = !kernel.declaration.deterministic_backward});
    if (a.rc != 0) return unsupported(a.rc);
    const GradCall b = call_backward(kernel, c, in, dout, {.zero_outputs = true, .oracle = false});
    const int threads = omp_get_max_threads(), again_on = other_thread_count();
    omp_set_num_threads(again_on);
    const GradCall d = call_backward(kernel, c, in, dout, {.oracle = false});
    omp_set_num_threads(threads);
    if (b.rc != 0 || d.rc != 0)
        return Verdict::fail("the same backward call returned " + std::to_string(a.rc) + ", then " + std::to_string(b.rc) +
                             ", then " + std::to_string(d.rc));
    const reference::GradOracle& o = a.oracle;
    for (const auto& [other, how] : {std::pair{&b, std::string("with dq, dk, dv prefilled with 0 instead of NaN")},
                                     std::pair{&d, on_threads(again_on, threads)}})
        for (const auto& [name, x, y, exact, bound, width, per_key] :
             {std::tuple{"dq", &a.dq, &other->dq, &o.dq, &o.dq_bound, o.head_dim, false},
              std::tuple{"dk", &a.dk, &other->dk, &o.dk, &o.dk_bound, o.head_dim, true},
              std::tuple{"dv", &a.dv, &other->dv, &o.dv, &o.dv_bound, o.value_dim, true}})
            for (std::size_t e = 0; e < x->size(); ++e) {
                // Bitwise for a deterministic backward; within the bound otherwise.
                const bool same = kernel.declaration.deterministic_backward
                                      ? std::memcmp(&(*x)[e], &(*y)[e], sizeof(float)) == 0
                                      : std::abs(double((*y)[e]) - (*exact)[e]) <= (*bound)[e];
                if (!same)
                    return Verdict::fail(std::string(name) +
                                         (per_key ? key_element(o, e, width) + " [b,hk,j,c]"
                                                  : a.built.element(e / std::size_t(width), int(e % std::size_t(width))) + " [b,h,i,c]") +
                                         " was " + fmt((*x)[e]) + ", " + how + " it is " + fmt((*y)[e]) + declared_deterministic(kernel));
            }
    for (const auto& [other, how] : {std::pair{&b, std::string("with dq, dk, dv prefilled with 0 instead of NaN")},
                                     std::pair{&d, on_threads(again_on, threads)}})
        for (std::size_t h = 0; h < a.dsinks.size(); ++h) {
            const bool same = kernel.declaration.deterministic_backward
                                  ? std::memcmp(&a.dsinks[h], &other->dsinks[h], sizeof(float)) == 0
                                  : std::abs(double(other->dsinks[h]) - o.dsinks[h]) <= o.dsinks_bound[h];
            if (!same)
                return Verdict::fail("dsinks[" + std::to_string(h) + "] was " + fmt(a.dsinks[h]) + ", " + how + " it is " +
                                     fmt(other->dsinks[h]) + declared_deterministic(kernel));
        }
    return Verdict::pass();
}

Verdict grad_gqa_equals_replicated(const KernelUnderTest& kernel, const KernelCase& c) {
    // The gradient of a kv head is the sum of the gradients of its copies in the replicated MHA.
    const KernelInputs in = fill_inputs(c);
    const std::vector<float> dout = dout_of(c);
    const GradCall f = call_backward(kernel, c, in, dout);
    if (f.rc != 0) return unsupported(f.rc);
    KernelCase mha = c;
    KernelInputs rin = in;
    replicate_kv_heads(mha, rin);
    const GradCall m = call_backward(kernel, mha, rin, dout);
    if (m.rc != 0) {
        const std::string e = refused_within_declaration(kernel, m.built.problem, m.rc, "with the K/V heads replicated");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    const std::size_t Dk = std::size_t(c.head_dim), Dv = std::size_t(c.value_dim);
    for (std::size_t e = 0; e < f.dq.size(); ++e)
        if (!(std::abs(double(f.dq[e]) - double(m.dq[e])) <= f.oracle.dq_bound[e] + m.oracle.dq_bound[e]))
            return Verdict::fail("dq" + f.built.element(e / Dk, int(e % Dk)) + " [b,h,i,c] is " + fmt(f.dq[e]) + " with Hk = " +
                                 std::to_string(c.kv_heads) + ", " + fmt(m.dq[e]) + " with the K/V heads replicated: " +
                                 difference_text(f.dq[e], m.dq[e], f.oracle.dq[e], "replicated", f.oracle.dq_bound[e] + m.oracle.dq_bound[e],
                                                 "the sum of the two calls' bounds"));
    const int group = c.q_heads / c.kv_heads;
    for (int b = 0; b < c.batch; ++b)
        for (int hk = 0; hk < c.kv_heads; ++hk)
            for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j)
                for (const auto& [name, x, y, bx, by, width] :
                     {std::tuple{"dk", &f.dk, &m.dk, &f.oracle.dk_bound, &m.oracle.dk_bound, Dk},
                      std::tuple{"dv", &f.dv, &m.dv, &f.oracle.dv_bound, &m.oracle.dv_bound, Dv}})
                    for (std::size_t col = 0; col < width; ++col) {
                        double sum = 0, bound = (*bx)[f.oracle.key(b, hk, j) * width + col];
                        for (int r = 0; r < group; ++r) {
                            const std::size_t e = m.oracle.key(b, hk * group + r, j) * width + col;
                            sum += double((*y)[e]);
                            bound += (*by)[e];
                        }
                        const float x0 = (*x)[f.oracle.key(b, hk, j) * width + col];
                        if (!(std::abs(double(x0) - sum) <= bound))
                            return Verdict::fail(std::string(name) + key_element(f.oracle, f.oracle.key(b, hk, j) * width + col, int(width)) +
                                                 " [b,hk,j,c] is " + fmt(x0) + ", but the sum over the " + std::to_string(group) +
                                                 " replicated heads of its group is " + fmt(sum) + ": " +
                                                 difference_text(x0, sum, 0, "summed", bound, "the sum of the calls' bounds") +
                                                 (std::abs(double(x0) * group - sum) <= bound ? " (one head's gradient written for the group?)" : ""));
                    }
    for (std::size_t h = 0; h < f.dsinks.size(); ++h)
        if (!(std::abs(double(f.dsinks[h]) - double(m.dsinks[h])) <= f.oracle.dsinks_bound[h] + m.oracle.dsinks_bound[h]))
            return Verdict::fail("dsinks[" + std::to_string(h) + "] is " + fmt(f.dsinks[h]) + " with Hk = " + std::to_string(c.kv_heads) +
                                 ", " + fmt(m.dsinks[h]) + " with the K/V heads replicated: beyond the sum of the two calls' bounds");
    return Verdict::pass();
}

Verdict grad_batch(const KernelUnderTest& kernel, const KernelCase& c) {
    // Each sequence alone against its rows and keys inside the batch.
    const KernelInputs in = fill_inputs(c);
    const std::vector<float> dout = dout_of(c);
    const GradCall f = call_backward(kernel, c, in, dout);
    if (f.rc != 0) return unsupported(f.rc);
    const std::size_t Dk = std::size_t(c.head_dim), Dv = std::size_t(c.value_dim);
    // A sink's gradient sums over every row of its head, whatever the sequence: the batch's is
    // compared with the sum of the sequences' own (when every sequence was taken alone).
    std::vector<double> sink_sum(f.dsinks.size()), sink_bound(f.oracle.dsinks_bound.begin(), f.oracle.dsinks_bound.end());
    bool every_sequence = true;
    for (int b = 0; b < c.batch; ++b) {
        const KernelCase alone = sequence_alone(c, b);
        const std::size_t first = f.built.first_row[std::size_t(b)], rows = f.built.first_row[std::size_t(b) + 1] - first;
        const std::vector<float> dout_b(dout.begin() + std::ptrdiff_t(first * Dv), dout.begin() + std::ptrdiff_t((first + rows) * Dv));
        const GradCall s = call_backward(kernel, alone, sequence_inputs(c, in, b), dout_b);
        if (s.rc != 0) {
            const std::string e =
                refused_within_declaration(kernel, s.built.problem, s.rc, "as sequence " + std::to_string(b) + " alone");
            if (!e.empty()) return Verdict::fail(e);
            every_sequence = false;
            continue;
        }
        for (std::size_t h = 0; h < sink_sum.size(); ++h) sink_sum[h] += s.dsinks[h], sink_bound[h] += s.oracle.dsinks_bound[h];
        for (std::size_t e = 0; e < rows * Dk; ++e) {
            const std::size_t at = first * Dk + e;
            if (!(std::abs(double(f.dq[at]) - double(s.dq[e])) <= f.oracle.dq_bound[at] + s.oracle.dq_bound[e]))
                return Verdict::fail("sequence " + std::to_string(b) + " inside the batch: dq" + f.built.element(at / Dk, int(at % Dk)) +
                                     " [b,h,i,c] is " + fmt(f.dq[at]) + ", alone " + fmt(s.dq[e]) + ": " +
                                     difference_text(f.dq[at], s.dq[e], f.oracle.dq[at], "alone",
                                                     f.oracle.dq_bound[at] + s.oracle.dq_bound[e], "the sum of the two calls' bounds"));
        }
        for (int hk = 0; hk < c.kv_heads; ++hk)
            for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j)
                for (const auto& [name, x, y, bx, by, width] :
                     {std::tuple{"dk", &f.dk, &s.dk, &f.oracle.dk_bound, &s.oracle.dk_bound, Dk},
                      std::tuple{"dv", &f.dv, &s.dv, &f.oracle.dv_bound, &s.oracle.dv_bound, Dv}})
                    for (std::size_t col = 0; col < width; ++col) {
                        const std::size_t in_batch = f.oracle.key(b, hk, j) * width + col, own = s.oracle.key(0, hk, j) * width + col;
                        if (!(std::abs(double((*x)[in_batch]) - double((*y)[own])) <= (*bx)[in_batch] + (*by)[own]))
                            return Verdict::fail("sequence " + std::to_string(b) + " inside the batch: " + name +
                                                 key_element(f.oracle, in_batch, int(width)) + " [b,hk,j,c] is " + fmt((*x)[in_batch]) +
                                                 ", alone " + fmt((*y)[own]) + ": beyond the sum of the two calls' bounds " +
                                                 fmt((*bx)[in_batch] + (*by)[own]));
                    }
    }
    for (std::size_t h = 0; every_sequence && h < sink_sum.size(); ++h)
        if (!(std::abs(double(f.dsinks[h]) - sink_sum[h]) <= sink_bound[h]))
            return Verdict::fail("dsinks[" + std::to_string(h) + "] of the batch is " + fmt(f.dsinks[h]) + ", the sum of the sequences' own " +
                                 fmt(sink_sum[h]) + ": beyond the sum of the calls' bounds " + fmt(sink_bound[h]));
    return Verdict::pass();
}

Verdict grad_forward_consistency(const KernelUnderTest& kernel, const KernelCase& c) {
    // The backward on the kernel's own out and lse: the oracle charges their distance from the
    // exact ones, so a backward that reads them as the forward wrote them agrees.
    const KernelInputs in = fill_inputs(c);
    const GradCall r = call_backward(kernel, c, in, dout_of(c), {.forward = ForwardFrom::kernel});
    if (r.rc != 0) return unsupported(r.rc);
    return agree_grads("on the kernel's own forward out and lse: ", r);
}

Verdict grad_no_oob_read(const KernelUnderTest& kernel, const KernelCase& c) {
    // q, k, v against guard pages (a read past their end faults), then in ordinary memory: the
    // same bits.
    const KernelInputs in = fill_inputs(c);
    const std::vector<float> dout = dout_of(c);
    const GradCall a = call_backward(kernel, c, in, dout, {.build = {.guard_page_inputs = true}, .oracle = false});
    if (a.rc != 0) return unsupported(a.rc);
    const GradCall b = call_backward(kernel, c, in, dout, {.oracle = !kernel.declaration.deterministic_backward});
    if (b.rc != 0) return Verdict::fail("the backward refused (returned " + std::to_string(b.rc) + ") the case with the inputs in ordinary memory");
    // A backward that is not deterministic by design is held to the bound instead.
    if (!kernel.declaration.deterministic_backward) return agree_grads("with the inputs against a guard page: ", b);
    const auto same = [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0 || (std::isnan(x) && std::isnan(y)); };
    for (const auto& [name, x, y] : {std::tuple{"dq", &a.dq, &b.dq}, std::tuple{"dk", &a.dk, &b.dk}, std::tuple{"dv", &a.dv, &b.dv}})
        for (std::size_t e = 0; e < x->size(); ++e)
            if (!same((*x)[e], (*y)[e]))
                return Verdict::fail(std::string(name) + " element " + std::to_string(e) +
                                     " (logical order) is " + fmt((*x)[e]) + " with the inputs against a guard page and " +
                                     fmt((*y)[e]) + " in ordinary memory: the backward reads what lies around its inputs");
    for (std::size_t h = 0; h < a.dsinks.size(); ++h)
        if (!same(a.dsinks[h], b.dsinks[h]))
            return Verdict::fail("dsinks[" + std::to_string(h) + "] is " + fmt(a.dsinks[h]) + " with the inputs against a guard page and " +
                                 fmt(b.dsinks[h]) + " in ordinary memory: the backward reads what lies around its inputs");
    return Verdict::pass();
}

}  // namespace

// The gradient properties' longest key sequence: past two 64-key blocks and the 128 that block
// sizes of backward kernels cluster at, while the float64 forward and gradient oracles of each
// case (quadratic in the keys) keep the test stage within its budget.
constexpr int kGradMaxKv = 144;

const std::vector<KernelProperty>& gradient_properties() {
    static const std::vector<KernelProperty> all = {
        {"grad_agreement", "dq, dk, dv agree with the float64 gradient oracle within the bound (the D term, P from lse, the scale, softcap's derivative)",
         {.backward = true, .max_kv = kGradMaxKv}, grad_agreement},
        {"grad_writes", "the backward writes every element of dq, dk, dv (padding rows too) and nothing else, and leaves q, k, v, out, lse, dout unchanged",
         {.backward = true, .max_kv = kGradMaxKv}, grad_writes},
        {"grad_causality", "dk_j, dv_j take nothing from the rows that do not see key j, dq_i nothing from the keys row i does not see (exact when deterministic)",
         {.need_causal_future = true, .backward = true, .max_kv = kGradMaxKv}, grad_causality},
        {"grad_invisible_zero", "keys no row sees and padding rows get exactly 0 in dk, dv, empty rows 0 in dq, with garbage and NaN there",
         {.need_invisible = true, .backward = true, .max_kv = kGradMaxKv}, grad_invisible_zero},
        {"grad_determinism", "the same backward call twice (outputs prefilled otherwise), and on one thread, gives bitwise the same dq, dk, dv",
         {.backward = true, .max_kv = kGradMaxKv}, grad_determinism},
        {"grad_gqa_equals_replicated", "a kv head's dk, dv are the sums over its group of the replicated MHA's (accumulated, not written per head)",
         {.need_gqa = true, .backward = true, .max_kv = kGradMaxKv}, grad_gqa_equals_replicated},
        {"grad_batch", "a sequence's gradients alone equal its gradients inside a batch (dense or packed)", {.min_batch = 2, .backward = true, .max_kv = kGradMaxKv}, grad_batch},
        {"grad_forward_consistency", "the backward on the kernel's own forward out and lse agrees with the oracle within the bound",
         {.backward = true, .max_kv = kGradMaxKv}, grad_forward_consistency},
        {"grad_no_oob_read", "q, k, v against a guard page: the backward faults on an over-read, and its result does not change with the placement",
         {.backward = true, .max_kv = kGradMaxKv}, grad_no_oob_read},
    };
    return all;
}

}  // namespace attncheck::properties
