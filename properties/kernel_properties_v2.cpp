// properties/kernel_properties_v2.cpp — the version 2 kernel properties: their checks, and the
// table kernel_properties_v2() (at the bottom) that registers them.
//
// Every kernel call goes through call_v2(): the case is built afresh (build_v2: poison in every
// element outside the logical problem, out and lse prefilled with a "never written" NaN between
// guards), the kernel runs, and the result is read back in the oracle's logical order (b, h, i, c).
// A kernel that declares empty_rows=nan has its empty rows checked to be NaN and then read as 0,
// so every other property holds it to the rest of out.
#include "properties/kernel_properties_v2.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

#include "attncheck/problem_v2.hpp"
#include "attncheck/tolerance.hpp"
#include "properties/stream.hpp"
#include "reference/attention_v2.hpp"

namespace attncheck::properties {
namespace {

// A dense or paged layout has one Tq for every sequence: the shortest, when the case had several.
void one_q_len(KernelCaseV2& c) {
    const int tq = *std::min_element(c.q_lens.begin(), c.q_lens.end());
    for (int& n : c.q_lens) n = tq;
}

std::string fmt(double x) {
    std::ostringstream s;
    s.precision(9);
    s << x;
    return s.str();
}

struct CallV2 {
    int rc = 0;
    BuiltV2 built;
    std::vector<float> out;  // logical [rows, Dv]
    std::vector<float> lse;  // logical [rows], empty without lse
    std::string convention_violation;
};

// Rows (logical order) with no visible key.
std::vector<char> empty_rows_of(const KernelCaseV2& c) {
    std::vector<char> empty;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) {
                bool any = false;
                for (int j = 0; j < c.kv_lens[std::size_t(b)] && !any; ++j) any = c.visible(b, i, j);
                empty.push_back(any ? 0 : 1);
            }
    return empty;
}

CallV2 call_v2(const KernelUnderTest& kernel, const KernelCaseV2& c, const LogicalInputsV2& in,
               const BuildOptionsV2& options = {}) {
    CallV2 r;
    r.built = build_v2(c, in, options);
    r.rc = kernel.fn_v2(&r.built.problem);
    if (r.rc != 0) return r;
    r.out = r.built.out_logical();
    r.lse = r.built.lse_logical();
    if (kernel.declaration.empty_rows_nan) {
        const std::vector<char> empty = empty_rows_of(c);
        const std::size_t Dv = std::size_t(c.value_dim);
        for (std::size_t row = 0; row < empty.size(); ++row) {
            if (!empty[row]) continue;
            for (std::size_t col = 0; col < Dv; ++col) {
                float& x = r.out[row * Dv + col];
                if (!std::isnan(x) && r.convention_violation.empty())
                    r.convention_violation = "out" + r.built.element(row, int(col)) + " [b,h,i,c] is " + fmt(x) +
                                             " in a row with no visible key, but the kernel declares empty_rows=nan";
                x = 0.0f;
            }
        }
    }
    return r;
}

Verdict unsupported(int rc) { return Verdict::unsupported("kernel returned " + std::to_string(rc) + " (unsupported)"); }

// The second call of a metamorphic pair was refused. Outside the declaration (another layout for
// a layout=contiguous kernel, a padded cache for padding=no) that is the kernel's right and
// there is nothing to compare: "" (the caller goes on). Within it, a refusal of the same logical
// problem posed another way is a failure.
std::string refused_within_declaration(const KernelUnderTest& kernel, const CallV2& r, const std::string& how) {
    if (!kernel.declaration.unsupported_reason(r.built.problem).empty()) return {};
    return "the same problem " + how + " was refused (returned " + std::to_string(r.rc) +
           ") although it is within the declaration";
}

reference::OracleV2 oracle_of(const KernelUnderTest& kernel, const KernelCaseV2& c, const LogicalInputsV2& in) {
    KernelCaseV2 clean = c;
    clean.poison_invisible = false;
    const BuiltV2 b = build_v2(clean, in);
    return reference::attention_v2_oracle(b.problem, {.probabilities_rounded = kernel.declaration.rounds_probabilities,
                                                      .tanh_ulps = double(kernel.declaration.tanh_ulps)});
}

// out against the oracle, every element within its bound.
Verdict agree_out(const std::string& what, const CallV2& r, const reference::OracleV2& o) {
    const Agreement a = check_against_bound(r.out, o.out, o.out_bound);
    if (a.ok) return Verdict::pass();
    const std::size_t Dv = std::size_t(o.value_dim);
    return Verdict::fail(what + r.built.element(a.worst_index / Dv, int(a.worst_index % Dv)) + " [b,h,i,c]: " + a.describe());
}

// lse against the oracle: an empty row's lse is exactly -inf, the others within their bound.
Verdict agree_lse(const std::string& what, const CallV2& r, const reference::OracleV2& o) {
    std::vector<double> oracle = o.lse, bound = o.lse_bound;
    std::vector<float> candidate = r.lse;
    for (std::size_t row = 0; row < oracle.size(); ++row) {
        if (std::isfinite(oracle[row])) continue;
        if (!(std::isinf(candidate[row]) && candidate[row] < 0))
            return Verdict::fail(what + r.built.element(row, 0).substr(0, r.built.element(row, 0).rfind(',')) +
                                 "] [b,h,i] is " + fmt(candidate[row]) + " for a row with no visible key: must be -inf");
        oracle[row] = 0, bound[row] = 0, candidate[row] = 0.0f;
    }
    const Agreement a = check_against_bound(candidate, oracle, bound);
    if (a.ok) return Verdict::pass();
    const std::string e = r.built.element(a.worst_index, 0);
    std::string msg = what + e.substr(0, e.rfind(',')) + "] [b,h,i]: " + a.describe();
    const double log2_ratio = a.oracle != 0 ? a.candidate / a.oracle : 0;
    if (std::abs(log2_ratio - 1.0 / std::log(2.0)) < 1e-3) msg += " (the candidate is the oracle / ln 2: lse in log2 units?)";
    return Verdict::fail(msg);
}

// How far two results x (the candidate) and y (the same problem posed otherwise, `how_y`) are
// apart, for a failure message: "the difference 0.2 is 3.1x <what the bound is> 0.06", or, when
// one of them is NaN or infinite, which one ("the candidate is NaN where the float64 oracle is
// finite"): a ratio of NaN or Inf says nothing.
std::string difference_text(double x, double y, double oracle, const std::string& how_y, double bound,
                            const std::string& bound_is) {
    const auto kind = [](double v) { return std::isnan(v) ? std::string("NaN") : std::string(v > 0 ? "+Inf" : "-Inf"); };
    const std::string where = std::isfinite(oracle) ? " where the float64 oracle is finite (" + fmt(oracle) + ")" : "";
    if (!std::isfinite(x) && !std::isfinite(y))
        return "both results are non-finite (the candidate " + kind(x) + ", " + how_y + " " + kind(y) + ")" + where;
    if (!std::isfinite(x)) return "the candidate is non-finite (" + kind(x) + ")" + where;
    if (!std::isfinite(y)) return "the result " + how_y + " is non-finite (" + kind(y) + ")" + where;
    const double diff = std::abs(x - y);
    if (!(bound > 0)) return "they differ by " + fmt(diff) + " where both must be exact (bound 0)";
    return "the difference " + fmt(diff) + " is " + fmt(diff / bound) + "x " + bound_is + " " + fmt(bound);
}

// Two results of the same logical problem: every element within the sum of both calls' bounds.
// note_bitwise: a bitwise difference within the bounds is noted (the run counts it).
Verdict same_within(const std::string& what, const CallV2& a, const reference::OracleV2& oa, const CallV2& b,
                    const reference::OracleV2& ob, const std::string& how_b) {
    std::vector<double> reference(b.out.begin(), b.out.end()), bound(oa.out_bound.size());
    for (std::size_t i = 0; i < bound.size(); ++i) bound[i] = oa.out_bound[i] + ob.out_bound[i];
    const Agreement ag = check_against_bound(a.out, reference, bound);
    if (!ag.ok) {
        const std::size_t Dv = std::size_t(oa.value_dim);
        std::ostringstream s;
        s.precision(9);
        s << what << a.built.element(ag.worst_index / Dv, int(ag.worst_index % Dv)) << " [b,h,i,c] is " << ag.candidate
          << ", " << how_b << " " << ag.oracle << " (float64 oracle " << oa.out[ag.worst_index] << "): "
          << difference_text(ag.candidate, ag.oracle, oa.out[ag.worst_index], how_b, ag.bound, "the sum of the two calls' bounds");
        return Verdict::fail(s.str());
    }
    if (!a.lse.empty() && !b.lse.empty())
        for (std::size_t row = 0; row < a.lse.size(); ++row) {
            const double x = a.lse[row], y = b.lse[row];
            if (std::isinf(x) && std::isinf(y) && x == y) continue;
            if (!(std::abs(x - y) <= oa.lse_bound[row] + ob.lse_bound[row]))
                return Verdict::fail(what + std::string("lse row ") + a.built.element(row, 0) + " is " + fmt(x) + ", " + how_b +
                                     " " + fmt(y) + ": " +
                                     (!std::isfinite(x) || !std::isfinite(y)
                                          ? difference_text(x, y, oa.lse[row], how_b, 0, "")
                                          : "beyond the sum of the bounds " + fmt(oa.lse_bound[row] + ob.lse_bound[row])));
        }
    for (std::size_t i = 0; i < a.out.size(); ++i)
        if (std::bit_cast<std::uint32_t>(a.out[i]) != std::bit_cast<std::uint32_t>(b.out[i]))
            return Verdict::pass_with_note("within the bounds but not bitwise equal (" + how_b + ")");
    return Verdict::pass();
}

// Bitwise the same out (and lse) for a deterministic kernel; within the bound of each otherwise.
Verdict same_bits(const std::string& what, const KernelUnderTest& kernel, const CallV2& a, const CallV2& b,
                  const reference::OracleV2& o, const std::string& how_b) {
    if (!kernel.declaration.deterministic) {
        if (Verdict v = agree_out(what + "(deterministic=no: within the bound, not bitwise) out", b, o); v.failed()) return v;
        return Verdict::pass();
    }
    const std::size_t Dv = std::size_t(o.value_dim);
    for (std::size_t i = 0; i < a.out.size(); ++i)
        if (std::bit_cast<std::uint32_t>(a.out[i]) != std::bit_cast<std::uint32_t>(b.out[i]))
            return Verdict::fail(what + "out" + a.built.element(i / Dv, int(i % Dv)) + " [b,h,i,c] was " + fmt(a.out[i]) +
                                 ", " + how_b + " it is " + fmt(b.out[i]));
    for (std::size_t i = 0; i < a.lse.size() && i < b.lse.size(); ++i)
        if (std::bit_cast<std::uint32_t>(a.lse[i]) != std::bit_cast<std::uint32_t>(b.lse[i]))
            return Verdict::fail(what + "lse row " + a.built.element(i, 0) + " was " + fmt(a.lse[i]) + ", " + how_b +
                                 " it is " + fmt(b.lse[i]));
    return Verdict::pass();
}

// A first call and its oracle: how most properties begin.
struct First {
    LogicalInputsV2 in;
    CallV2 call;
};

First first_call(const KernelUnderTest& kernel, const KernelCaseV2& c, const BuildOptionsV2& options = {}) {
    First f{fill_inputs_v2(c), {}};
    f.call = call_v2(kernel, c, f.in, options);
    return f;
}

// ---- the properties -------------------------------------------------------------------------

Verdict agreement_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    if (!f.call.convention_violation.empty()) return Verdict::fail(f.call.convention_violation);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    if (Verdict v = agree_out("out", f.call, o); v.failed()) return v;
    if (c.want_lse) return agree_lse("lse", f.call, o);
    return Verdict::pass();
}

