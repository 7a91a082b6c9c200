// tests/zoo/ratio_cases.hpp — test ratios of kernels and decoders on the suite's own random
// cases, outside RapidCheck's runner: what correct_kernels_test and bench/bound_campaign measure.
//
// Case number `index` of a run with seed `seed` is drawn from the suite's generators
// (properties/kernel_case.hpp's gen_kernel_case on the problems ABI version 1 can pose, as the
// kernels measured are of version 1; decoder_case.hpp's gen_decoder_case; default options: every
// style, offset mode, padding and the large tier) with a RapidCheck random stream
// keyed by (seed, index) and the size index % 101, so a case is the same on any thread count
// and replays alone: `attncheck_bound_campaign --seed S --first I --cases 1`.
//
// The test ratio of a candidate is max over its elements of |candidate - oracle| / bound
// (tolerance.hpp's check_against_bound), the bound being the oracle's (reference/attention_v2.hpp)
// or DecoderBound's: at most 1 for any correct float32 evaluation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/tolerance.hpp"
#include "properties/decoder_case.hpp"
#include "properties/kernel_case.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::zoo {

properties::KernelCase draw_kernel_case(std::uint64_t seed, std::uint64_t index);
properties::DecoderCase draw_decoder_case(std::uint64_t seed, std::uint64_t index);
// A case of the gradient properties (every version 2 feature a backward call takes: no pages,
// at most their 144 keys), drawn the same way.
properties::KernelCase draw_backward_case(std::uint64_t seed, std::uint64_t index);

// A kernel case with its inputs and the float64 oracle with its bound, computed once and shared
// by every kernel checked on it.
struct BoundedKernelCase {
    properties::KernelCase c;
    properties::KernelInputs in;
    reference::OracleV2 oracle;
    explicit BoundedKernelCase(const properties::KernelCase& kc);
};

// The kernel's agreement with the oracle; `refused` when it returned nonzero (no ratio then).
struct KernelRatio {
    bool refused = false;
    Agreement agreement;
};
KernelRatio kernel_ratio(attncheck_kernel_fn fn, const BoundedKernelCase& bc);

// The teacher-forced logits of a decoder case: the float64 oracle and DecoderBound's bound, and
// the decoders under test (reference::Decoder<float>, optimized::Decoder with each kernel).
struct DecoderRatios {
    std::string describe;           // the case
    Agreement reference_float;      // reference::Decoder<float>
    std::vector<Agreement> kernel;  // optimized::Decoder with kernels[i]; ok and ratio 0 if refused
    std::vector<bool> refused;
};
DecoderRatios decoder_ratios(const properties::DecoderCase& c, const std::vector<attncheck_kernel_fn>& kernels);

}  // namespace attncheck::zoo
