// tests/properties/decoder_gradients_test.cpp — the decoder gradient properties
// (properties/decoder_gradients.hpp): the built-in kernels with a backward pass them; every bug
// the training step can have planted (optimized::step_grad_bugs()) and the backward zoo's
// mask-ignored and rowsum-dropped kernels fail them; a kernel without a backward is not
// applicable, on one line; the comparison itself. The hidden "[bound_study]" case is the
// measurement behind kDecoderGradBound (docs/numerics.md section 6):
//     build/tests/properties/properties_v2_tests "[bound_study]"   (ATTNCHECK_STUDY_CASES=N)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>

#include <rapidcheck.h>

#include "kernels/registry.hpp"
#include "optimized/train_step.hpp"
#include "properties/decoder_gradients.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/property_runs.hpp"
#include "tests/properties/ci_params.hpp"

using namespace attncheck;
using namespace attncheck::properties;

namespace {

const DecoderProperty& property(const std::string& name) {
    for (const DecoderProperty& p : decoder_properties())
        if (p.name == name) return p;
    throw std::invalid_argument("no decoder property " + name);
}

const std::vector<std::string> kGradProperties = {"decoder_grad_agreement", "decoder_grad_causality",
                                                  "decoder_grad_batch", "decoder_grad_determinism"};

// The optimized decoder around a registry kernel, with its declaration and its backward pass.
DecoderUnderTest decoder_of(const std::string& kernel) {
    const KernelEntry* e = find_kernel(kernel);
    if (!e) throw std::invalid_argument("no kernel " + kernel);
    return DecoderUnderTest{"optimized[" + kernel + "]", *e, KernelDeclaration::parse(e->declaration)};
}

std::string report(const PropertyResult& r, const std::string& subject) {
    return subject + " / " + r.property + ": " + to_string(r.status) + " (" + std::to_string(r.cases) + " cases, " +
           std::to_string(r.unsupported) + " refused, " + std::to_string(r.vacuous) + " with nothing to check) at case " +
           std::to_string(r.failed_at) + "\n" + r.counterexample + "\n" + r.message;
}

// At least `cases` cases, whatever RC_PARAMS asks: a planted bug must be found within them.
RunParams kill_params(int cases) {
    RunParams r = test::ci_params(cases);
    r.cases = std::max(r.cases, cases);
    return r;
}

}  // namespace

TEST_CASE("the built-in kernels with a backward pass the decoder gradient properties", "[properties][decoder][gradients]") {
    const RunParams params = test::ci_params(60);
    for (const std::string kernel : {"optimized_v2", "reference_v2"}) {
        const DecoderUnderTest d = decoder_of(kernel);
        REQUIRE(d.backward != nullptr);
        for (const std::string& name : kGradProperties) {
            const DecoderProperty& prop = property(name);
            REQUIRE(decoder_not_applicable(prop, d.declaration, true).empty());
            const PropertyResult r = run_decoder_property(prop, d, params);
            INFO(report(r, d.name));
            CHECK(r.status == Status::pass);
            CHECK(r.unsupported == 0);
            // Vacuous cases (a batch of one, tied embeddings with sinusoidal positions) are a minority.
            CHECK(r.vacuous * 2 < r.cases);
        }
    }
}