Verdict lse(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    return agree_lse("lse", f.call, oracle_of(kernel, c, f.in));
}

Verdict causality_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    // Row r of each sequence (r < Tq(b) - 1 where possible): keys after its position q_pos[b] + r
    // get new values; rows <= r see none of them.
    std::vector<int> last(std::size_t(c.batch));
    LogicalInputsV2 moved = f.in;
    Stream rng(c.data_seed ^ 0xCA05A1u);
    bool any = false;
    for (int b = 0; b < c.batch; ++b) {
        const int Tq = c.q_lens[std::size_t(b)];
        const int r = Tq > 1 ? int(c.data_seed % std::uint32_t(Tq - 1)) : 0;
        last[std::size_t(b)] = r;
        const int horizon = c.q_pos[std::size_t(b)] + r;
        for (int h = 0; h < c.kv_heads; ++h)
            for (int j = std::max(0, horizon + 1); j < c.kv_lens[std::size_t(b)]; ++j) {
                any = true;
                for (int col = 0; col < c.head_dim; ++col) moved.k_at(b, h, j, col, c) = round_to(c.dtype, float(rng.normal() * 4));
                for (int col = 0; col < c.value_dim; ++col) moved.v_at(b, h, j, col, c) = round_to(c.dtype, float(rng.normal() * 4));
            }
    }
    if (!any) return Verdict::pass();
    const CallV2 after = call_v2(kernel, c, moved);
    if (after.rc != 0) return unsupported(after.rc);
    const std::size_t Dv = std::size_t(c.value_dim);
    const reference::OracleV2 o = kernel.declaration.deterministic ? reference::OracleV2{} : oracle_of(kernel, c, f.in);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i <= last[std::size_t(b)]; ++i) {
                const std::size_t row = f.call.built.first_row[std::size_t(b)] + std::size_t(h) * std::size_t(c.q_lens[std::size_t(b)]) + std::size_t(i);
                for (std::size_t col = 0; col < Dv; ++col) {
                    const std::size_t at = row * Dv + col;
                    const float x = f.call.out[at], y = after.out[at];
                    const bool same = kernel.declaration.deterministic
                                          ? std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y)
                                          : std::abs(double(y) - o.out[at]) <= o.out_bound[at];
                    if (!same)
                        return Verdict::fail("out" + f.call.built.element(row, int(col)) + " [b,h,i,c] was " + fmt(x) + ", now " +
                                             fmt(y) + " after the keys/values j > q_pos + " + std::to_string(last[std::size_t(b)]) +
                                             " = " + std::to_string(c.q_pos[std::size_t(b)] + last[std::size_t(b)]) +
                                             " (the future of rows <= " + std::to_string(last[std::size_t(b)]) + ") were replaced" +
                                             (kernel.declaration.deterministic ? "" : " (beyond the bound)"));
                }
            }
    return Verdict::pass();
}

