// properties/kernel_properties.cpp — the kernel properties: their checks, and the table
// kernel_properties() (at the bottom) that registers them. Every kernel call goes through
// call_case() (properties/calls.hpp); the properties that read probabilities are in
// probabilities.cpp, the refusals in refusals.cpp.
//
// Quick start for adding a kernel property (it runs on kernels of both ABI versions)
//   1. Write the check, in the section "the properties" below:
//          Verdict my_property(const KernelUnderTest& kernel, const KernelCase& c)
//      c is one generated case (properties/kernel_case.hpp: dtype, heads, per-sequence lengths
//      and positions, mask, window, softcap, ALiBi, lse, layout, input style, data seed).
//      first_call(kernel, c) gives its logical inputs and the kernel's answer read back in the
//      oracle's order; call the kernel again only through call_case() (a fresh build: poison
//      outside the problem, guarded outputs), on c or on a transform of it (with_layout,
//      sequence_alone, rows_alone, ...). oracle_of() is the float64 oracle with its bounds;
//      agree_out() / agree_lse() compare with it, same_within() / same_bits() two calls.
//   2. Register it: add {"my_property", "what it checks, in one line", {options}, my_property}
//      to the table in kernel_properties(). The options (CaseOptions) make the generator build
//      the cases the check needs, e.g. {.need_causal_future = true}; it never filters. If a
//      declaration can exclude what it needs, say so in not_applicable() (a version 1 kernel's
//      declaration lacks every version 2 feature). The name must differ from every decoder
//      property's. Add its row to the table of docs/kernel-authors.md (section 4b).
//   3. Return a Verdict (properties/verdict.hpp): Verdict::pass(), Verdict::fail(message) naming
//      the element and both values ("out[0,1,2,3] [b,h,i,c] ..."), unsupported(rc) when the
//      kernel refused the case (not a failure), or Verdict::pass_with_note().
//   4. Run it: `attncheck fuzz --property my_property` (every built-in kernel of both versions),
//      and `attncheck fuzz --mutants` to see it kill mutants.
// A property of the backward pass goes to properties/gradients.cpp the same way (its calls:
// call_backward; its table: gradient_properties(), which this table ends with).
#include "properties/kernel_properties.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

#include "attncheck/abi_v1.hpp"
#include "attncheck/problem_v2.hpp"
#include "attncheck/tolerance.hpp"
#include "properties/calls.hpp"
#include "properties/gradients.hpp"
#include "properties/stream.hpp"
#include "properties/thread_counts.hpp"
#include "reference/attention_v2.hpp"

