// tests/properties/checker_test.cpp — the checker and its reports, checked on kernels whose
// faults we know: a failure is found, shrunk, printed with the element and the replay line,
// replays identically from its seed; "unsupported" is counted and never hides everything.
#include <catch2/catch.hpp>

#include "attncheck/kernels.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/property_runs.hpp"
#include "properties/runner.hpp"

using namespace attncheck;
using namespace attncheck::properties;

namespace {

const KernelProperty& property(const std::string& name) {
    for (const auto& p : kernel_properties())
        if (p.name == name) return p;
    FAIL("no property " << name);
    throw 0;
}

PropertyResult run(const std::string& name, attncheck_kernel_fn fn, RunParams params = {7, 100}) {
    return run_kernel_property(property(name), KernelUnderTest{"k", fn, true}, params);
}

// Correct except that every output element is scaled by (1 + 1e-3): far beyond float32 rounding.
extern "C" int slightly_wrong(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    const int rc = attncheck_reference_kernel(p, q, k, v, out);
    if (rc != 0) return rc;
    const std::size_t n = std::size_t(p->batch) * p->heads * p->q_len * p->value_dim;
    for (std::size_t i = 0; i < n; ++i) out[i] *= 1.001f;
    return 0;
}
extern "C" int refuses_everything(const attncheck_problem*, const float*, const float*, const float*, float*) {
    return ATTNCHECK_UNSUPPORTED;
}
// Correct, but supports only single-row (decode) problems.
extern "C" int decode_only(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->q_len != 1) return ATTNCHECK_UNSUPPORTED;
    return attncheck_reference_kernel(p, q, k, v, out);
}

// Correct, but supports only a single key with head_dim 1.
extern "C" int kv_len_1_only(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->kv_len != 1 || p->head_dim != 1) return ATTNCHECK_UNSUPPORTED;
    return attncheck_reference_kernel(p, q, k, v, out);
}

}  // namespace

TEST_CASE("a wrong kernel fails agreement with a shrunk case, the element and both values", "[checker]") {
    const PropertyResult r = run("agreement", slightly_wrong);
    REQUIRE(r.status == Status::fail);
    CHECK(r.failed_at >= 1);
    INFO(r.counterexample << r.message);
    CHECK(r.message.find("out[") != std::string::npos);
    CHECK(r.message.find("[b,h,i,c]") != std::string::npos);
    CHECK(r.message.find("float64 oracle") != std::string::npos);
    CHECK(r.message.find("bound") != std::string::npos);
    // Shrunk: the counterexample is the smallest shape the generators can make.
    CHECK(r.counterexample.find("B=1 Hq=1") != std::string::npos);
    CHECK(r.counterexample.find("data_seed=") != std::string::npos);
}

TEST_CASE("a failure replays identically from its seed and budget", "[checker]") {
    const RunParams params{123456789, 50};
    const PropertyResult a = run("agreement", slightly_wrong, params), b = run("agreement", slightly_wrong, params);
    REQUIRE(a.status == Status::fail);
    CHECK(a.failed_at == b.failed_at);
    CHECK(a.message == b.message);
    CHECK(a.counterexample == b.counterexample);
    CHECK(replay_command("--kernel k", "agreement", params) ==
          "attncheck fuzz --kernel k --property agreement --seed 123456789 --cases 50");
}

TEST_CASE("too few supported cases is 'not checked', many unsupported ones warn, partial support is counted",
          "[checker]") {
    const PropertyResult none = run("agreement", refuses_everything);
    CHECK(none.status == Status::not_checked);
    CHECK(none.message.find("returned \"unsupported\" for 100 of the 100 cases: 0 supported") != std::string::npos);

    // A few of 100 cases have kv_len 1 and head_dim 1: fewer than 10 checked cases say nothing.
    const PropertyResult few = run("agreement", kv_len_1_only);
    CHECK(few.status == Status::not_checked);
    CHECK(few.cases - few.unsupported < kMinSupportedCases);
    CHECK(few.cases - few.unsupported > 0);

    // A budget below 10 needs every case supported, not 10.
    CHECK(run("agreement", attncheck_reference_kernel, RunParams{7, 3}).status == Status::pass);

    const PropertyResult some = run("agreement", decode_only);
    CHECK(some.status == Status::pass);
    CHECK(some.unsupported > 20);  // decode problems are about a quarter of the cases
    CHECK(some.unsupported < some.cases);
    CHECK(some.warning.find("cases unsupported (more than 20%)") != std::string::npos);
    CHECK(run("agreement", attncheck_reference_kernel).warning.empty());
}

TEST_CASE("the built-in kernels pass the abi_version refusal and a refusing kernel fails nothing else", "[checker]") {
    CHECK(run("abi_version", attncheck_reference_kernel).status == Status::pass);
    // A kernel that refuses everything also refuses an unknown version: that property alone passes.
    CHECK(run("abi_version", refuses_everything).status == Status::pass);
}
