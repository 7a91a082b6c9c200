// tests/properties/check_test.cpp — the one-call API (attncheck/check.hpp), the large-shape tier
// of the generators, and the BatchSession property's teeth.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>

#include "attncheck/check.hpp"
#include "attncheck/kernels.hpp"
#include "reference/attention_v2.hpp"
#include "kernels/registry.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/kernel_case.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/runner.hpp"

using namespace attncheck;
using namespace attncheck::properties;

TEST_CASE("check_kernel passes a correct kernel and reports every property", "[check]") {
    CheckOptions o;
    o.cases = 20;
    o.decoder_cases = 3;
    const CheckReport r = check_kernel(attncheck_reference_kernel, "reference", o);
    INFO(r.text);
    CHECK(r.passed);
    CHECK(r.failed.empty());
    for (const auto& p : kernel_properties()) CHECK(r.text.find(p.name) != std::string::npos);
    for (const auto& p : decoder_properties()) CHECK(r.text.find(p.name) != std::string::npos);
}

TEST_CASE("check_kernel fails a mutant with a shrunk case and a replay line", "[check]") {
    const KernelEntry* m = find_kernel("missing_scale", KernelRole::mutant);
    REQUIRE(m);
    CheckOptions o;
    o.cases = 50;
    o.decoder = false;
    const CheckReport r = check_kernel(m->fn, m->name, o);
    INFO(r.text);
    CHECK_FALSE(r.passed);
    CHECK(std::find(r.failed.begin(), r.failed.end(), "agreement") != r.failed.end());
    CHECK(r.text.find("replay: ATTNCHECK_SEED=" + std::to_string(r.seed) + " ATTNCHECK_CASES=50 ATTNCHECK_PROPERTY=agreement") !=
          std::string::npos);
    CHECK(r.text.find("case = dtype=") != std::string::npos);  // the shrunk case
    CHECK(r.text.find("float64 oracle") != std::string::npos);  // the element, both values, the bound
}

TEST_CASE("check_kernel rejects bad options", "[check]") {
    CheckOptions o;
    o.only = {"no_such_property"};
    CHECK_THROWS_AS(check_kernel(attncheck_reference_kernel, "reference", o), std::invalid_argument);
    CHECK_THROWS_AS(check_kernel(attncheck_kernel_fn{nullptr}, "null", CheckOptions{}), std::invalid_argument);
    CHECK_THROWS_AS(check_kernel(attncheck_kernel_v2_fn{nullptr}, "null", CheckOptions{}), std::invalid_argument);
    o.only = {"abi_version"};
    const CheckReport one = check_kernel(attncheck_reference_kernel, "reference", o);
    CHECK(one.passed);
    CHECK(one.text.find("agreement") == std::string::npos);
}

TEST_CASE("CheckOptions::from_environment reads the replay variables", "[check]") {
    ::setenv("ATTNCHECK_SEED", "77", 1);
    ::setenv("ATTNCHECK_CASES", "12", 1);
    ::setenv("ATTNCHECK_PROPERTY", "agreement,causality", 1);
    const CheckOptions o = CheckOptions::from_environment();
    CHECK(o.seed == 77);
    CHECK(o.cases == 12);
    CHECK(o.decoder_cases == 12);
    CHECK(o.only == std::vector<std::string>{"agreement", "causality"});
    ::setenv("ATTNCHECK_CASES", "many", 1);
    CHECK_THROWS_AS(CheckOptions::from_environment(), std::invalid_argument);
    ::unsetenv("ATTNCHECK_SEED");
    ::unsetenv("ATTNCHECK_CASES");
    ::unsetenv("ATTNCHECK_PROPERTY");
}

TEST_CASE("the large tier reaches tile edges, long decode contexts and wide heads early", "[check][generators]") {
    int longest_decode = 0, widest = 0, longest_q = 0, large = 0, cases = 0;
    const rc::Gen<KernelCase> gen = gen_kernel_case({}, KernelDeclaration{});
    const PropertyResult r = run_property(
        "spread",
        [&] {
            const KernelCase c = *gen;
            ++cases;
            if (c.mode == OffsetMode::decode) longest_decode = std::max(longest_decode, c.max_kv_len());
            widest = std::max({widest, c.head_dim, c.value_dim});
            longest_q = std::max(longest_q, c.max_q_len());
            large += c.max_kv_len() > 64 || c.head_dim > 32 ? 1 : 0;
            return Verdict::pass();
        },
        RunParams{1, 1000});
    REQUIRE(r.status == Status::pass);
    CHECK(longest_decode > 512);  // past a 512-key split-K chunk
    CHECK(widest >= 64);
    CHECK(longest_q > 64);
    CHECK(large >= cases / 50);  // a minority, but there
    CHECK(large <= cases / 5);
}

