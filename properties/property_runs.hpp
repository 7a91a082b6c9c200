// properties/property_runs.hpp — one property against one subject (a kernel or a decoder) at a
// seed and budget: the generator, the input-spread tags and the exception guard around a check.
// Shared by `attncheck fuzz` (properties/fuzz_run.cpp) and the one-call check_kernel()
// (properties/check.cpp), so that both run exactly the same cases for the same seed.
#pragma once

#include "properties/decoder_properties.hpp"
#include "properties/isolation/isolation.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/runner.hpp"

namespace attncheck::properties {

// Whether a kernel-level (version 1 or 2) or a decoder-level property has this name (after
// canonical_property_name).
bool is_property(const std::string& name);
// The property's name today for a name it had before the two versions' properties shared their
// names (agreement_v2 -> agreement, varlen_equals_separate -> batch, ...); any other name as is.
// --property, ATTNCHECK_PROPERTY and CheckOptions::only accept the old names through it.
std::string canonical_property_name(const std::string& name);
// A property's place in the reports: the kernel properties in their table's order, then the
// decoder properties in theirs, then any other name.
int property_rank(const std::string& name);

// A kernel property over k (either ABI version), its cases generated within what k declares
// (checked(k): a version 1 kernel's declaration limited to what version 1 can pose). channel: in
// a worker process, announces every case before it runs (so a crash names it).
PropertyResult run_kernel_property(const KernelProperty& prop, const KernelUnderTest& k, const RunParams& params,
                                   const Progress& progress = {}, const WorkerChannel* channel = nullptr);
PropertyResult run_decoder_property(const DecoderProperty& prop, const DecoderUnderTest& d, const RunParams& params,
                                    const Progress& progress = {}, const WorkerChannel* channel = nullptr);

}  // namespace attncheck::properties
