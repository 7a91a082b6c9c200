// tests/zoo/zoo_backward_mutants_test.cpp — the mutants of the backward pass's zoo
// (kernels/zoo_backward.cpp): every mutant is wrong, on a case the test names, by far more than
// float32 rounding (kMutantGap, a hundred times the base's tolerance) and far outside the float64
// oracle's bound, where bwd_naive is right; every mutant has such a case; and where its bug cannot
// show, a mutant writes bwd_naive's bits.
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
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/kernels.hpp"
#include "attncheck/problem_v2.hpp"
#include "kernels/registry.hpp"
#include "tests/zoo/spec_v2.hpp"
#include "tests/zoo/zoo_backward_cases.hpp"

using namespace attncheck;
using namespace zoo_test;
using namespace zoo_test::backward;  // Case, float64_backward(), base_is_right() (zoo_backward_cases.hpp)

// ---- each mutant on a case that shows its bug ---------------------------------------------------

namespace {

// How far a mutant must be from the float64 gradients (relative to their scale) to count as
// caught: a hundred times the float32 tolerance, far beyond any rounding.
constexpr double kMutantGap = 1e-2;
// And how far outside the float64 oracle's bound (a correct kernel stays below 1).
constexpr double kMutantOracleRatio = 100.0;

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