TEST_CASE("batch_session catches a kernel that ignores kv_valid_len inside the decoder", "[check][decoder]") {
    const KernelEntry* m = find_kernel("padding_ignored", KernelRole::mutant);
    REQUIRE(m);
    const DecoderProperty* prop = nullptr;
    for (const auto& p : decoder_properties())
        if (p.name == "batch_session") prop = &p;
    REQUIRE(prop);
    const rc::Gen<DecoderCase> gen = gen_decoder_case(prop->options);
    const DecoderUnderTest d{"optimized[padding_ignored]", *m};
    const PropertyResult r = run_property(prop->name, [&] { return prop->check(d, *gen); }, RunParams{3, 30});
    INFO(r.message);
    CHECK(r.status == Status::fail);
    CHECK(r.message.find("BatchSession") != std::string::npos);
}

namespace {
// The version 2 reference without packed variable-length batches and paged caches (it refuses them).
int reference_v2_dense_only(const attncheck_problem_v2* p) {
    if (p->cu_seqlens_q || p->cu_seqlens_k || p->block_table) return ATTNCHECK_UNSUPPORTED;
    return attncheck_reference_kernel_v2(p);
}

// The version 2 reference with one bug: the scale ignored.
int reference_v2_without_scale(const attncheck_problem_v2* p) {
    attncheck_problem_v2 unscaled = *p;
    unscaled.scale = 1.0f;
    return attncheck_reference_kernel_v2(&unscaled);
}
}  // namespace

TEST_CASE("check_kernel of a version 2 kernel runs the version 2 properties, within its declaration", "[check]") {
    CheckOptions o;
    o.cases = 20;
    o.declaration = "varlen=no; paged=no";
    const CheckReport good = check_kernel(reference_v2_dense_only, "reference_v2_dense_only", o);
    INFO(good.text);
    CHECK(good.passed);
    CHECK(good.text.find("agreement") != std::string::npos);
    CHECK(good.text.find("paged_permutation: not applicable (declared paged=no)") != std::string::npos);
    CHECK(good.text.find("row_sums") != std::string::npos);
    // The decoder level too: the optimized decoder calls it through version 2.
    CHECK(good.text.find("per decoder property") != std::string::npos);
    for (const auto& p : decoder_properties()) CHECK(good.text.find(p.name) != std::string::npos);

    // A declaration without float32 rules the decoder's calls out: said, not run.
    o.declaration = "dtype=bf16";
    o.only = {"agreement", "logits_causality"};  // (the reference accepts f32 too: not refuses_undeclared)
    const CheckReport bf16 = check_kernel(attncheck_reference_kernel_v2, "reference_v2_as_bf16", o);
    INFO(bf16.text);
    CHECK(bf16.passed);
    CHECK(bf16.text.find("decoder-level properties: not run (it does not declare dtype f32") != std::string::npos);
    CHECK(bf16.text.find("logits_causality") == std::string::npos);
    o.only.clear();

    o.declaration = "";
    o.only = {"agreement_v2", "probabilities"};  // a name from before the versions shared them is accepted
    const CheckReport bad = check_kernel(reference_v2_without_scale, "reference_v2_without_scale", o);
    INFO(bad.text);
    CHECK_FALSE(bad.passed);
    CHECK(std::find(bad.failed.begin(), bad.failed.end(), "agreement") != bad.failed.end());
    CHECK(std::find(bad.failed.begin(), bad.failed.end(), "probabilities") != bad.failed.end());
}

TEST_CASE("check_kernel of a kernel with a backward pass runs the gradient properties", "[check][backward]") {
    CheckOptions o;
    o.cases = 20;
    o.decoder = false;
    o.only = {"agreement", "grad_agreement", "grad_causality", "grad_writes"};
    const CheckReport good = check_kernel(attncheck_reference_kernel_v2, attncheck_reference_kernel_v2_backward, "reference_v2", o);
    INFO(good.text);
    CHECK(good.passed);
    for (const char* name : {"grad_agreement", "grad_causality", "grad_writes"}) CHECK(good.text.find(name) != std::string::npos);

    // Without a backward, the gradient properties are named on one line, not run.
    const CheckReport forward_only = check_kernel(attncheck_reference_kernel_v2, "reference_v2 (forward only)", o);
    INFO(forward_only.text);
    CHECK(forward_only.passed);
    CHECK(forward_only.text.find(std::string(kNoBackwardLine) + "grad_agreement, grad_writes, grad_causality") != std::string::npos);

    // A backward that drops the D term fails grad_agreement with the element and the bound.
    const KernelEntry* m = find_kernel("bwd_d_term_dropped", KernelRole::mutant);
    REQUIRE(m);
    REQUIRE(m->backward_v2);
    const CheckReport bad = check_kernel(m->fn_v2, m->backward_v2, m->name, o);
    INFO(bad.text);
    CHECK_FALSE(bad.passed);
    CHECK(std::find(bad.failed.begin(), bad.failed.end(), "grad_agreement") != bad.failed.end());
    CHECK(bad.text.find("float64 oracle") != std::string::npos);
    CHECK_THROWS_AS(check_kernel(attncheck_reference_kernel_v2, attncheck_kernel_v2_backward_fn{nullptr}, "null", o),
                    std::invalid_argument);
}
