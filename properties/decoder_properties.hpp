// properties/decoder_properties.hpp — the decoder-level properties (MODEL.md), over the
// reference decoder in float32 and the optimized decoder with any ABI kernel plugged in.
//
// The oracle is reference::Decoder<double>; a float32 candidate agrees with it when every logit
// is within its bound for any correct float32 decoder (reference::DecoderBound, NUMERICS.md v2).
//
// Dimension legend: V = vocab, T = tokens, S = memory rows.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/model.hpp"
#include "kernels/registry.hpp"
#include "optimized/decoder.hpp"
#include "properties/decoder_case.hpp"
#include "properties/verdict.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::properties {

struct DecoderUnderTest {
    DecoderUnderTest() = default;
    // The optimized decoder around a registry kernel, with what its entry declares
    // (attention_kernel_of: reads_only_visible_keys).
    // A version 2 kernel's paged cache takes a block size its declaration allows (none: a dense
    // cache when it declares paged=no).
    // Its backward pass too (the entry's backward_v2, checked unless the declaration says
    // backward=no).
    DecoderUnderTest(std::string name_, const KernelEntry& entry, KernelDeclaration declaration_ = {})
        : name(std::move(name_)), kernel(attention_kernel_of(entry)), declaration(std::move(declaration_)) {
        if (kernel.fn_v2) kernel.block_size = decoder_block_size(declaration, kernel.block_size);
        set_backward(entry.fn_v2 ? entry.backward_v2 : nullptr);
    }
    // A kernel known only by its function (a kernel library, a function linked into a test): it
    // declares nothing to the decoder beyond kernel_abi.h. nullptr: the reference decoder.
    DecoderUnderTest(std::string name_, attncheck_kernel_fn kernel_, KernelDeclaration declaration_ = {})
        : name(std::move(name_)), kernel{.fn = kernel_}, declaration(std::move(declaration_)) {
        set_backward(nullptr);
    }
    // The same for a version 2 kernel, with a paged cache of a block size its declaration allows,
    // and its backward pass when it has one (a kernel library's `<symbol>_backward`).
    DecoderUnderTest(std::string name_, attncheck_kernel_v2_fn kernel_, KernelDeclaration declaration_ = {},
                     attncheck_kernel_v2_backward_fn backward_ = nullptr)
        : name(std::move(name_)), kernel{.fn_v2 = kernel_}, declaration(std::move(declaration_)) {
        kernel.block_size = decoder_block_size(declaration, kDecoderBlockSize);
        set_backward(backward_);
    }

    std::string name;  // "reference" or "optimized[KERNEL]"
    // fn nullptr: reference::Decoder<float>; else optimized::Decoder(model, kernel).
    optimized::AttentionKernel kernel;
    // The kernel's declaration: empty_rows=nan makes the decoder zero such rows after each call
    // (optimized::Decoder::set_zero_empty_rows); deterministic=no turns the bitwise comparisons
    // into comparisons within the bound.
    KernelDeclaration declaration;
    bool optimized() const { return kernel.fn != nullptr || kernel.fn_v2 != nullptr; }

    // The version 2 kernel's backward pass, or null: with kernel.fn_v2 the attention of the
    // training step (optimized/train_step.hpp) that the decoder gradient properties run, when
    // declaration.backward (set here: it has one and does not declare backward=no).
    attncheck_kernel_v2_backward_fn backward = nullptr;
    void set_backward(attncheck_kernel_v2_backward_fn fn) {
        backward = kernel.fn_v2 ? fn : nullptr;
        declaration.set_backward(backward != nullptr);
    }
    // Test only: a bug planted in the training step's own backward (one of
    // optimized::step_grad_bugs(), passed as StepOptions::bug), so that the tests can show which
    // decoder gradient property catches it. Always none in `attncheck fuzz`.
    reference::GradBug step_bug = reference::GradBug::none;