TEST_CASE("every bug planted in the training step fails decoder_grad_agreement, and the one it should of the others",
          "[properties][decoder][gradients]") {
    using reference::GradBug;
    // Besides agreement: a position's gradient on the next position leaks from the future; a sum
    // not divided by the weight makes a batch differ from its sequences' weighted sum.
    const std::map<GradBug, std::vector<std::string>> also = {{GradBug::position_shifted, {"decoder_grad_causality"}},
                                                             {GradBug::loss_not_normalised, {"decoder_grad_batch"}}};
    const std::vector<GradBug> bugs = optimized::step_grad_bugs();
    CHECK(bugs.size() >= 5);
    const RunParams p = kill_params(100);
    for (const GradBug bug : bugs) {
        DecoderUnderTest d = decoder_of("optimized_v2");
        d.step_bug = bug;
        std::vector<std::string> must_fail = {"decoder_grad_agreement"};
        if (const auto it = also.find(bug); it != also.end()) must_fail.insert(must_fail.end(), it->second.begin(), it->second.end());
        for (const std::string& name : must_fail) {
            const PropertyResult r = run_decoder_property(property(name), d, p);
            INFO(report(r, d.name + " with " + reference::to_string(bug)));
            CHECK(r.status == Status::fail);
        }
        // The determinism of a buggy step is still determinism.
        const PropertyResult same = run_decoder_property(property("decoder_grad_determinism"), d, test::ci_params(10));
        INFO(report(same, d.name + " with " + reference::to_string(bug)));
        CHECK(same.status == Status::pass);
    }
}

TEST_CASE("a failing agreement names the tensor, the element, both values, the bound and the batch",
          "[properties][decoder][gradients]") {
    DecoderUnderTest d = decoder_of("optimized_v2");
    d.step_bug = reference::GradBug::layer_norm_mean_dropped;
    const PropertyResult r = run_decoder_property(property("decoder_grad_agreement"), d, kill_params(100));
    INFO(report(r, d.name));
    REQUIRE(r.status == Status::fail);
    CHECK_THAT(r.message, Catch::Matches(R"([a-z_0-9.]+\[[0-9,]+\]: float32 step .*, float64 oracle .*: error .*x the bound .*; batch: .*)"));
    CHECK_THAT(r.counterexample, Catch::Contains("model V="));  // the case, by its fields
}

TEST_CASE("the backward zoo's mask-ignored and rowsum-dropped kernels fail at decoder level", "[properties][decoder][gradients][zoo]") {
    const RunParams p = kill_params(100);
    const struct {
        const char* kernel;
        const char* property;
    } planted[] = {
        {"bwd_causal_forgotten", "decoder_grad_causality"},  // P recomputed without the mask
        {"bwd_causal_forgotten", "decoder_grad_agreement"},
        {"bwd_d_term_dropped", "decoder_grad_agreement"},    // dS = P dP, without - rowsum(P dP)
    };
    for (const auto& [kernel, name] : planted) {
        const DecoderUnderTest d = decoder_of(kernel);
        REQUIRE(d.backward != nullptr);
        const PropertyResult r = run_decoder_property(property(name), d, p);
        INFO(report(r, d.name));
        CHECK(r.status == Status::fail);
    }
    // Their correct base passes.
    const DecoderUnderTest base = decoder_of("bwd_naive");
    for (const std::string& name : kGradProperties) {
        const PropertyResult r = run_decoder_property(property(name), base, test::ci_params(20));
        INFO(report(r, base.name));
        CHECK(r.status == Status::pass);
    }
}

TEST_CASE("the decoder gradient properties are not applicable without a backward pass, with the reason",
          "[properties][decoder][gradients]") {
    for (const std::string& name : kGradProperties) {
        const DecoderProperty& prop = property(name);
        CHECK(prop.backward);
        CHECK(prop.optimized_only);  // the reference decoder has no training step of its own
        // A version 1 kernel.
        const DecoderUnderTest v1 = decoder_of("optimized");
        CHECK(v1.backward == nullptr);
        CHECK(decoder_not_applicable(prop, v1.declaration, false) == "version 1 of the ABI has no backward pass");
        CHECK(lacks_backward(prop, v1.declaration));
        // A version 2 kernel without one.
        const DecoderUnderTest bare{"optimized[bare]", attncheck_optimized_kernel_v2};
        CHECK(decoder_not_applicable(prop, bare.declaration, true) == kNoBackward);
        CHECK(lacks_backward(prop, bare.declaration));
        // One that declares backward=no: said on its own line, not as "no backward pass".
        const DecoderUnderTest off{"optimized[off]", attncheck_optimized_kernel_v2, KernelDeclaration::parse("backward=no"),
                                   attncheck_optimized_kernel_v2_backward};
        CHECK(off.backward != nullptr);
        CHECK(decoder_not_applicable(prop, off.declaration, true) == "declared backward=no");
        CHECK_FALSE(lacks_backward(prop, off.declaration));
        // With a backward it runs (a library's <symbol>_backward reaches the decoder this way).
        const DecoderUnderTest with{"optimized[with]", attncheck_optimized_kernel_v2, {}, attncheck_optimized_kernel_v2_backward};
        CHECK(decoder_not_applicable(prop, with.declaration, true).empty());
    }
    const DecoderUnderTest racy{"optimized[racy]", attncheck_optimized_kernel_v2,
                                KernelDeclaration::parse("deterministic_backward=no"), attncheck_optimized_kernel_v2_backward};
    CHECK_THAT(decoder_not_applicable(property("decoder_grad_determinism"), racy.declaration, true),
               Catch::Contains("deterministic_backward=no"));
    CHECK(decoder_not_applicable(property("decoder_grad_agreement"), racy.declaration, true).empty());
}

