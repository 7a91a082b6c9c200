// test_tiled_attention.cpp — the outside project's own Catch2 test: one call checks the kernel
// against every attncheck property (agreement with a float64 oracle, exact causality, row sums,
// padding, batch independence, determinism, no stray writes, inputs untouched, and the decoder
// properties with the kernel plugged into attncheck's decoder), with shrinking and replay.
//
// A failure prints the report: the property, the shrunk case, the worst element and the line
// that replays it (ATTNCHECK_SEED=... ATTNCHECK_PROPERTY=... ./tiled_attention_test).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <attncheck/check.hpp>

#include "tiled_attention.h"

TEST_CASE("tiled_attention passes every attncheck property") {
    const attncheck::CheckReport report = attncheck::check_kernel(tiled_attention, "tiled_attention");
    INFO(report.text);  // printed only when the check fails: the table, shrunk case, replay line
    REQUIRE(report.passed);
}

// The same kernel with one classic bug: the caller's scale is ignored. This test shows that the
// check has teeth (and what a failure looks like): it must FAIL the kernel.
extern "C" int tiled_attention_without_scale(const attncheck_problem* p, const float* q,
                                             const float* k, const float* v, float* out) {
    attncheck_problem unscaled = *p;
    unscaled.scale = 1.0f;
    return tiled_attention(&unscaled, q, k, v, out);
}

TEST_CASE("the check catches a kernel that ignores the scale") {
    // Kernel-level properties only, and few cases: a failure is found within a few cases.
    attncheck::CheckOptions options;
    options.cases = 30;
    options.decoder = false;
    const attncheck::CheckReport report =
        attncheck::check_kernel(tiled_attention_without_scale, "tiled_attention_without_scale", options);
    INFO(report.text);
    CHECK_FALSE(report.passed);
    CHECK(std::find(report.failed.begin(), report.failed.end(), "agreement") != report.failed.end());
    CHECK(report.text.find("replay: ATTNCHECK_SEED=") != std::string::npos);
}
