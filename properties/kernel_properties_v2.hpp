// properties/kernel_properties_v2.hpp — the kernel-level properties of ABI version 2, over a
// KernelUnderTest's fn_v2 (attncheck/kernel_abi_v2.h).
//
// Each property is a name, one line saying which bug it catches, the options its cases need
// (gen_kernel_case_v2 builds such cases, it never filters) and a check of one case. Most are
// metamorphic: the same logical problem posed another way (another layout, GQA as MHA, another
// block permutation or cache capacity, one call per sequence, a prefill split into chunks and
// decode steps) must give the same answer, within the sum of the two calls' oracle bounds (a
// correct kernel may take another code path for another layout), and bitwise where the two
// calls do the same arithmetic (poison in elements no row reads, for a deterministic kernel).
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq(b) / Tk(b), Dk, Dv.
#pragma once

#include <string>
#include <vector>

#include "properties/kernel_case_v2.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/verdict.hpp"

namespace attncheck::properties {

struct KernelPropertyV2 {
    std::string name;
    std::string summary;
    CaseOptionsV2 options;
    Verdict (*check)(const KernelUnderTest& kernel, const KernelCaseV2& c);
};

// The version 2 kernel properties, in the order of the report. Where a version 1 property checks
// the same thing it has the same name (agreement, causality, row_sums, probabilities, empty_rows,
// batch, determinism, no_oob_write, inputs_unchanged, abi_version, refuses_undeclared): one
// --property flag selects it for kernels of both versions, and the report has one row for it.
// The names differ from every decoder property's.
// no_oob_read faults on an over-read: run it in the isolated worker.
const std::vector<KernelPropertyV2>& kernel_properties_v2();

// Why `prop` cannot run within what a kernel declares, e.g. "declared varlen=no" ("" when it
// can): its cases need a feature the declaration excludes. Such a property is not run (the run
// says "not applicable"): a kernel that honestly declares less is not reported "not checked".
std::string not_applicable(const KernelPropertyV2& prop, const KernelDeclaration& declaration);
// How not_applicable() begins when the ABI of a version 1 kernel lacks the feature.
inline constexpr const char* kAbiV1Lacks = "version 1 of the ABI has no";

// What `prop` leaves untried because of what a kernel declares ("" when nothing), e.g. NaN in
// padding under padding_values=finite. run_kernel_property_v2 reports it as the run's warning.
std::string untried(const KernelPropertyV2& prop, const KernelDeclaration& declaration);

}  // namespace attncheck::properties