Verdict empty_rows_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    if (!f.call.convention_violation.empty()) return Verdict::fail(f.call.convention_violation);
    const std::vector<char> empty = empty_rows_of(c);
    const std::size_t Dv = std::size_t(c.value_dim);
    for (std::size_t row = 0; row < empty.size(); ++row) {
        if (!empty[row]) continue;
        for (std::size_t col = 0; col < Dv; ++col)
            if (f.call.out[row * Dv + col] != 0.0f)
                return Verdict::fail("out" + f.call.built.element(row, int(col)) + " [b,h,i,c] is " + fmt(f.call.out[row * Dv + col]) +
                                     " in a row with no visible key: must be exactly 0");
        if (!f.call.lse.empty() && !(std::isinf(f.call.lse[row]) && f.call.lse[row] < 0))
            return Verdict::fail("lse of row " + f.call.built.element(row, 0) + " is " + fmt(f.call.lse[row]) +
                                 ", a row with no visible key: must be -inf");
    }
    return Verdict::pass();
}

Verdict gqa_equals_replicated(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    KernelCaseV2 mha = c;
    LogicalInputsV2 in = f.in;
    replicate_kv_heads(mha, in);
    const CallV2 m = call_v2(kernel, mha, in);
    if (m.rc != 0) {
        const std::string e = refused_within_declaration(kernel, m, "with the K/V heads replicated");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    return same_within("with Hk = " + std::to_string(c.kv_heads) + " out", f.call, oracle_of(kernel, c, f.in), m,
                       oracle_of(kernel, mha, in), "with the K/V heads replicated (Hk = Hq = " + std::to_string(c.q_heads) + ")");
}

Verdict layout_invariance(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    for (const LayoutKind k : {LayoutKind::bhtd, LayoutKind::bthd, LayoutKind::gapped}) {
        if (k == c.layout.kind) continue;
        const KernelCaseV2 other = with_layout(c, k);
        const CallV2 r = call_v2(kernel, other, f.in);
        if (r.rc != 0) {
            if (const std::string e = refused_within_declaration(kernel, r, std::string("in layout ") + to_string(k)); !e.empty())
                return Verdict::fail(e);
            continue;
        }
        Verdict v = same_within(std::string("in layout ") + to_string(c.layout.kind) + " out", f.call, o, r, o,
                                std::string("in layout ") + to_string(k));
        if (v.kind != Verdict::Kind::pass || !v.note.empty()) return v;
    }
    return Verdict::pass();
}

Verdict paged_permutation(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    // Another permutation with other spare blocks and slack, same block size; then the
    // contiguous cache.
    const KernelCaseV2 shuffled = with_pages(c, c.layout.block_size, c.layout.block_seed * 2654435761u + 1u,
                                             c.layout.spare_blocks + 2, c.layout.table_slack + 1);
    const CallV2 s = call_v2(kernel, shuffled, f.in);
    if (s.rc != 0) {
        const std::string e = refused_within_declaration(kernel, s, "with another block permutation");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    if (Verdict v = same_within("paged out", f.call, o, s, o, "with another block permutation (block_seed " +
                                                              std::to_string(shuffled.layout.block_seed) + ", " +
                                                              std::to_string(shuffled.layout.spare_blocks) + " spare blocks)");
        v.failed())
        return v;
    if (std::adjacent_find(c.q_lens.begin(), c.q_lens.end(), std::not_equal_to<>()) != c.q_lens.end()) return Verdict::pass();
    const CallV2 d = call_v2(kernel, with_layout(c, LayoutKind::bhtd), f.in);
    if (d.rc != 0) {
        const std::string e = refused_within_declaration(kernel, d, "with a contiguous cache");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    return same_within("paged out", f.call, o, d, o, "with a contiguous cache");
}

Verdict varlen_equals_separate(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const std::size_t Dv = std::size_t(c.value_dim);
    for (int b = 0; b < c.batch; ++b) {
        const KernelCaseV2 alone = sequence_alone(c, b);
        const LogicalInputsV2 in = sequence_inputs(c, f.in, b);
        const CallV2 s = call_v2(kernel, alone, in);
        if (s.rc != 0) {
            const std::string e = refused_within_declaration(kernel, s, "as sequence " + std::to_string(b) + " alone");
            if (!e.empty()) return Verdict::fail(e);
            continue;
        }
        const reference::OracleV2 os = oracle_of(kernel, alone, in);
        // The rows of sequence b inside the batch, as a call of their own.
        CallV2 part;
        part.built = build_v2(alone, in);
        const std::size_t first = f.call.built.first_row[std::size_t(b)], n = s.out.size() / std::max<std::size_t>(Dv, 1);
        part.out.assign(f.call.out.begin() + std::ptrdiff_t(first * Dv), f.call.out.begin() + std::ptrdiff_t((first + n) * Dv));
        if (!f.call.lse.empty() && !s.lse.empty())
            part.lse.assign(f.call.lse.begin() + std::ptrdiff_t(first), f.call.lse.begin() + std::ptrdiff_t(first + n));
        Verdict v = same_within("sequence " + std::to_string(b) + " in the packed batch: out", part, os, s, os, "alone");
        if (v.failed()) return v;
    }
    return Verdict::pass();
}

Verdict poison_invisible(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    // The reference call: finite values everywhere (padding, gaps, unused blocks), invisible keys
    // with their ordinary values; then NaN and Inf there instead (large finite garbage for a
    // kernel that declares padding_values=finite), and large finite garbage in the keys inside
    // Tk(b) that no row sees (real keys of a real cache: finite, but not these).
    KernelCaseV2 finite = c;
    finite.filler = Filler::finite;
    finite.poison_invisible = false;
    const First f = first_call(kernel, finite);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    const std::vector<Filler> poisons =
        kernel.declaration.padding_finite ? std::vector<Filler>{Filler::large} : std::vector<Filler>{Filler::nan, Filler::inf};
    for (const Filler poison : poisons) {
        KernelCaseV2 p = c;
        p.filler = poison;
        p.poison_invisible = true;
        const CallV2 r = call_v2(kernel, p, f.in);
        if (r.rc != 0)
            return Verdict::fail(std::string("with ") + to_string(poison) + " in the unread elements the kernel refused the problem (returned " +
                                 std::to_string(r.rc) + ") it took with finite values there");
        if (Verdict v = same_bits("", kernel, f.call, r, o,
                                  std::string("with ") + to_string(poison) +
                                      " in every element no row reads (padding, gaps, unused blocks) and garbage in the keys no row sees");
            v.failed())
            return v;
    }
    return Verdict::pass();
}

Verdict capacity_invariance(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    KernelCaseV2 bigger = c;
    std::string how;
    if (c.layout.kind == LayoutKind::paged) {
        bigger.layout.spare_blocks += 5;
        bigger.layout.table_slack += 3;
        how = "with 5 more blocks in the cache and 3 more block-table entries per sequence";
    } else if (c.layout.kind == LayoutKind::varlen) {
        return Verdict::pass();  // a packed batch has no capacity
    } else {
        const int now = std::max(c.layout.kv_capacity, c.max_kv_len());
        bigger.layout.kv_capacity = now + 1 + int(c.data_seed % 97);
        how = "with a cache capacity of " + std::to_string(bigger.layout.kv_capacity) + " rows instead of " + std::to_string(now);
    }
    const CallV2 r = call_v2(kernel, bigger, f.in);
    if (r.rc != 0) {
        const std::string e = refused_within_declaration(kernel, r, how);
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    return same_within("out", f.call, o, r, o, how);
}

Verdict split_agreement(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    // One query row (a decode step, or all a max_q_len=1 kernel takes) cannot be split.
    if (c.q_lens[0] < 2) return Verdict::vacuous("a single query row: nothing to split");
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    const int Tq = c.q_lens[0];
    // Split points: beside the tile sizes and powers of two below Tq, and one drawn from the seed.
    std::vector<int> splits;
    for (const int e : {16, 17, 32, 33, 63, 64, 65, 96, 97, 127, 128, 129})
        if (e < Tq && splits.size() < 3) splits.push_back(e);
    if (Tq > 1) splits.push_back(1 + int(c.data_seed % std::uint32_t(Tq - 1)));
    std::vector<std::pair<int, int>> pieces;  // [from, to) row ranges called on their own
    pieces.push_back({Tq - 1, Tq});          // the last row as a decode step
    for (const int s : splits) {
        pieces.push_back({s, Tq});         // the rest as a chunk
        pieces.push_back({s - 1, s});      // the row before the split as a decode step
    }
    const std::size_t Dv = std::size_t(c.value_dim);
    for (const auto& [from, to] : pieces) {
        const KernelCaseV2 part = rows_alone(c, 0, from, to);
        const LogicalInputsV2 in = rows_inputs(c, f.in, 0, from, to);
        const CallV2 r = call_v2(kernel, part, in);
        if (r.rc != 0) {
            const std::string e = refused_within_declaration(kernel, r, "as rows [" + std::to_string(from) + ", " + std::to_string(to) + ") alone");
            if (!e.empty()) return Verdict::fail(e);
            continue;
        }
        const reference::OracleV2 op = oracle_of(kernel, part, in);
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = from; i < to; ++i)
                for (std::size_t col = 0; col < Dv; ++col) {
                    const std::size_t whole = (std::size_t(h) * std::size_t(Tq) + std::size_t(i)) * Dv + col;
                    const std::size_t mine = (std::size_t(h) * std::size_t(to - from) + std::size_t(i - from)) * Dv + col;
                    const double bound = o.out_bound[whole] + op.out_bound[mine];
                    const double diff = std::abs(double(f.call.out[whole]) - double(r.out[mine]));
                    if (!(diff <= bound))
                        return Verdict::fail("out[0," + std::to_string(h) + "," + std::to_string(i) + "," + std::to_string(col) +
                                             "] [b,h,i,c] of the prefill (Tq = Tk = " + std::to_string(Tq) + ") is " +
                                             fmt(f.call.out[whole]) + ", but " + fmt(r.out[mine]) + " when rows [" +
                                             std::to_string(from) + ", " + std::to_string(to) + ") are called alone " +
                                             (to - from == 1 ? "(a decode step" : "(a chunk") + " over " +
                                             std::to_string(part.kv_lens[0]) + " keys): " +
                                             difference_text(f.call.out[whole], r.out[mine], o.out[whole], "called alone",
                                                             bound, "the sum of the two bounds"));
                }
    }
    return Verdict::pass();
}

// The width of the identity values softcap_bound reads `keys` probabilities through: `keys` when
// the declaration allows that value_dim, else the narrowest allowed one above it (one call), else
// the widest allowed one below it (several calls), else `fallback` (the case's own, declared).
int identity_width(const KernelDeclaration& d, int head_dim, int keys, int fallback) {
    if (d.allows_value_dim(keys, head_dim)) return keys;
    if (d.value_dim_same) return head_dim;
    int above = 0, below = 0;
    for (const KernelDeclaration::Range& r : d.value_dims) {
        if (r.hi >= keys) above = above ? std::min(above, std::max(r.lo, keys)) : std::max(r.lo, keys);
        if (r.lo < keys) below = std::max(below, std::min(r.hi, keys - 1));
    }
    return above ? above : below ? below : fallback;
}

Verdict softcap_bound(const KernelUnderTest& kernel, const KernelCaseV2& c0) {
    // Identity values (v[j] = e_j) expose the probabilities; with scores in [-cap, cap] two
    // visible keys' probabilities differ by a factor of at most e^(2 cap). Dv is the longest Tk,
    // or a value_dim the kernel declares: then the keys are read Dv at a time, one call each
    // (v[j] = e_(j - first) for the keys first .. first + Dv - 1, zero for the others).
    KernelCaseV2 c = c0;
    c.alibi_slopes.clear();
    const int keys = std::max(1, c.max_kv_len());
    c.value_dim = identity_width(kernel.declaration, c.head_dim, keys, c0.value_dim);
    const std::size_t Dv = std::size_t(c.value_dim);
    const LogicalInputsV2 base = fill_inputs_v2(c0);
    const std::size_t rows = std::size_t(std::accumulate(c.q_lens.begin(), c.q_lens.end(), 0)) * std::size_t(c.q_heads);
    // Per logical row and key: the probability read back and its bound (NaN: not read yet).
    std::vector<double> prob(rows * std::size_t(keys), std::nan("")), bound(prob.size(), 0.0);
    std::vector<std::size_t> first_row;
    for (int first = 0; first < keys; first += c.value_dim) {
        LogicalInputsV2 in = empty_inputs_v2(c);
        in.q = base.q;
        in.k = base.k;
        for (int b = 0; b < c.batch; ++b)
            for (int h = 0; h < c.kv_heads; ++h)
                for (int j = first; j < std::min(c.kv_lens[std::size_t(b)], first + c.value_dim); ++j)
                    in.v_at(b, h, j, j - first, c) = 1.0f;
        const CallV2 r = call_v2(kernel, c, in);
        if (r.rc != 0) return unsupported(r.rc);
        const reference::OracleV2 o = oracle_of(kernel, c, in);
        first_row = r.built.first_row;
        for (std::size_t row = 0; row < rows; ++row)
            for (int j = first; j < std::min(keys, first + c.value_dim); ++j) {
                const std::size_t e = row * Dv + std::size_t(j - first);
                prob[row * std::size_t(keys) + std::size_t(j)] = r.out[e];
                bound[row * std::size_t(keys) + std::size_t(j)] = o.out_bound[e];
            }
    }
    const double limit = std::exp(2.0 * double(c.softcap));
    const std::string how = Dv >= std::size_t(keys) ? "(read through identity values)"
                                                     : "(read through identity values, " + std::to_string(Dv) + " keys per call)";
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) {
                const std::size_t row = first_row[std::size_t(b)] + std::size_t(h) * std::size_t(c.q_lens[std::size_t(b)]) + std::size_t(i);
                double hi = 0, lo = std::numeric_limits<double>::infinity();
                int at_hi = -1, at_lo = -1;
                for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) {
                    if (!c.visible(b, i, j)) continue;
                    const std::size_t e = row * std::size_t(keys) + std::size_t(j);
                    const double up = prob[e] + bound[e], down = prob[e] - bound[e];
                    if (down > hi) hi = down, at_hi = j;
                    if (up < lo) lo = up, at_lo = j;
                }
                if (at_hi < 0 || at_lo < 0 || !(lo > 0)) continue;
                if (hi / lo > limit) {
                    // The row's name from a case of the first call's layout (its first_row).
                    BuiltV2 named;
                    named.first_row = first_row;
                    named.q_lens = c.q_lens;
                    const std::size_t low = row * std::size_t(keys) + std::size_t(at_lo);
                    if (std::abs(prob[low]) <= bound[low])  // no score in [-cap, cap] gives that: the key was left out
                        return Verdict::fail("row " + named.element(row, 0) + " " + how + ": key " + std::to_string(at_lo) +
                                             " is visible to the row but has probability " + fmt(prob[low]) +
                                             " (0 within its bound " + fmt(bound[low]) +
                                             "): the kernel masked it out or skipped it (with a softcap every visible "
                                             "key has probability at least e^(-2 softcap) / n)");
                    return Verdict::fail("row " + named.element(row, 0) + " " + how + ": key " + std::to_string(at_hi) +
                                         " has probability " + fmt(prob[row * std::size_t(keys) + std::size_t(at_hi)]) + ", key " +
                                         std::to_string(at_lo) + " " + fmt(prob[row * std::size_t(keys) + std::size_t(at_lo)]) +
                                         ": a ratio of at least " + fmt(hi / lo) + " > e^(2 softcap) = " + fmt(limit) +
                                         ", so some score is outside [-softcap, softcap] = [-" + fmt(c.softcap) + ", " +
                                         fmt(c.softcap) + "]");
                }
            }
    return Verdict::pass();
}

Verdict no_oob_write_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (const std::string w = f.call.built.write_outside(); !w.empty()) return Verdict::fail("kernel " + w);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    if (const std::string u = f.call.built.unwritten(); !u.empty()) return Verdict::fail(u);
    return Verdict::pass();
}