TEST_CASE("the default budget of the decoder gradient properties, and --cases over it", "[properties][decoder][gradients]") {
    const DecoderProperty& prop = property("decoder_grad_agreement");
    REQUIRE(prop.default_cases > 0);
    CHECK(decoder_property_cases(prop, 40, false, false) == prop.default_cases);
    CHECK(decoder_property_cases(prop, 10, false, true) == 10);  // a capped run stays capped
    CHECK(decoder_property_cases(prop, 7, true, false) == 7);    // --cases wins
    CHECK(decoder_property_cases(property("decoder_agreement"), 40, false, false) == 40);
}

TEST_CASE("trainable decoder cases are what the training step takes", "[properties][decoder][gradients]") {
    const rc::Gen<DecoderCase> gen = gen_decoder_case({.min_tokens = 2, .trainable = true}, {}, true);
    for (int i = 0; i < 300; ++i) {
        const DecoderCase c = gen(rc::Random(rc::Random::Key{7, std::uint64_t(i), 0, 0}), i % 101).value();
        INFO(describe(c));
        CHECK_NOTHROW(reference::check_trainable(c.config));
        CHECK(c.config.max_len <= kTrainableMaxLen);
        CHECK(c.tokens_len >= 2);
        const TrainBatch b = train_batch(c, {}, true);
        CHECK(b.sequences.size() >= 1);
        CHECK(b.sequences.size() <= 4);
        double w = 0;
        for (const auto& q : b.sequences) {
            CHECK(q.tokens.size() >= 2);
            CHECK(int(q.tokens.size()) <= c.config.max_len);
            for (const double x : q.weights) w += x;
        }
        CHECK(w > 0);
    }
}

TEST_CASE("compare_with_oracle: per tensor, on the tensor's scale floored at the model's", "[properties][decoder][gradients]") {
    reference::Params oracle;
    oracle.values = {{"a", {1.0, -2.0}}, {"b", {1e-9, 0.0}}};
    oracle.shapes = {{"a", {2}}, {"b", {1, 2}}};
    optimized::Grads grads = {{"a", {1.0f, -2.0f}}, {"b", {0.0f, 0.0f}}};
    // b's error 1e-9 on a scale of 1e-9 would be a ratio of 1; on the floor (kDecoderGradFloor x 2) it is tiny.
    GradComparison r = compare_with_oracle(1.0, grads, 1.0, oracle);
    CHECK(r.ok);
    CHECK(r.worst_ratio == Approx(1e-9 / (kDecoderGradFloor * 2.0)));
    // An error above the bound on a's own scale, named by tensor and element.
    grads["a"][1] = float(-2.0 * (1 + 4 * kDecoderGradBound));
    r = compare_with_oracle(1.0, grads, 1.0, oracle);
    CHECK_FALSE(r.ok);
    CHECK(r.tensor == "a");
    CHECK(r.element == "[1]");
    CHECK_THAT(r.describe("float32 step", "float64 oracle"), Catch::Contains("a[1]: float32 step ") && Catch::Contains("float64 oracle -2:") && Catch::Contains("x the bound"));
    // A non-finite element fails; a missing tensor fails and is named.
    grads["a"][1] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(compare_with_oracle(1.0, grads, 1.0, oracle).ok);
    grads.erase("b");
    r = compare_with_oracle(1.0, grads, 1.0, oracle);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.missing, Catch::Contains("'b'"));
    // The loss is compared too.
    grads = {{"a", {1.0f, -2.0f}}, {"b", {0.0f, 0.0f}}};
    r = compare_with_oracle(1.1, grads, 1.0, oracle);
    CHECK_FALSE(r.ok);
    CHECK(r.tensor == "loss");
}