namespace attncheck::properties {
namespace {

// ---- the properties -------------------------------------------------------------------------

Verdict agreement(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    if (!f.call.convention_violation.empty()) return Verdict::fail(f.call.convention_violation);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    if (Verdict v = agree_out("out", f.call, o); v.failed()) return v;
    if (c.want_lse) return agree_lse("lse", f.call, o);
    return Verdict::pass();
}

Verdict lse(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    return agree_lse("lse", f.call, oracle_of(kernel, c, f.in));
}

Verdict causality(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    // Row r of each sequence (r < Tq(b) - 1 where possible): keys after its position q_pos[b] + r
    // get new values; rows <= r see none of them.
    std::vector<int> last(std::size_t(c.batch));
    KernelInputs moved = f.in;
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
    const Call after = call_case(kernel, c, moved);
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

Verdict empty_rows(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    if (!f.call.convention_violation.empty()) return Verdict::fail(f.call.convention_violation);
    const std::vector<char> empty = empty_rows_of(c);
    const std::size_t Dv = std::size_t(c.value_dim);
    for (std::size_t row = 0; row < empty.size(); ++row) {
        if (!empty[row]) continue;
        for (std::size_t col = 0; col < Dv; ++col)
            if (const float x = f.call.out[row * Dv + col]; x != 0.0f)
                return Verdict::fail("out" + f.call.built.element(row, int(col)) + " [b,h,i,c] is " + fmt(x) +
                                     " in a row with no visible key: must be exactly 0" +
                                     (std::isnan(x) ? " (a kernel that returns NaN there by design declares empty_rows=nan)" : ""));
        // With sinks the row's softmax is its sink's alone: lse = sinks[h] (below, against the oracle).
        if (f.call.lse.empty() || !c.sinks.empty()) continue;
        if (!(std::isinf(f.call.lse[row]) && f.call.lse[row] < 0))
            return Verdict::fail("lse of row " + f.call.built.element(row, 0) + " is " + fmt(f.call.lse[row]) +
                                 ", a row with no visible key: must be -inf");
    }
    if (!c.sinks.empty() && !f.call.lse.empty())
        return agree_lse("with sinks, a row with no visible key has its sink's logit as lse: ", f.call, oracle_of(kernel, c, f.in));
    return Verdict::pass();
}

Verdict gqa_equals_replicated(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    KernelCase mha = c;
    KernelInputs in = f.in;
    replicate_kv_heads(mha, in);
    const Call m = call_case(kernel, mha, in);
    if (m.rc != 0) {
        const std::string e = refused_within_declaration(kernel, m, "with the K/V heads replicated");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    return same_within("with Hk = " + std::to_string(c.kv_heads) + " out", f.call, oracle_of(kernel, c, f.in), m,
                       oracle_of(kernel, mha, in), "with the K/V heads replicated (Hk = Hq = " + std::to_string(c.q_heads) + ")");
}

Verdict layout_invariance(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    for (const LayoutKind k : {LayoutKind::bhtd, LayoutKind::bthd, LayoutKind::gapped}) {
        if (k == c.layout.kind) continue;
        const KernelCase other = with_layout(c, k);
        const Call r = call_case(kernel, other, f.in);
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

Verdict paged_permutation(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    // Another permutation with other spare blocks and slack, same block size; then the
    // contiguous cache.
    const KernelCase shuffled = with_pages(c, c.layout.block_size, c.layout.block_seed * 2654435761u + 1u,
                                             c.layout.spare_blocks + 2, c.layout.table_slack + 1);
    const Call s = call_case(kernel, shuffled, f.in);
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
    const Call d = call_case(kernel, with_layout(c, LayoutKind::bhtd), f.in);
    if (d.rc != 0) {
        const std::string e = refused_within_declaration(kernel, d, "with a contiguous cache");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    return same_within("paged out", f.call, o, d, o, "with a contiguous cache");
}

Verdict batch(const KernelUnderTest& kernel, const KernelCase& c) {
    // Each sequence alone (a batch of one, in the same layout) against its rows inside the batch.
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const std::size_t Dv = std::size_t(c.value_dim);
    for (int b = 0; b < c.batch; ++b) {
        const KernelCase alone = sequence_alone(c, b);
        const KernelInputs in = sequence_inputs(c, f.in, b);
        const Call s = call_case(kernel, alone, in);
        if (s.rc != 0) {
            const std::string e = refused_within_declaration(kernel, s, "as sequence " + std::to_string(b) + " alone");
            if (!e.empty()) return Verdict::fail(e);
            continue;
        }
        const reference::OracleV2 os = oracle_of(kernel, alone, in);
        // The rows of sequence b inside the batch, as a call of their own.
        Call part;
        part.built = build_case(alone, in);
        const std::size_t first = f.call.built.first_row[std::size_t(b)], n = s.out.size() / std::max<std::size_t>(Dv, 1);
        part.out.assign(f.call.out.begin() + std::ptrdiff_t(first * Dv), f.call.out.begin() + std::ptrdiff_t((first + n) * Dv));
        if (!f.call.lse.empty() && !s.lse.empty())
            part.lse.assign(f.call.lse.begin() + std::ptrdiff_t(first), f.call.lse.begin() + std::ptrdiff_t(first + n));
        Verdict v = same_within("sequence " + std::to_string(b) + " inside the batch: out", part, os, s, os, "alone");
        if (v.failed()) return v;
    }
    return Verdict::pass();
}

Verdict determinism(const KernelUnderTest& kernel, const KernelCase& c) {
    // The same call again with out and lse prefilled with zeros (a kernel must not read its
    // outputs), and once on another thread count (no dependence on it: other_thread_count).
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const Call second = call_case(kernel, c, f.in, {.zero_outputs = true});
    const int threads = omp_get_max_threads(), again_on = other_thread_count();
    omp_set_num_threads(again_on);
    const Call third = call_case(kernel, c, f.in);
    omp_set_num_threads(threads);
    if (second.rc != 0 || third.rc != 0)
        return Verdict::fail("the same call returned " + std::to_string(f.call.rc) + ", then " + std::to_string(second.rc) +
                             ", then " + std::to_string(third.rc));
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    const std::string declared = kernel.declaration.deterministic
                                     ? " (the kernel declares deterministic=yes, the default; one that is not by design "
                                       "declares deterministic=no)"
                                     : "";
    if (Verdict v = same_bits("", kernel, f.call, second, o, "with out prefilled with 0 instead of NaN"); v.failed())
        return Verdict::fail("the same call twice: " + v.message + declared);
    if (Verdict v = same_bits("", kernel, f.call, third, o, on_threads(again_on, threads)); v.failed())
        return Verdict::fail("the same call on " + std::to_string(threads) + " threads, then on 1: " + v.message + declared);
    return Verdict::pass();
}

Verdict poison_invisible(const KernelUnderTest& kernel, const KernelCase& c) {
    // The reference call: finite values everywhere (padding, gaps, unused blocks), invisible keys
    // with their ordinary values; then NaN and Inf there instead (large finite garbage for a
    // kernel that declares padding_values=finite), and large finite garbage in the keys inside
    // Tk(b) that no row sees (real keys of a real cache: finite, but not these).
    KernelCase finite = c;
    finite.filler = Filler::finite;
    finite.poison_invisible = false;
    const First f = first_call(kernel, finite);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    const std::vector<Filler> poisons =
        kernel.declaration.padding_finite ? std::vector<Filler>{Filler::large} : std::vector<Filler>{Filler::nan, Filler::inf};
    for (const Filler poison : poisons) {
        KernelCase p = c;
        p.filler = poison;
        p.poison_invisible = true;
        const Call r = call_case(kernel, p, f.in);
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

Verdict capacity_invariance(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    KernelCase bigger = c;
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
    const Call r = call_case(kernel, bigger, f.in);
    if (r.rc != 0) {
        const std::string e = refused_within_declaration(kernel, r, how);
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    return same_within("out", f.call, o, r, o, how);
}

Verdict split_agreement(const KernelUnderTest& kernel, const KernelCase& c) {
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
        const KernelCase part = rows_alone(c, 0, from, to);
        const KernelInputs in = rows_inputs(c, f.in, 0, from, to);
        const Call r = call_case(kernel, part, in);
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

Verdict no_oob_write(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (const std::string w = f.call.built.write_outside(); !w.empty()) return Verdict::fail("kernel " + w);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    if (const std::string u = f.call.built.unwritten(); !u.empty()) return Verdict::fail(u);
    return Verdict::pass();
}

Verdict inputs_unchanged(const KernelUnderTest& kernel, const KernelCase& c) {
    const First f = first_call(kernel, c);
    if (const std::string w = f.call.built.input_change(); !w.empty()) return Verdict::fail(w);
    if (f.call.rc != 0) return unsupported(f.call.rc);
    return Verdict::pass();
}

Verdict no_oob_read(const KernelUnderTest& kernel, const KernelCase& c) {
    // q, k and v end against an inaccessible page: a read past their end faults (in the isolated
    // worker, a crash reported with this case). A result that the placement changes means reads
    // of what lies around the inputs; one that is merely inaccurate is agreement's to report.
    const First f = first_call(kernel, c, {.guard_page_inputs = true});
    if (f.call.rc != 0) return unsupported(f.call.rc);
    const Call plain = call_case(kernel, c, f.in);
    if (plain.rc != 0) {
        const std::string e = refused_within_declaration(kernel, plain, "with the inputs in ordinary memory");
        return e.empty() ? Verdict::pass() : Verdict::fail(e);
    }
    // The same bits (NaN included) from both placements: nothing around the inputs was read.
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() &&
               std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
                   return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y) || (std::isnan(x) && std::isnan(y));
               });
    };
    if (same(f.call.out, plain.out) && same(f.call.lse, plain.lse)) return Verdict::pass();
    const reference::OracleV2 o = oracle_of(kernel, c, f.in);
    return same_within("with the inputs against a guard page, out", f.call, o, plain, o, "with the inputs in ordinary memory");
}

}  // namespace

// The forward's properties, then the backward's (properties/gradients.cpp), in the report's order.
std::vector<KernelProperty> with_gradient_properties(std::vector<KernelProperty> forward) {
    const std::vector<KernelProperty>& backward = gradient_properties();
    forward.insert(forward.end(), backward.begin(), backward.end());
    return forward;
}

const std::vector<KernelProperty>& kernel_properties() {
    static const std::vector<KernelProperty> all = with_gradient_properties({
        {"agreement", "out (and lse when asked) agrees with the float64 oracle within the bound of the problem's dtype", {}, agreement},
        {"lse", "the log-sum-exp output: natural log, the scale and softcap applied, -inf for an empty row", {.need_lse = true}, lse},
        {"causality", "replacing keys/values after row r's position leaves rows <= r unchanged (bitwise when deterministic)",
         {.need_causal_future = true}, causality},
        {"empty_rows", "a row with no visible key (Tk(b) = 0, a window past the keys) gives exactly 0 and lse -inf",
         {.need_empty = true}, empty_rows},
        {"gqa_equals_replicated", "grouped-query attention equals MHA with each K/V head replicated over its group",
         {.need_gqa = true}, gqa_equals_replicated},
        {"layout_invariance", "[B,H,T,D], [B,T,H,D] and a view with gaps give the same result", {.need_dense = true}, layout_invariance},
        {"paged_permutation", "a paged cache under another block permutation (spare blocks, table slack) and as a contiguous cache give the same result",
         {.need_paged = true}, paged_permutation},
        {"batch", "a sequence alone equals the same sequence inside a batch (dense, packed or paged)", {.min_batch = 2}, batch},
        {"determinism", "the same call twice (out prefilled otherwise), and on one thread, gives bitwise the same out and lse",
         {}, determinism},
        {"row_sums", "all-ones values: every row's probabilities sum to 1 (0 for a row with no visible key)", {}, row_sums},
        {"probabilities", "identity values expose the rows: in [0,1], masked keys exactly 0, each within its bound",
         {.max_kv = 128}, probabilities},
        {"poison_invisible", "NaN or Inf in padding, gaps and unused cache blocks, and garbage in keys no row sees, change nothing (bitwise when deterministic)",
         {.need_invisible = true}, poison_invisible},
        {"capacity_invariance", "the result does not depend on the cache capacity (dense rows, paged blocks and table width)", {}, capacity_invariance},
        {"split_agreement", "a prefill agrees with its rows called as chunks and decode steps, split next to tile sizes",
         {.need_prefill = true, .large_percent = 30}, split_agreement},
        {"softcap_bound", "with softcap, two visible keys' probabilities differ by at most e^(2 cap) (scores within the cap)",
         {.need_softcap = true, .max_kv = 128}, softcap_bound},
        {"no_oob_write", "nothing written outside out and lse (guards, gaps), and every element of them written", {}, no_oob_write},
        {"inputs_unchanged", "q, k, v (padding and gaps included) bitwise unchanged by the call", {}, inputs_unchanged},
        {"no_oob_read", "q, k, v placed against a guard page: a read past their end faults (a crash of the case), and the result must not change with the placement", {}, no_oob_read},
        {"abi_version", "a problem of a version the kernel does not know (3 or 1; a version 1 kernel: 2 or 0) is refused (nonzero)", {}, abi_version},
        {"refuses_undeclared", "a problem outside what the kernel declares (dtype, GQA, layout, varlen, paged, window, ...) is refused",
         {}, refuses_undeclared},
        {"refuses_malformed", "a malformed problem (kv_heads not dividing q_heads, a block-table entry out of range, q_pos < 0) is refused (a note if not)",
         {}, refuses_malformed},
    });
    return all;
}

std::string not_applicable(const KernelProperty& prop, const KernelDeclaration& d) {
    const CaseOptions& o = prop.options;
    // A version 1 kernel did not declare version 2's items: the ABI it is written against lacks them.
    const auto lacks = [&](const char* item, const char* feature) {
        return d.abi_v1 ? std::string("version 1 of the ABI has no ") + feature : std::string("declared ") + item;
    };
    if (o.backward && !d.backward)
        return d.abi_v1 ? "version 1 of the ABI has no backward pass"
                        : d.backward_said == KernelDeclaration::Said::no ? "declared backward=no" : std::string(kNoBackward);
    if (o.need_lse && !d.lse) return lacks("lse=no", "lse output");
    if (o.need_varlen && !d.varlen) return lacks("varlen=no", "packed variable-length batches");
    if (o.need_paged && !d.paged) return lacks("paged=no", "paged KV cache");
    if (o.need_paged && !d.dense) return "declared dense=no (a paged case's query rows are dense)";
    if (o.need_dense && !d.dense) return "declared dense=no";
    if (o.need_gqa && !d.gqa) return lacks("gqa=no", "grouped-query heads");
    if (o.need_softcap && !d.softcap) return lacks("softcap=no", "softcap");
    if ((o.need_causal_future || o.need_prefill) && !d.causal) return "declared mask=none";
    if (o.min_batch > 1 && d.max_batch == 1) return "declared max_batch=1: the property needs a batch of 2 sequences";
    // A single query row with a key after it in the cache needs q_pos[b] < Tk(b) - 1.
    if (o.need_causal_future && d.max_q_len == 1 && !d.positions_any)
        return "declared max_q_len=1 with positions=bottom_right: the one query row is the sequence's last, no key is after it";
    // Only a sequence without keys (padding, a packed or paged batch) or a window leaves a row
    // with no visible key: key 0 is at or before every position.
    if (o.need_empty && !d.padding && !d.varlen && !d.paged && !d.window)
        return d.abi_v1 ? "declared padding=no: every row sees key 0"
                        : "declared padding=no with varlen=no, paged=no and window=no: every row sees key 0";
    // Under bottom-right positions a row's own position is always a visible key.
    if (o.need_empty && !d.positions_any) return "declared positions=bottom_right: no row is ever empty";
    // Without a window, a key no row sees needs a causal horizon short of the keys, which
    // bottom-right positions (or no causal mask) never leave.
    if (o.need_invisible && !d.window && (!d.causal || !d.positions_any))
        return "declared window=no with " + std::string(d.causal ? "positions=bottom_right" : "mask=none") +
               ": every key is seen by some row";
    if (prop.name == "layout_invariance" && !d.layout_any) return lacks("layout=contiguous", "layout but contiguous [B,H,T,D]");
    if (prop.name == "grad_forward_consistency" && !d.lse) return "declared lse=no: the backward needs the forward's lse";
    if (prop.name == "split_agreement" && d.max_q_len == 1) return "declared max_q_len=1: a single query row has nothing to split";
    return {};
}

bool needs_backward(const KernelProperty& prop) { return prop.options.backward; }

bool needs_abi_v2(const KernelProperty& prop) { return !not_applicable(prop, checked_declaration({}, false)).empty(); }

std::string abi_v1_lacks(const std::function<bool(const std::string&)>& keep) {
    std::string names;
    for (const KernelProperty& p : kernel_properties())
        if (needs_abi_v2(p) && keep(p.name)) names += (names.empty() ? "" : ", ") + p.name;
    return names;
}

std::string untried(const KernelProperty& prop, const KernelDeclaration& d) {
    if (prop.name == "poison_invisible" && d.padding_finite && !d.abi_v1)  // version 1's padding is finite
        return "declared padding_values=finite: NaN and Inf were not tried in padding, gaps and unused blocks "
               "(large finite garbage instead)";
    return {};
}

}  // namespace attncheck::properties
