// properties/probabilities.cpp — the properties that read a kernel's probabilities
// through chosen values: all ones (out = the row's sum of probabilities) and the identity
// (out[i, j] = p_ij), and what they show: row_sums, probabilities, softcap_bound.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "attncheck/tolerance.hpp"
#include "properties/calls.hpp"
#include "properties/kernel_properties.hpp"

namespace attncheck::properties {
namespace {

// The width of the identity values `keys` probabilities are read through: `keys` when the
// declaration allows that value_dim, else the narrowest allowed one above it (one call), else the
// widest allowed one below it (several calls), else `fallback` (the case's own, declared).
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

// Every row's probabilities over the keys 0 .. keys - 1 (keys = the longest Tk), read through
// identity values: v[j] = e_(j - first) for the keys first .. first + Dv - 1 and zero for the
// others, one call per Dv keys, Dv = identity_width. prob, oracle and bound are [rows, keys] in
// logical row order; the entries past a sequence's Tk(b) are NaN.
struct Probabilities {
    int rc = 0;  // nonzero: a call was refused, with this code
    int keys = 0, width = 0;
    std::vector<double> prob, oracle, bound;
    std::vector<std::size_t> first_row;  // of the calls' layout
    std::vector<int> q_lens;
    std::string how;                     // "(read through identity values[, Dv keys per call])"

    std::size_t at(std::size_t row, int j) const { return row * std::size_t(keys) + std::size_t(j); }
    // "[b,h,i" of logical row r, for a message.
    std::string row_name(std::size_t row) const {
        Built named;
        named.first_row = first_row;
        named.q_lens = q_lens;
        const std::string e = named.element(row, 0);
        return e.substr(0, e.rfind(','));
    }
};

Probabilities read_probabilities(const KernelUnderTest& kernel, const KernelCase& c0) {
    Probabilities r;
    KernelCase c = c0;
    r.keys = std::max(1, c.max_kv_len());
    c.value_dim = r.width = identity_width(kernel.declaration, c.head_dim, r.keys, c0.value_dim);
    const std::size_t Dv = std::size_t(c.value_dim);
    const KernelInputs base = fill_inputs(c0);
    const std::size_t rows = std::size_t(std::accumulate(c.q_lens.begin(), c.q_lens.end(), 0)) * std::size_t(c.q_heads);
    r.prob.assign(rows * std::size_t(r.keys), std::nan(""));
    r.oracle = r.prob;
    r.bound.assign(r.prob.size(), 0.0);
    r.q_lens = c.q_lens;
    for (int first = 0; first < r.keys; first += c.value_dim) {
        KernelInputs in = empty_inputs(c);
        in.q = base.q;
        in.k = base.k;
        for (int b = 0; b < c.batch; ++b)
            for (int h = 0; h < c.kv_heads; ++h)
                for (int j = first; j < std::min(c.kv_lens[std::size_t(b)], first + c.value_dim); ++j)
                    in.v_at(b, h, j, j - first, c) = 1.0f;
        const Call call = call_case(kernel, c, in);
        if (call.rc != 0) {
            r.rc = call.rc;
            return r;
        }
        const reference::OracleV2 o = oracle_of(kernel, c, in);
        r.first_row = call.built.first_row;
        for (int b = 0; b < c.batch; ++b)
            for (int h = 0; h < c.q_heads; ++h)
                for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) {
                    const std::size_t row = r.first_row[std::size_t(b)] + std::size_t(h) * std::size_t(c.q_lens[std::size_t(b)]) + std::size_t(i);
                    for (int j = first; j < std::min(c.kv_lens[std::size_t(b)], first + c.value_dim); ++j) {
                        const std::size_t e = row * Dv + std::size_t(j - first);
                        r.prob[r.at(row, j)] = call.out[e];
                        r.oracle[r.at(row, j)] = o.out[e];
                        r.bound[r.at(row, j)] = o.out_bound[e];
                    }
                }
    }
    r.how = Dv >= std::size_t(r.keys) ? "(read through identity values)"
                                        : "(read through identity values, " + std::to_string(Dv) + " keys per call)";
    return r;
}

// The logical row of (b, h, i) in a case's first_row order.
std::size_t row_of(const Probabilities& r, const KernelCase& c, int b, int h, int i) {
    return r.first_row[std::size_t(b)] + std::size_t(h) * std::size_t(c.q_lens[std::size_t(b)]) + std::size_t(i);
}

int visible_count(const KernelCase& c, int b, int i) {
    int n = 0;
    for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) n += c.visible(b, i, j) ? 1 : 0;
    return n;
}

}  // namespace

Verdict row_sums(const KernelUnderTest& kernel, const KernelCase& c) {
    // All-ones values: out[i, :] = sum_j p_ij, 1 for a row with a visible key, 0 for one without.
    KernelInputs in = fill_inputs(c);
    std::fill(in.v.begin(), in.v.end(), 1.0f);
    const Call r = call_case(kernel, c, in);
    if (r.rc != 0) return unsupported(r.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, in);
    const Agreement a = check_against_bound(r.out, o.out, o.out_bound);
    if (a.ok) return Verdict::pass();
    const std::size_t Dv = std::size_t(c.value_dim), row = a.worst_index / Dv;
    return Verdict::fail("with all-ones values out" + r.built.element(row, int(a.worst_index % Dv)) +
                         " [b,h,i,c] is the row's sum of probabilities (" + std::to_string(o.visible[row]) +
                         " visible keys): " + a.describe());
}

