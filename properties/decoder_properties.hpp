// properties/decoder_properties.hpp — the decoder-level properties (MODEL.md), over the
// reference decoder in float32 and the optimized decoder with any ABI kernel plugged in.
//
// The oracle is reference::Decoder<double>, the baseline reference::Decoder<float>; a float32
// candidate agrees with the oracle by NUMERICS.md's check_agreement.
//
// Dimension legend: V = vocab, T = tokens, S = memory rows.
#pragma once

#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "properties/decoder_case.hpp"
#include "properties/verdict.hpp"

namespace attncheck::properties {

struct DecoderUnderTest {
    std::string name;                   // "reference" or "optimized[KERNEL]"
    attncheck_kernel_fn kernel = nullptr;  // nullptr: reference::Decoder<float>; else optimized::Decoder(kernel)
    bool optimized() const { return kernel != nullptr; }
};

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
