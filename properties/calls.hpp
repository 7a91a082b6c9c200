// properties/calls.hpp — how the kernel properties call a kernel and compare what it returns;
// shared by the files of the properties, not part of the installed API.
//
// Every kernel call goes through call_case(): the case is built afresh (build_case: poison in every
// element outside the logical problem, out and lse prefilled with a "never written" NaN between
// guards), the kernel runs, and the result is read back in the oracle's logical order (b, h, i, c).
// A kernel that declares empty_rows=nan has its empty rows checked to be NaN and then read as 0,
// so every other property holds it to the rest of out.
#pragma once

#include <string>
#include <vector>

#include "properties/kernel_case.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/verdict.hpp"
#include "reference/attention_v2.hpp"

namespace attncheck::properties {

struct Call {
    int rc = 0;
    Built built;
    std::vector<float> out;  // logical [rows, Dv]
    std::vector<float> lse;  // logical [rows], empty without lse
    std::string convention_violation;
};

// The kernel on p: a version 2 kernel directly, a version 1 kernel through v1_call()
// (attncheck/abi_v1.hpp: ATTNCHECK_UNSUPPORTED, without a call, when version 1 cannot pose p).
int invoke(const KernelUnderTest& kernel, const attncheck_problem_v2& p);

Call call_case(const KernelUnderTest& kernel, const KernelCase& c, const KernelInputs& in,
               const BuildOptions& options = {});

// A case's inputs and the kernel's call on them: how most properties begin.
struct First {
    KernelInputs in;
    Call call;
};
First first_call(const KernelUnderTest& kernel, const KernelCase& c, const BuildOptions& options = {});

// A dense or paged layout has one Tq for every sequence: the shortest, when the case had several.
void one_q_len(KernelCase& c);
std::string fmt(double x);
// Rows (logical order) with no visible key.
std::vector<char> empty_rows_of(const KernelCase& c);
Verdict unsupported(int rc);

// The second call of a metamorphic pair was refused. Outside the declaration (another layout for
// a layout=contiguous kernel, a padded cache for padding=no) that is the kernel's right and
// there is nothing to compare: "" (the caller goes on). Within it, a refusal of the same logical
// problem posed another way is a failure.
std::string refused_within_declaration(const KernelUnderTest& kernel, const Call& r, const std::string& how);
// The same for a call that posed `posed` and returned rc (the backward's calls, gradients.cpp).
std::string refused_within_declaration(const KernelUnderTest& kernel, const attncheck_problem_v2& posed, int rc,
                                       const std::string& how);

// The oracle of the case's logical problem, with what the kernel declares about its arithmetic.
reference::OracleV2 oracle_of(const KernelUnderTest& kernel, const KernelCase& c, const KernelInputs& in);
// What a declaration tells the oracles (forward and gradient) of the kernel's arithmetic.
reference::OracleV2Options oracle_options(const KernelDeclaration& d);

// out against the oracle, every element within its bound.
Verdict agree_out(const std::string& what, const Call& r, const reference::OracleV2& o);
// lse against the oracle: an empty row's lse is exactly -inf, the others within their bound.
Verdict agree_lse(const std::string& what, const Call& r, const reference::OracleV2& o);

// How far two results x (the candidate) and y (the same problem posed otherwise, `how_y`) are
// apart, for a failure message: "the difference 0.2 is 3.1x <what the bound is> 0.06", or, when
// one of them is NaN or infinite, which one.
std::string difference_text(double x, double y, double oracle, const std::string& how_y, double bound,
                            const std::string& bound_is);

// Two results of the same logical problem: every element within the sum of both calls' bounds;
// a bitwise difference within them is a note.
Verdict same_within(const std::string& what, const Call& a, const reference::OracleV2& oa, const Call& b,
                    const reference::OracleV2& ob, const std::string& how_b);

// Bitwise the same out (and lse) for a deterministic kernel; within the bound of each otherwise.
Verdict same_bits(const std::string& what, const KernelUnderTest& kernel, const Call& a, const Call& b,
                  const reference::OracleV2& o, const std::string& how_b);

// The properties that read the probabilities through chosen values (probabilities_v2.cpp).
Verdict row_sums(const KernelUnderTest& kernel, const KernelCase& c);
Verdict probabilities(const KernelUnderTest& kernel, const KernelCase& c);
Verdict softcap_bound(const KernelUnderTest& kernel, const KernelCase& c);
// What a kernel must refuse (refusals.cpp).
Verdict abi_version(const KernelUnderTest& kernel, const KernelCase& c);
Verdict refuses_undeclared(const KernelUnderTest& kernel, const KernelCase& c);
Verdict refuses_malformed(const KernelUnderTest& kernel, const KernelCase& c);

}  // namespace attncheck::properties
