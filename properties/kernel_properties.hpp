// properties/kernel_properties.hpp — the kernel-level properties, over any kernel of either ABI
// version (a version 1 kernel is posed the version 2 problems version 1 can express, through
// attncheck/abi_v1.hpp).
//
// Each property is a name, one line saying which bug it catches, the options its cases need
// (gen_kernel_case builds such cases, it never filters) and a check of one case. Most are
// metamorphic: the same logical problem posed another way (another layout, GQA as MHA, another
// block permutation or cache capacity, one call per sequence, a prefill split into chunks and
// decode steps) must give the same answer, within the sum of the two calls' oracle bounds (a
// correct kernel may take another code path for another layout), and bitwise where the two
// calls do the same arithmetic (poison in elements no row reads, for a deterministic kernel).
// Others read the probabilities through chosen values (all ones -> row sums, identity -> the
// rows themselves) or pose what a kernel must refuse.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq(b) / Tk(b), Dk, Dv.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "properties/kernel_case.hpp"
#include "properties/verdict.hpp"

namespace attncheck::properties {

struct KernelUnderTest {
    KernelUnderTest() = default;
    KernelUnderTest(std::string name_, attncheck_kernel_fn fn_, bool bitwise_batch_, KernelDeclaration declaration_ = {})
        : name(std::move(name_)), fn(fn_), bitwise_batch(bitwise_batch_), declaration(std::move(declaration_)) {}

    std::string name;
    attncheck_kernel_fn fn = nullptr;
    // A version 2 kernel (attncheck/kernel_abi_v2.h) has fn_v2 instead of fn. Both are checked by
    // the same properties on version 2 problems; a version 1 kernel through v1_call()
    // (attncheck/abi_v1.hpp), on the problems version 1 can pose.
    attncheck_kernel_v2_fn fn_v2 = nullptr;
    // The version 2 kernel's backward pass (kernel_abi_v2.h, attncheck_grads_v2), or null. It is
    // checked by the gradient properties (properties/gradients.cpp) when declaration.backward.
    attncheck_kernel_v2_backward_fn backward = nullptr;
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
    if (!k.backward) k.declaration.backward = false;
    return k;
}
// A version 2 kernel with its backward pass (or none): the declaration says whether it is checked.
inline void set_backward(KernelUnderTest& k, attncheck_kernel_v2_backward_fn fn) {
    k.backward = k.fn_v2 ? fn : nullptr;
    k.declaration.set_backward(k.backward != nullptr);
}

struct KernelProperty {
    std::string name;
    std::string summary;
    CaseOptions options;
    Verdict (*check)(const KernelUnderTest& kernel, const KernelCase& c);
};

// The kernel properties, in the order of the report; one --property flag selects a property for
// kernels of both versions. The names differ from every decoder property's.
// no_oob_read faults on an over-read: run it in the isolated worker.
const std::vector<KernelProperty>& kernel_properties();

// Why `prop` cannot run within what a kernel declares, e.g. "declared varlen=no" ("" when it
// can): its cases need a feature the declaration excludes. Such a property is not run (the run
// says "not applicable"): a kernel that honestly declares less is not reported "not checked".
std::string not_applicable(const KernelProperty& prop, const KernelDeclaration& declaration);
// Whether prop needs what version 1 of the ABI lacks: not applicable to every version 1 kernel,
// whatever it declares. The reports name such properties on one line (kAbiV1LacksLine +
// abi_v1_lacks()) rather than one line each.
bool needs_abi_v2(const KernelProperty& prop);
// The names of the properties needs_abi_v2() holds for, among those `keep` accepts, comma-separated.
std::string abi_v1_lacks(const std::function<bool(const std::string&)>& keep);
inline constexpr const char* kAbiV1LacksLine = "not applicable (version 1 of the ABI lacks what they need): ";
// The gradient properties, which need the kernel's backward pass. A kernel without one has them
// named on one line too (kNoBackwardLine).
bool needs_backward(const KernelProperty& prop);
inline constexpr const char* kNoBackward = "no backward pass: the kernel has no backward entry point";
inline constexpr const char* kNoBackwardLine = "not applicable (no backward pass): ";

// What `prop` leaves untried because of what a kernel declares ("" when nothing), e.g. NaN in
// padding under padding_values=finite. run_kernel_property reports it as the run's warning.
std::string untried(const KernelProperty& prop, const KernelDeclaration& declaration);

}  // namespace attncheck::properties
