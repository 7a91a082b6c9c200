// properties/kernel_properties.hpp — the kernel-level properties, over any attncheck_kernel_fn.
//
// Each property is a name, one line saying which bug it catches, the options its cases need
// (the generator builds such cases, it never filters), and a check of one case. The checks
// treat the kernel as a black box through the ABI (KERNEL_ABI.md): probabilities are read
// through chosen values (all ones -> row sums, identity -> the rows themselves).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/tolerance.hpp"
#include "properties/kernel_case.hpp"
#include "properties/verdict.hpp"

namespace attncheck::properties {

struct KernelUnderTest {
    KernelUnderTest() = default;
    KernelUnderTest(std::string name_, attncheck_kernel_fn fn_, bool bitwise_batch_, KernelDeclaration declaration_ = {})
        : name(std::move(name_)), fn(fn_), bitwise_batch(bitwise_batch_), declaration(std::move(declaration_)) {}

    std::string name;
    attncheck_kernel_fn fn = nullptr;
    // A version 2 kernel (attncheck/kernel_abi_v2.h) has fn_v2 instead of fn, and is checked by
    // the version 2 properties (properties/kernel_properties_v2.hpp).
    attncheck_kernel_v2_fn fn_v2 = nullptr;
    // A sequence inside a batch must give bitwise the same result as alone. True for the
    // built-ins (they split work by (b, h) only); an outside kernel may block differently per
    // batch size, so for it agreement within tolerance is required and a difference is noted.
    bool bitwise_batch = false;
    // What the kernel declares (attncheck/declaration.hpp): the cases are generated within it,
    // empty rows are read by its convention, bitwise repeatability is demanded only of a kernel
    // that declares itself deterministic (the default).
    KernelDeclaration declaration;
};

// The declaration a kernel is checked under: its own, limited for a version 1 kernel to what
// version 1 can pose (KernelDeclaration::limit_to_abi_v1(); idempotent).
inline KernelDeclaration checked_declaration(KernelDeclaration d, bool v2) {
    if (!v2) d.limit_to_abi_v1();
    return d;
}
inline KernelUnderTest checked(KernelUnderTest k) {
    k.declaration = checked_declaration(std::move(k.declaration), k.fn_v2 != nullptr);
    return k;
}

struct KernelProperty {
    std::string name;
    std::string summary;
    CaseOptions options;
    Verdict (*check)(const KernelUnderTest& kernel, const KernelCase& c);
};

// agreement, causality, row_sums, probabilities, empty_rows, padding, batch, determinism,
// no_oob_write, inputs_unchanged, abi_version, refuses_undeclared — in that order.
const std::vector<KernelProperty>& kernel_properties();

// Why `prop` cannot run within what a kernel declares, e.g. "declared mask=none" ("" when it
// can): its cases need something the declaration excludes (padding, a causal mask, a batch of
// two). Such a property is not run (the run says "not applicable"), as for version 2
// (kernel_properties_v2.hpp): a kernel that honestly declares less is not reported "not checked".
std::string not_applicable(const KernelProperty& prop, const KernelDeclaration& declaration);

}  // namespace attncheck::properties