    // The paged cache's block size for a version 2 kernel that declares d: `preferred` when d
    // allows it, else the smallest block size d allows, 0 (a dense cache) when d says paged=no.
    static int decoder_block_size(const KernelDeclaration& d, int preferred);
};

// Why the optimized decoder cannot run around a kernel that declares d (v2: of ABI version 2),
// or "" when it can. Its self-attention is causal, a teacher-forced forward of T tokens makes
// calls of T query rows over T keys (T >= 2 for the properties), and a model's values are as
// wide as its keys; a version 2 kernel's calls are also float32, a padded batch or a
// cross-attention has query rows that are not the last rows of their sequence (positions=
// bottom_right cannot express them), and a dense cache passes kv_lens. Such a kernel has no
// decoder-level run (`attncheck fuzz` and check_kernel say so in a line); otherwise the cases
// are drawn within its declaration (gen_decoder_case), and a property that no such case can
// serve is not applicable (decoder_not_applicable).
std::string decoder_unavailable(const KernelDeclaration& d, bool v2);

// The optimized decoder that the decoder properties run for d (d.optimized()): d's kernel with
// what it declares, empty rows zeroed after each call when its declaration says empty_rows=nan.
optimized::Decoder optimized_decoder_of(const DecoderUnderTest& d, const Model& model);

// Runs a property's body, a kernel's refusal of a call inside the optimized decoder or training
// step (optimized::KernelError) becoming an unsupported case: "kernel refused a call inside
// <where>: ...".
template <class F>
Verdict refusal_unsupported(const char* where, F body) {
    try {
        return body();
    } catch (const optimized::KernelError& e) {
        return Verdict::unsupported(std::string("kernel refused a call inside ") + where + ": " + e.what());
    }
}

struct DecoderProperty {
    std::string name;
    std::string summary;
    DecoderCaseOptions options;
    Verdict (*check)(const DecoderUnderTest& decoder, const DecoderCase& c);
    bool optimized_only = false;  // uses the KV-cache Session / forward_batch API
    bool batches = false;         // runs batches of sequences of different lengths
    // Runs the training step (properties/decoder_gradients.hpp): needs the kernel's backward.
    bool backward = false;
    // The property's own case budget in place of the decoder level's default (no --cases), for
    // a property whose cases cost far less (or more) than the others'; 0: the run's budget.
    int default_cases = 0;
};

// Whether prop is not applicable to a kernel that declares d because the kernel has no backward
// pass (version 1, or none exported; not one that declares backward=no): the reports name such
// properties on one line (kNoBackwardLine), as the kernel-level gradient properties.
inline bool lacks_backward(const DecoderProperty& prop, const KernelDeclaration& d) {
    return prop.backward && !d.backward && d.backward_said != KernelDeclaration::Said::no;
}

// The case budget of prop in a run of `run_cases` per decoder property: run_cases when the run
// set it (--cases, ATTNCHECK_CASES, a worker's budget: `explicit_cases`) or lowered it (`capped`:
// the kernel already failed at kernel level), else prop's default_cases when it has one.
inline int decoder_property_cases(const DecoderProperty& prop, int run_cases, bool explicit_cases, bool capped) {
    return explicit_cases || capped || prop.default_cases <= 0 ? run_cases : prop.default_cases;
}

// Why no case of the property can be within declaration d of a kernel (v2: of ABI version 2),
// as "declared ...: why", or "" when its cases are drawn within d.
std::string decoder_not_applicable(const DecoderProperty& prop, const KernelDeclaration& d, bool v2);

// logits_causality, decoder_agreement, incremental, generation, memory_padding, decoder_batch,
// batch_session, then the training step's: decoder_grad_agreement, decoder_grad_causality,
// decoder_grad_batch, decoder_grad_determinism (properties/decoder_gradients.cpp)
// (names distinct from the kernel properties: one --property flag selects either).
const std::vector<DecoderProperty>& decoder_properties();

}  // namespace attncheck::properties