Verdict probabilities(const KernelUnderTest& kernel, const KernelCase& c) {
    const Probabilities r = read_probabilities(kernel, c);
    if (r.rc != 0) return unsupported(r.rc);
    // "p[b,h,i," of a row (appended: "p" + string trips g++ 12's -Wrestrict).
    const auto name = [&](std::size_t row) {
        std::string p = "p";
        p += r.row_name(row);
        p += ',';
        return p;
    };
    // First a weight on a masked key anywhere (the mask's bug, whatever else it spoils), then
    // each weight against its bound and each row's sum.
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) {
                const std::size_t row = row_of(r, c, b, h, i);
                for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j)
                    if (const double x = r.prob[r.at(row, j)]; !c.visible(b, i, j) && x != 0.0)
                        return Verdict::fail(name(row) + std::to_string(j) + "] [b,h,i,j] " + r.how + " is " + fmt(x) +
                                             " but key " + std::to_string(j) + " is masked for this row: must be exactly 0");
            }
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) {
                const std::size_t row = row_of(r, c, b, h, i);
                const std::string p = name(row);
                double sum = 0, bound = 0, expected = 0;  // expected: 1, less a sink's weight
                for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) {
                    const double x = r.prob[r.at(row, j)];
                    if (!(x >= 0.0 && x <= 1.0))
                        return Verdict::fail(p + std::to_string(j) + "] [b,h,i,j] " + r.how + " is " + fmt(x) + ", outside [0, 1]");
                    if (!(std::abs(x - r.oracle[r.at(row, j)]) <= r.bound[r.at(row, j)]))
                        return Verdict::fail(p + std::to_string(j) + "] [b,h,i,j] " + r.how + " is " + fmt(x) +
                                             ", the float64 oracle " + fmt(r.oracle[r.at(row, j)]) + ": the difference " +
                                             fmt(std::abs(x - r.oracle[r.at(row, j)])) + " is over the bound " +
                                             fmt(r.bound[r.at(row, j)]));
                    sum += x;
                    expected += r.oracle[r.at(row, j)];
                    bound += r.bound[r.at(row, j)];
                }
                // Each p_ij is within its bound, so the sum is within the bounds' sum.
                const int n = visible_count(c, b, i);
                if (n > 0 && !(std::abs(sum - expected) <= bound))
                    return Verdict::fail(p + ":] " + r.how + " sums to " + fmt(sum) + ", expected " +
                                         (c.sinks.empty() ? std::string("1") : fmt(expected) + " (1 less the sink's weight)") +
                                         " within " + fmt(bound) +
                                         ", the sum of its elements' bounds (" + std::to_string(n) + " visible keys)");
            }
    return Verdict::pass();
}

Verdict softcap_bound(const KernelUnderTest& kernel, const KernelCase& c0) {
    // With scores in [-cap, cap] two visible keys' probabilities differ by a factor of at most
    // e^(2 cap). ALiBi would move the scores past the cap: it is left out.
    KernelCase c = c0;
    c.alibi_slopes.clear();
    const Probabilities r = read_probabilities(kernel, c);
    if (r.rc != 0) return unsupported(r.rc);
    const double limit = std::exp(2.0 * double(c.softcap));
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) {
                const std::size_t row = row_of(r, c, b, h, i);
                // Over every visible key, and over those whose probability is not 0 within its
                // bound: a zero among keys that otherwise keep the cap is a key left out.
                double hi = 0, lo = std::numeric_limits<double>::infinity(), hi_nz = 0,
                       lo_nz = std::numeric_limits<double>::infinity();
                int at_hi = -1, at_lo = -1, nonzero = 0;
                for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) {
                    if (!c.visible(b, i, j)) continue;
                    const std::size_t e = r.at(row, j);
                    const double up = r.prob[e] + r.bound[e], down = r.prob[e] - r.bound[e];
                    if (down > hi) hi = down, at_hi = j;
                    if (up < lo) lo = up, at_lo = j;
                    if (std::abs(r.prob[e]) > r.bound[e]) ++nonzero, hi_nz = std::max(hi_nz, down), lo_nz = std::min(lo_nz, up);
                }
                if (at_hi < 0 || at_lo < 0 || !(lo > 0) || !(hi / lo > limit)) continue;
                const std::string where = "row " + r.row_name(row) + "] " + r.how + ": key ";
                const std::size_t low = r.at(row, at_lo);
                const bool zero = std::abs(r.prob[low]) <= r.bound[low];
                if (zero && !(nonzero >= 2 && lo_nz > 0 && hi_nz / lo_nz > limit))
                    return Verdict::fail(where + std::to_string(at_lo) + " is visible to the row but has probability " +
                                         fmt(r.prob[low]) + " (0 within its bound " + fmt(r.bound[low]) +
                                         ") while the others keep within e^(2 softcap) of each other: the kernel left "
                                         "it out (masked or skipped it), or its score is far outside [-softcap, softcap]");
                return Verdict::fail(where + std::to_string(at_hi) + " has probability " + fmt(r.prob[r.at(row, at_hi)]) +
                                     ", key " + std::to_string(at_lo) + " " + fmt(r.prob[low]) + ": a ratio of at least " +
                                     fmt(hi / lo) + " > e^(2 softcap) = " + fmt(limit) +
                                     ", so some score is outside [-softcap, softcap] = [-" + fmt(c.softcap) + ", " +
                                     fmt(c.softcap) + "]");
            }
    return Verdict::pass();
}

}  // namespace attncheck::properties
