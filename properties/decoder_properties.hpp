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

namespace attncheck::properties {

struct DecoderUnderTest {
    DecoderUnderTest() = default;
    // The optimized decoder around a registry kernel, with what its entry declares
    // (attention_kernel_of: reads_only_visible_keys).
    DecoderUnderTest(std::string name_, const KernelEntry& entry, KernelDeclaration declaration_ = {})
        : name(std::move(name_)), kernel(attention_kernel_of(entry)), declaration(std::move(declaration_)) {}
    // A kernel known only by its function (a kernel library, a function linked into a test): it
    // declares nothing to the decoder beyond kernel_abi.h. nullptr: the reference decoder.
    DecoderUnderTest(std::string name_, attncheck_kernel_fn kernel_, KernelDeclaration declaration_ = {})
        : name(std::move(name_)), kernel{.fn = kernel_}, declaration(std::move(declaration_)) {}

    std::string name;  // "reference" or "optimized[KERNEL]"
    // fn nullptr: reference::Decoder<float>; else optimized::Decoder(model, kernel).
    optimized::AttentionKernel kernel;
    // The kernel's declaration: empty_rows=nan makes the decoder zero such rows after each call
    // (optimized::Decoder::set_zero_empty_rows); deterministic=no turns the bitwise comparisons
    // into comparisons within the bound.
    KernelDeclaration declaration;
    bool optimized() const { return kernel.fn != nullptr; }
};

// The optimized decoder that the decoder properties run for d (d.optimized()): d's kernel with
// what it declares, empty rows zeroed after each call when its declaration says empty_rows=nan.
optimized::Decoder optimized_decoder_of(const DecoderUnderTest& d, const Model& model);

struct DecoderProperty {
    std::string name;
    std::string summary;
    DecoderCaseOptions options;
    Verdict (*check)(const DecoderUnderTest& decoder, const DecoderCase& c);
    bool optimized_only = false;  // uses the KV-cache Session / forward_batch API
};

// logits_causality, decoder_agreement, incremental, generation, memory_padding, decoder_batch,
// batch_session
// (names distinct from the kernel properties: one --property flag selects either).
const std::vector<DecoderProperty>& decoder_properties();

}  // namespace attncheck::properties