// The measurement behind kDecoderGradBound: the worst ratio the correct built-in kernels reach
// over many cases (each kernel, each mask), with the floor and without it.
TEST_CASE("bound study: the worst decoder gradient ratio of the correct built-in kernels", "[.][bound_study]") {
    const char* env = std::getenv("ATTNCHECK_STUDY_CASES");
    const int n = env ? std::atoi(env) : 2000;
    // ATTNCHECK_STUDY_TINY=1: only the models where the worst ratios are found (d_model <= 2:
    // a LayerNorm over 2 features, its gain up to 1/sqrt(ln_eps)), n of them.
    const bool tiny = std::getenv("ATTNCHECK_STUDY_TINY") != nullptr;
    for (const std::string kernel : {"optimized_v2", "reference_v2"}) {
        const DecoderUnderTest d = decoder_of(kernel);
        const rc::Gen<DecoderCase> gen = gen_decoder_case({.min_tokens = 2, .trainable = true}, d.declaration, true);
        std::map<std::string, double> worst;       // by mask: the floored ratio of compare_with_oracle
        std::map<std::string, double> unfloored;   // by mask: max error / max |g64| of the tensor, no floor
        std::map<std::string, std::string> where;  // by mask: the tensor and case of the worst
        for (int i = 0, drawn = 0; i < n; ++drawn) {
            const DecoderCase c = gen(rc::Random(rc::Random::Key{2026, std::uint64_t(drawn), 1, 0}), drawn % 101).value();
            if (tiny && c.config.d_model > 2) continue;
            ++i;
            const TrainBatch b = train_batch(c, d.declaration, true);
            const Model model = init_model(c.config, c.model_seed);
            optimized::Grads g;
            const double loss = optimized::train_loss(model, b.sequences, {d.kernel.fn_v2, d.backward}, {.mask = b.mask}, &g);
            reference::Params oracle;
            const double oracle_loss =
                reference::decoder_loss(c.config, reference::Params::from_model(model), b.sequences, {.mask = b.mask}, &oracle);
            const GradComparison r = compare_with_oracle(loss, g, oracle_loss, oracle, std::numeric_limits<double>::infinity());
            const std::string mask = reference::to_string(b.mask);
            if (r.worst_ratio > worst[mask]) {
                worst[mask] = r.worst_ratio;
                where[mask] = r.tensor + r.element + " in " + describe(c);
            }
            for (const auto& [name, want] : oracle.values) {
                double err = 0, scale = 0;
                for (std::size_t e = 0; e < want.size(); ++e) {
                    err = std::max(err, std::abs(double(g[name][e]) - want[e]));
                    scale = std::max(scale, std::abs(want[e]));
                }
                if (scale > 0) unfloored[mask] = std::max(unfloored[mask], err / scale);
            }
        }
        for (const auto& [mask, ratio] : worst)
            std::cout << "bound study: " << kernel << " mask " << mask << ": worst ratio " << ratio << " (without the floor "
                      << unfloored[mask] << ") over " << n << " cases of both masks; at " << where[mask] << "\n";
        for (const auto& [mask, ratio] : worst) CHECK(ratio * 10 <= kDecoderGradBound);
    }
}
