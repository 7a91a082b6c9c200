// tests/properties/properties_test.cpp — every property at a CI budget: the built-in kernels and
// decoders pass, the zoo's correct base kernels pass, and every mutant is killed.
#include <catch2/catch.hpp>

#include <algorithm>

#include "kernels/registry.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/property_runs.hpp"
#include "properties/runner.hpp"
#include "tests/properties/ci_params.hpp"

using namespace attncheck;
using namespace attncheck::properties;

namespace {

PropertyResult run(const DecoderProperty& prop, const DecoderUnderTest& d, const RunParams& params) {
    const rc::Gen<DecoderCase> gen = gen_decoder_case(prop.options);
    return run_property(prop.name, [&] { return prop.check(d, *gen.as("case")); }, params);
}

std::string report(const PropertyResult& r, const std::string& subject) {
    return subject + " / " + r.property + ": " + to_string(r.status) + " at case " + std::to_string(r.failed_at) +
           "\n" + r.counterexample + r.message;
}

// The registry entry as the properties take it, with its declaration.
KernelUnderTest under_test(const KernelEntry& e) {
    KernelUnderTest k{e.name, e.fn, true, KernelDeclaration::parse(e.declaration)};
    k.fn_v2 = e.fn_v2;
    set_backward(k, e.backward_v2);
    return k;
}

// Every kernel property the entry's ABI version can pose, each result in turn to `each`; stops
// early when `each` returns false. A backward zoo entry gets the gradient properties only (its
// forward is a built-in, checked as such), as in `attncheck fuzz --mutants`.
template <class Each>
void each_kernel_property(const KernelEntry& e, const RunParams& params, Each each) {
    const KernelUnderTest k = checked(under_test(e));
    for (const KernelProperty& prop : kernel_properties())
        if (not_applicable(prop, k.declaration).empty() && (!e.backward_only || needs_backward(prop)) &&
            !each(run_kernel_property(prop, k, params)))
            return;
}

// Every kernel of a role passes every kernel property of its ABI version; with
// accepts_everything it also ran the whole budget on every property, refusing no case (a
// version 2 kernel is also sent problems it must refuse, and refuses them).
void every_kernel_property_passes(KernelRole role, bool accepts_everything) {
    const RunParams params = test::ci_params(150);
    for (const KernelEntry* e : kernels_of(role))
        each_kernel_property(*e, params, [&](const PropertyResult& r) {
            INFO(report(r, e->name));
            CHECK(r.status == Status::pass);
            if (accepts_everything && !e->fn_v2) {
                CHECK(r.cases == params.cases);
                CHECK(r.unsupported == 0);
            }
            // A correct kernel's metamorphic calls may differ in the last bits (a note); the
            // version 2 reference kernel rounds the float64 result, so its never do.
            if (std::string(e->name) == "reference_v2" && r.property != "refuses_malformed") CHECK(r.notes == 0);
            return true;
        });
}

}  // namespace

TEST_CASE("the built-in kernels pass every kernel property", "[properties]") {
    every_kernel_property_passes(KernelRole::builtin, /*accepts_everything=*/true);  // every valid problem
}

TEST_CASE("the zoo's correct base kernels pass every kernel property", "[properties][zoo]") {
    every_kernel_property_passes(KernelRole::zoo_base, /*accepts_everything=*/false);
}

namespace {

void decoder_passes_every_property(const DecoderUnderTest& d) {
    const RunParams params = test::ci_params(15);
    for (const DecoderProperty& prop : decoder_properties()) {
        if (prop.optimized_only && !d.optimized()) continue;
        // The training step's properties on a kernel without a backward pass (version 1).
        if (!decoder_not_applicable(prop, d.declaration, d.kernel.fn_v2 != nullptr).empty()) continue;
        const PropertyResult r = run(prop, d, params);
        INFO(report(r, d.name));
        CHECK(r.status == Status::pass);
    }
}

// The optimized decoder around the built-in kernel `name`. A version 2 kernel makes every call
// through version 2, with a paged cache (grouped-query heads, windows and rope as drawn by the
// case generator). One test case per kernel, so that ctest runs them side by side.
void optimized_decoder_passes_every_property(const std::string& name) {
    for (const KernelEntry* e : kernels_of(KernelRole::builtin))
        if (e->name == name) return decoder_passes_every_property({"optimized[" + name + "]", *e});
    FAIL("no built-in kernel " << name);
}

}  // namespace

TEST_CASE("the reference decoder passes every decoder property", "[properties][decoder]") {
    decoder_passes_every_property({"reference", attncheck_kernel_fn{nullptr}});
}

