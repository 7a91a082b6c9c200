// test_flash_style_kernel.cpp — the kernel author's own test: one call checks the FlashAttention-
// convention kernel against every kernel-level property of ABI version 2 (agreement with the
// float64 oracle in bf16, GQA against replicated heads, layouts, paged caches, windows, softcap,
// lse, poisoned padding, ...) and its backward against the gradient properties, within what the
// kernel declares.
#include <catch2/catch.hpp>

#include <attncheck/check.hpp>
#include <attncheck/kernel_abi_v2.h>

extern "C" {
int flash_attention(const attncheck_problem_v2* p);
int flash_attention_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g);
extern const char flash_attention_declaration[];
}

TEST_CASE("flash_attention passes every attncheck property of ABI version 2") {
    attncheck::CheckOptions defaults;
    defaults.declaration = flash_attention_declaration;
    // With its backward: the gradient properties too (dq, dk, dv against the float64 oracle, ...).
    const attncheck::CheckReport report = attncheck::check_kernel(flash_attention, flash_attention_backward, "flash_attention",
                                                                  attncheck::CheckOptions::from_environment(defaults));
    INFO(report.text);  // printed only when the check fails: the table, shrunk case, replay line
    REQUIRE(report.passed);
}