Verdict inputs_unchanged_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const First f = first_call(kernel, c);
    if (const std::string w = f.call.built.input_change(); !w.empty()) return Verdict::fail(w);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    return Verdict::pass();
}

Verdict no_oob_read(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    // q, k and v end against an inaccessible page: a read past their end faults (in the isolated
    // worker, a crash reported with this case). A result that the placement changes means reads
    // of what lies around the inputs; one that is merely inaccurate is agreement's to report.
    const First f = first_call(kernel, c, {.guard_page_inputs = true});
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const CallV2 plain = call_v2(kernel, c, f.in);
    if (plain.rc != 0) {
        const std::string e = refused_within_declaration(kernel, plain, "with the inputs in ordinary memory");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    return same_within("with the inputs against a guard page, out", f.call, o, plain, o, "with the inputs in ordinary memory");
}

Verdict abi_version_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const LogicalInputsV2 in = fill_inputs_v2(c);
    for (const std::int32_t version : {ATTNCHECK_ABI_VERSION_2 + 1, ATTNCHECK_ABI_VERSION}) {
        BuiltV2 b = build_v2(c, in);
        b.problem.abi_version = version;
        const int rc = kernel.fn_v2(&b.problem);
        if (const std::string w = b.write_outside(); !w.empty())
            return Verdict::fail("refusing abi_version " + std::to_string(version) + ", kernel " + w);
        if (rc == 0)
            return Verdict::fail("kernel accepted abi_version " + std::to_string(version) +
                                 " (returned 0): a version 2 kernel must refuse a version it does not know");
    }
    return Verdict::pass();
}

