// tests/zoo/zoo_backward_test.cpp — the backward pass's zoo of kernels/zoo_backward.cpp and its
// correct backward: the zoo's entries (bwd_naive and its mutants); bwd_naive agrees with float64
// gradients computed here by plain loops (from the inputs as stored, with an exact softmax, never
// from the kernel's lse or out), writes every gradient element and nothing else, reads no key that
// no row sees (those hold NaN), leaves its inputs unchanged and refuses what it must. Each mutant
// on the case that shows its bug: zoo_backward_mutants_test.cpp.
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
