// properties/calls.cpp — how the properties call a kernel and compare what it
// returns (properties/calls.hpp).
#include "properties/calls.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "attncheck/abi_v1.hpp"
#include "attncheck/problem_v2.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck::properties {

// A dense or paged layout has one Tq for every sequence: the shortest, when the case had several.
void one_q_len(KernelCase& c) {
    const int tq = *std::min_element(c.q_lens.begin(), c.q_lens.end());
    for (int& n : c.q_lens) n = tq;
}

std::string fmt(double x) {
    std::ostringstream s;
    s.precision(9);
    s << x;
    return s.str();
}


// Rows (logical order) with no visible key.
std::vector<char> empty_rows_of(const KernelCase& c) {
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

int invoke(const KernelUnderTest& kernel, const attncheck_problem_v2& p) {
    return kernel.fn_v2 ? kernel.fn_v2(&p) : v1_call(kernel.fn, p);
}

Call call_case(const KernelUnderTest& kernel, const KernelCase& c, const KernelInputs& in,
               const BuildOptions& options) {
    Call r;
    r.built = build_case(c, in, options);
    r.rc = invoke(kernel, r.built.problem);
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
std::string refused_within_declaration(const KernelUnderTest& kernel, const attncheck_problem_v2& posed, int rc,
                                       const std::string& how) {
    if (!kernel.declaration.unsupported_reason(posed).empty()) return {};
    return "the same problem " + how + " was refused (returned " + std::to_string(rc) + ") although it is within the declaration";
}
std::string refused_within_declaration(const KernelUnderTest& kernel, const Call& r, const std::string& how) {
    return refused_within_declaration(kernel, r.built.problem, r.rc, how);
}

reference::OracleV2Options oracle_options(const KernelDeclaration& d) {
    return {.probabilities_rounded = d.rounds_probabilities, .tanh_ulps = double(d.tanh_ulps)};
}

reference::OracleV2 oracle_of(const KernelUnderTest& kernel, const KernelCase& c, const KernelInputs& in) {
    KernelCase clean = c;
    clean.poison_invisible = false;
    const Built b = build_case(clean, in);
    return reference::attention_v2_oracle(b.problem, oracle_options(kernel.declaration));
}

// out against the oracle, every element within its bound.
Verdict agree_out(const std::string& what, const Call& r, const reference::OracleV2& o) {
    const Agreement a = check_against_bound(r.out, o.out, o.out_bound);
    if (a.ok) return Verdict::pass();
    const std::size_t Dv = std::size_t(o.value_dim);
    return Verdict::fail(what + r.built.element(a.worst_index / Dv, int(a.worst_index % Dv)) + " [b,h,i,c]: " + a.describe());
}

// lse against the oracle: an empty row's lse is exactly -inf, the others within their bound.
Verdict agree_lse(const std::string& what, const Call& r, const reference::OracleV2& o) {
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
Verdict same_within(const std::string& what, const Call& a, const reference::OracleV2& oa, const Call& b,
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
Verdict same_bits(const std::string& what, const KernelUnderTest& kernel, const Call& a, const Call& b,
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


First first_call(const KernelUnderTest& kernel, const KernelCase& c, const BuildOptions& options) {
    First f{fill_inputs(c), {}};
    f.call = call_case(kernel, c, f.in, options);
    return f;
}

}  // namespace attncheck::properties