Verdict refuses_undeclared_v2(const KernelUnderTest& kernel, const KernelCaseV2& c) {
    const KernelDeclaration& d = kernel.declaration;
    std::vector<std::function<void(KernelCaseV2&)>> breaks;
    if (!d.allows_dtype(ATTNCHECK_DTYPE_F32)) breaks.push_back([](KernelCaseV2& u) { u.dtype = ATTNCHECK_DTYPE_F32; });
    if (!d.allows_dtype(ATTNCHECK_DTYPE_F16)) breaks.push_back([](KernelCaseV2& u) { u.dtype = ATTNCHECK_DTYPE_F16; });
    if (!d.allows_dtype(ATTNCHECK_DTYPE_BF16)) breaks.push_back([](KernelCaseV2& u) { u.dtype = ATTNCHECK_DTYPE_BF16; });
    if (!d.gqa && (!d.max_heads || d.max_heads >= 2)) breaks.push_back([](KernelCaseV2& u) { u.kv_heads = 1, u.q_heads = 2; });
    if (!d.layout_any && c.dense()) breaks.push_back([](KernelCaseV2& u) { u.layout.kind = LayoutKind::gapped; });
    if (!d.layout_any && !c.dense()) breaks.push_back([](KernelCaseV2& u) { u.layout.varlen_contiguous = false; });
    if (!d.varlen) breaks.push_back([](KernelCaseV2& u) { u.layout.kind = LayoutKind::varlen; });
    if (!d.paged) breaks.push_back([](KernelCaseV2& u) { u.layout.kind = LayoutKind::paged, u.layout.block_size = 4; });
    if (!d.window) breaks.push_back([](KernelCaseV2& u) { u.window_left = 1; });
    if (!d.softcap) breaks.push_back([](KernelCaseV2& u) { u.softcap = 5.0f; });
    if (!d.alibi) breaks.push_back([](KernelCaseV2& u) { u.alibi_slopes.assign(std::size_t(u.q_heads), 0.5f); });
    if (!d.lse) breaks.push_back([](KernelCaseV2& u) { u.want_lse = true; });
    if (!d.positions_any) breaks.push_back([](KernelCaseV2& u) { u.q_pos[0] += 1; });
    if (!d.causal) breaks.push_back([](KernelCaseV2& u) { u.causal = true, u.window_right = -1; });
    if (!d.non_causal) breaks.push_back([](KernelCaseV2& u) { u.causal = false; });
    if (d.max_batch) breaks.push_back([&d](KernelCaseV2& u) {
        u.batch = d.max_batch + 1;
        u.q_lens.resize(std::size_t(u.batch), u.q_lens[0]);
        u.kv_lens.resize(std::size_t(u.batch), u.kv_lens[0]);
        u.q_pos.resize(std::size_t(u.batch), u.q_pos[0]);
    });
    if (d.max_kv_len) breaks.push_back([&d](KernelCaseV2& u) {
        u.kv_lens[0] = d.max_kv_len + 1;
        u.q_pos[0] = u.kv_lens[0] - u.q_lens[0];
    });
    if (!d.head_dims.empty()) {
        int w = 1;
        while (d.allows_head_dim(w) && w < 4096) ++w;
        if (!d.allows_head_dim(w)) breaks.push_back([w, &d](KernelCaseV2& u) {
            u.head_dim = w;
            if (d.value_dim_same) u.value_dim = w;
        });
    }
    if (breaks.empty()) return Verdict::pass();
    KernelCaseV2 u = c;
    breaks[c.data_seed % breaks.size()](u);
    if (u.layout.kind == LayoutKind::varlen || u.layout.kind == LayoutKind::paged) u.layout.kv_capacity = 0;
    if (u.dense()) one_q_len(u);
    if (!u.alibi_slopes.empty()) u.alibi_slopes.resize(std::size_t(u.q_heads), 0.5f);
    const LogicalInputsV2 in = fill_inputs_v2(u);
    BuiltV2 built = build_v2(u, in);
    const std::string reason = d.unsupported_reason(built.problem);
    if (reason.empty()) return Verdict::pass();  // this case could not be moved outside the declaration
    const int rc = kernel.fn_v2(&built.problem);
    if (const std::string w = built.write_outside(); !w.empty())
        return Verdict::fail("on a problem outside its declaration (" + reason + "), kernel " + w);
    if (rc == 0)
        return Verdict::fail("the kernel accepted (returned 0) a problem outside its declaration: " + reason +
                             "; a kernel refuses (returns nonzero) what it does not declare, or declares it (" + d.to_string() + ")");
    return Verdict::pass();
}

