// tests/zoo/mutants_test.cpp — the zoo of kernels/mutants.cpp is well formed: the correct bases
// pass, and every mutant is observable through the ABI (a mutant equivalent to the correct kernel
// is not a mutant). Uses the independent checker of zoo_check.hpp, not the property suite.
#include <catch2/catch.hpp>

#include <set>

#include "kernels/registry.hpp"
#include "zoo_check.hpp"

using namespace attncheck;
using namespace zoo_test;

namespace {
// The version 1 kernels of a role (the v2 zoo has tests of its own, tests/zoo/zoo_v2_test.cpp).
std::vector<const KernelEntry*> v1_kernels_of(KernelRole role) {
    std::vector<const KernelEntry*> v1;
    for (const KernelEntry* e : kernels_of(role))
        if (e->fn) v1.push_back(e);
    return v1;
}
}  // namespace

TEST_CASE("the zoo has at least 14 uniquely named mutants, each with a one-line bug") {
    const auto zoo = v1_kernels_of(KernelRole::mutant);
    CHECK(zoo.size() >= 14);
    std::set<std::string> names;
    for (const KernelEntry* m : zoo) {
        INFO(m->name);
        CHECK(names.insert(m->name).second);
        CHECK(m->fn != nullptr);
        CHECK(!m->bug.empty());
        CHECK(m->bug.find('\n') == std::string::npos);
        CHECK(find_kernel(m->name) == m);
        CHECK(find_kernel(m->name, KernelRole::mutant) == m);
        CHECK(find_kernel(m->name, KernelRole::builtin) == nullptr);
    }
    CHECK(find_kernel("no such mutant") == nullptr);
    // Every name in the registry is unique across roles (a name selects one kernel).
    std::set<std::string> all;
    for (const KernelEntry& e : kernel_registry()) CHECK(all.insert(e.name).second);
}

TEST_CASE("the correct bases agree with the reference on every witness problem and seed") {
    REQUIRE(v1_kernels_of(KernelRole::zoo_base).size() == 2);
    for (const KernelEntry* base : v1_kernels_of(KernelRole::zoo_base))
        for (const Problem& pr : witness_problems())
            for (std::uint32_t seed = 1; seed <= 20; ++seed) {
                const zoo_test::Verdict v = check_once(base->fn, make_inputs(pr, seed));
                INFO(base->name << ", problem " << pr.name << ", seed " << seed << ": " << v.why);
                CHECK_FALSE(v.flagged);
            }
}

TEST_CASE("every mutant is observable: some witness problem exposes it") {
    for (const KernelEntry* m : v1_kernels_of(KernelRole::mutant)) {
        std::string caught_by;
        for (const Problem& pr : witness_problems()) {
            const zoo_test::Verdict v = check_once(m->fn, make_inputs(pr, 1));
            if (v.flagged) {
                caught_by = pr.name + ": " + v.why;
                break;
            }
        }
        INFO("mutant " << m->name << " (" << m->bug << ")" << (caught_by.empty() ? " not caught" : " caught by " + caught_by));
        CHECK(!caught_by.empty());
    }
}

TEST_CASE("mutants refuse malformed problems like the built-in kernels (unsupported never hides a bug)") {
    Inputs in = make_inputs(witness_problems()[0], 3);
    std::vector<float> out(4096 + 64, 0.0f);
    for (const KernelEntry* m : v1_kernels_of(KernelRole::mutant)) {
        INFO(m->name);
        attncheck_problem p = in.p;
        p.abi_version = 2;
        CHECK(m->fn(&p, in.q.data(), in.k.data(), in.v.data(), out.data()) != ATTNCHECK_OK);
        p = in.p;
        p.q_offset = -1;
        CHECK(m->fn(&p, in.q.data(), in.k.data(), in.v.data(), out.data()) != ATTNCHECK_OK);
        p = in.p;
        p.head_dim = 0;
        CHECK(m->fn(&p, in.q.data(), in.k.data(), in.v.data(), out.data()) != ATTNCHECK_OK);
    }
}