TEST_CASE("the optimized decoder passes every decoder property around the built-in kernel optimized",
          "[properties][decoder]") {
    optimized_decoder_passes_every_property("optimized");
}

TEST_CASE("the optimized decoder passes every decoder property around the built-in kernel reference",
          "[properties][decoder]") {
    optimized_decoder_passes_every_property("reference");
}

TEST_CASE("the optimized decoder passes every decoder property around the built-in kernel optimized_v2",
          "[properties][decoder][v2]") {
    optimized_decoder_passes_every_property("optimized_v2");
}

TEST_CASE("the optimized decoder passes every decoder property around the built-in kernel reference_v2",
          "[properties][decoder][v2]") {
    optimized_decoder_passes_every_property("reference_v2");
}

TEST_CASE("the decoder property tests cover every built-in kernel", "[properties][decoder]") {
    std::vector<std::string> names;
    for (const KernelEntry* e : kernels_of(KernelRole::builtin)) names.push_back(e->name);
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"optimized", "optimized_v2", "reference", "reference_v2"});
}

TEST_CASE("a registry entry's reads_only_visible_keys reaches the decoder under test", "[properties][decoder]") {
    // Only the built-in optimized kernel makes the promise; the decoder the properties build
    // around any entry takes exactly what the entry declares, and a bare function declares nothing.
    const Model model = init_model(ModelConfig{}, 1);
    for (const KernelEntry& e : kernel_registry()) {
        INFO(e.name);
        CHECK(e.reads_only_visible_keys == (e.name == "optimized" && e.role == KernelRole::builtin));
        const DecoderUnderTest d{"optimized[" + e.name + "]", e, KernelDeclaration::parse(e.declaration)};
        CHECK(d.kernel.fn == e.fn);
        CHECK(d.kernel.fn_v2 == e.fn_v2);
        const optimized::Decoder dec = optimized_decoder_of(d, model);
        CHECK(dec.attention_kernel().fn == e.fn);
        CHECK(dec.attention_kernel().fn_v2 == e.fn_v2);
        // A version 2 kernel's decoder keeps a paged cache (every registry v2 kernel declares paging).
        CHECK(dec.attention_kernel().block_size == (e.fn_v2 ? kDecoderBlockSize : 0));
        CHECK(dec.attention_kernel().reads_only_visible_keys == e.reads_only_visible_keys);
    }
    // The paged cache's block size follows a version 2 kernel's declaration.
    CHECK(DecoderUnderTest::decoder_block_size(KernelDeclaration::parse("paged=no"), 4) == 0);
    CHECK(DecoderUnderTest::decoder_block_size(KernelDeclaration::parse("block_size=16,32"), 4) == 16);
    CHECK(DecoderUnderTest::decoder_block_size(KernelDeclaration::parse("block_size=1..8"), 4) == 4);
    CHECK(DecoderUnderTest::decoder_block_size(KernelDeclaration{}, 4) == 4);
    const DecoderUnderTest bare{"optimized[bare]", attncheck_optimized_kernel};
    CHECK_FALSE(optimized_decoder_of(bare, model).attention_kernel().reads_only_visible_keys);
}

TEST_CASE("every mutant is killed by some kernel property within the default budget", "[properties][zoo]") {
    // The claim is "within the default budget" (300 cases per property, as `attncheck fuzz`), so a
    // smaller CI budget (ATTNCHECK_CI_CASES / RC_PARAMS) does not lower it: the mutants of the
    // large tier (tile edges, split-K, lane remainders) need a few dozen cases. It stays cheap: a
    // mutant's properties run only until the first one kills it.
    const RunParams ci = test::ci_params(300);
    const RunParams params{ci.seed, std::max(ci.cases, 300)};
    REQUIRE(kernels_of(KernelRole::mutant).size() >= 12);
    for (const KernelEntry* m : kernels_of(KernelRole::mutant)) {
        // Its reads may fault or overflow a heap buffer: `attncheck fuzz` runs it in a worker
        // process, and tests/cli/fuzz_test.cpp checks that it is killed there.
        if (m->reads_out_of_bounds) continue;
        int first_kill = 0;
        std::string by;
        each_kernel_property(*m, params, [&](const PropertyResult& r) {
            CHECK(r.status != Status::error);
            if (r.status == Status::fail && (first_kill == 0 || r.failed_at < first_kill)) {
                first_kill = r.failed_at;
                by = r.property;
            }
            return first_kill == 0;
        });
        INFO("mutant " << m->name << " (" << m->bug << "): killed by " << (by.empty() ? "nothing" : by)
                       << " after " << first_kill << " cases");
        CHECK(first_kill > 0);
    }
}