// A malformed problem (problem_v2_error() names it) must not crash the suite. The kernel should
// refuse it; one that accepts it gets a note, not a failure: the ABI promises the kernel a
// well-formed problem, and production kernels (FlashAttention's paged path among them) do not
// re-validate block tables for speed. The buffers are sized so that even a kernel that reads
// the bad index stays inside them (a spare K/V head, a spare block).
Verdict refuses_malformed(const KernelUnderTest& kernel, const KernelCaseV2& c0) {
    KernelCaseV2 c = c0;
    const int which = int(c.data_seed % 3);
    std::string what;
    if (which == 0) {
        // kv_heads not dividing q_heads: Hq = 3, Hk = 2, with room for 3 K/V heads.
        c.q_heads = 3, c.kv_heads = 3;
        if (!c.alibi_slopes.empty()) c.alibi_slopes.assign(3, 0.5f);
    } else if (which == 1) {
        c.layout.kind = LayoutKind::paged;
        c.layout.spare_blocks = std::max(1, c.layout.spare_blocks);
        c.layout.kv_capacity = 0;
        one_q_len(c);
        if (c.max_kv_len() == 0) c.kv_lens[0] = 1, c.q_pos[0] = 0;
    }
    const LogicalInputsV2 in = fill_inputs_v2(c);
    BuiltV2 built = build_v2(c, in);
    attncheck_problem_v2& p = built.problem;
    if (which == 0) {
        p.kv_heads = 2;
        what = "kv_heads 2 does not divide q_heads 3";
    } else if (which == 1) {
        // The last block is the one the table now names but num_blocks excludes.
        int seq = 0;
        while (kv_len_of(p, seq) == 0) ++seq;
        const std::int32_t last = p.num_blocks - 1;
        for (auto& e : built.block_table)
            if (e == last) e = 0;
        built.block_table[std::size_t(seq) * std::size_t(p.block_table_stride)] = last;
        p.num_blocks = last;
        what = "block_table[" + std::to_string(seq) + "][0] = " + std::to_string(last) + " is outside [0, num_blocks = " +
               std::to_string(last) + ")";
    } else {
        built.q_pos[0] = -1;
        what = "q_pos[0] = -1";
    }
    if (problem_v2_error(p).empty()) return Verdict::pass();  // the case could not be made malformed
    const int rc = kernel.fn_v2(&p);
    if (const std::string w = built.write_outside(); !w.empty())
        return Verdict::fail("on a malformed problem (" + what + "), kernel " + w);
    if (rc == 0) return Verdict::pass_with_note("accepted a malformed problem (returned 0): " + what);
    return Verdict::pass();
}

}  // namespace

const std::vector<KernelPropertyV2>& kernel_properties_v2() {
    static const std::vector<KernelPropertyV2> all = {
        {"agreement_v2", "out (and lse when asked) agrees with the float64 oracle within the bound of the problem's dtype", {}, agreement_v2},
        {"lse", "the log-sum-exp output: natural log, the scale and softcap applied, -inf for an empty row", {.need_lse = true}, lse},
        {"causality_v2", "replacing keys/values after row r's position leaves rows <= r unchanged (bitwise when deterministic)",
         {.need_causal_future = true}, causality_v2},
        {"empty_rows_v2", "a row with no visible key (Tk(b) = 0, a window past the keys) gives exactly 0 and lse -inf",
         {.need_empty = true}, empty_rows_v2},
        {"gqa_equals_replicated", "grouped-query attention equals MHA with each K/V head replicated over its group",
         {.need_gqa = true}, gqa_equals_replicated},
        {"layout_invariance", "[B,H,T,D], [B,T,H,D] and a view with gaps give the same result", {.need_dense = true}, layout_invariance},
        {"paged_permutation", "a paged cache under another block permutation (spare blocks, table slack) and as a contiguous cache give the same result",
         {.need_paged = true}, paged_permutation},
        {"varlen_equals_separate", "a packed variable-length batch equals one call per sequence", {.need_varlen = true}, varlen_equals_separate},
        {"poison_invisible", "NaN or Inf in padding, gaps and unused cache blocks, and garbage in keys no row sees, change nothing (bitwise when deterministic)",
         {.need_invisible = true}, poison_invisible},
        {"capacity_invariance", "the result does not depend on the cache capacity (dense rows, paged blocks and table width)", {}, capacity_invariance},
        {"split_agreement", "a prefill agrees with its rows called as chunks and decode steps, split next to tile sizes",
         {.need_prefill = true, .large_percent = 30}, split_agreement},
        {"softcap_bound", "with softcap, two visible keys' probabilities differ by at most e^(2 cap) (scores within the cap)",
         {.need_softcap = true}, softcap_bound},
        {"no_oob_write_v2", "nothing written outside out and lse (guards, gaps), and every element of them written", {}, no_oob_write_v2},
        {"inputs_unchanged_v2", "q, k, v (padding and gaps included) bitwise unchanged by the call", {}, inputs_unchanged_v2},
        {"no_oob_read", "q, k, v placed against a guard page: a read past their end faults (a crash of the case), and the result must not change with the placement", {}, no_oob_read},
        {"abi_version_v2", "a problem with abi_version 3 (or 1) is refused (nonzero)", {}, abi_version_v2},
        {"refuses_undeclared_v2", "a problem outside what the kernel declares (dtype, GQA, layout, varlen, paged, window, ...) is refused",
         {}, refuses_undeclared_v2},
        {"refuses_malformed", "a malformed problem (kv_heads not dividing q_heads, a block-table entry out of range, q_pos < 0) is refused (a note if not)",
         {}, refuses_malformed},
    };
    return all;
}

std::string not_applicable(const KernelPropertyV2& prop, const KernelDeclaration& d) {
    const CaseOptionsV2& o = prop.options;
    if (o.need_lse && !d.lse) return "declared lse=no";
    if (o.need_varlen && !d.varlen) return "declared varlen=no";
    if (o.need_paged && !d.paged) return "declared paged=no";
    if (o.need_gqa && !d.gqa) return "declared gqa=no";
    if (o.need_softcap && !d.softcap) return "declared softcap=no";
    if ((o.need_causal_future || o.need_prefill) && !d.causal) return "declared mask=none";
    // A single query row with a key after it in the cache needs q_pos[b] < Tk(b) - 1.
    if (o.need_causal_future && d.max_q_len == 1 && !d.positions_any)
        return "declared max_q_len=1 with positions=bottom_right: the one query row is the sequence's last, no key is after it";
    // Under bottom-right positions a row's own position is always a visible key.
    if (o.need_empty && !d.positions_any) return "declared positions=bottom_right: no row is ever empty";
    // Without a window, a key no row sees needs a causal horizon short of the keys, which
    // bottom-right positions (or no causal mask) never leave.
    if (o.need_invisible && !d.window && (!d.causal || !d.positions_any))
        return "declared window=no with " + std::string(d.causal ? "positions=bottom_right" : "mask=none") +
               ": every key is seen by some row";
    if (prop.name == "layout_invariance" && !d.layout_any) return "declared layout=contiguous";
    if (prop.name == "split_agreement" && d.max_q_len == 1) return "declared max_q_len=1: a single query row has nothing to split";
    return {};
}

std::string untried(const KernelPropertyV2& prop, const KernelDeclaration& d) {
    if (prop.name == "poison_invisible" && d.padding_finite)
        return "declared padding_values=finite: NaN and Inf were not tried in padding, gaps and unused blocks "
               "(large finite garbage instead)";
    return {};
}

}  // namespace attncheck::properties
