// tests/zoo/ratio_cases.cpp — the suite's random kernel and decoder cases drawn by (seed, index),
// and the test ratios of kernels and decoders on them (ratio_cases.hpp).
#include "tests/zoo/ratio_cases.hpp"

#include <mutex>
#include <optional>

#include <rapidcheck.h>

#include "attncheck/abi_v1.hpp"
#include "optimized/decoder.hpp"
#include "properties/kernel_properties.hpp"
#include "reference/decoder.hpp"

namespace attncheck::zoo {
namespace {

// RapidCheck's sizes run 0..100; case i of a run gets size i % 101 so that a slice of any length
// spreads over small and full-size shapes the way a property run does.
constexpr std::uint64_t kSizes = 101;

rc::Random stream_for(std::uint64_t seed, std::uint64_t index, std::uint64_t kind) {
    return rc::Random(rc::Random::Key{seed, index, kind, 0x6174746e636b6e63ull});  // "attnckcn"
}

// RapidCheck's generators keep their context (gen::exec's handler) in process-wide stacks, not
// per thread: two threads drawing at once corrupt each other. Drawing is cheap next to the
// oracle, so draws take turns.
std::mutex g_draw;

}  // namespace

properties::KernelCase draw_kernel_case(std::uint64_t seed, std::uint64_t index) {
    static const rc::Gen<properties::KernelCase> gen =
        properties::gen_kernel_case({}, properties::checked_declaration({}, /*v2=*/false));
    const std::lock_guard<std::mutex> lock(g_draw);
    return gen(stream_for(seed, index, 1), int(index % kSizes)).value();
}

properties::KernelCase draw_backward_case(std::uint64_t seed, std::uint64_t index) {
    static const rc::Gen<properties::KernelCase> gen = properties::gen_kernel_case({.backward = true, .max_kv = 144}, {});
    const std::lock_guard<std::mutex> lock(g_draw);
    return gen(stream_for(seed, index, 3), int(index % kSizes)).value();
}

properties::DecoderCase draw_decoder_case(std::uint64_t seed, std::uint64_t index) {
    static const rc::Gen<properties::DecoderCase> gen = properties::gen_decoder_case();
    const std::lock_guard<std::mutex> lock(g_draw);
    return gen(stream_for(seed, index, 2), int(index % kSizes)).value();
}

BoundedKernelCase::BoundedKernelCase(const properties::KernelCase& kc)
    : c(kc), in(properties::fill_inputs(kc)), oracle(reference::attention_v2_oracle(properties::build_case(c, in).problem)) {}

KernelRatio kernel_ratio(attncheck_kernel_fn fn, const BoundedKernelCase& bc) {
    KernelRatio r;
    properties::Built b = properties::build_case(bc.c, bc.in);
    if (v1_call(fn, b.problem) != ATTNCHECK_OK) {
        r.refused = true;
        return r;
    }
    r.agreement = check_against_bound(b.out_logical(), bc.oracle.out, bc.oracle.out_bound);
    return r;
}

DecoderRatios decoder_ratios(const properties::DecoderCase& c, const std::vector<attncheck_kernel_fn>& kernels) {
    DecoderRatios r;
    r.describe = properties::describe(c);
    const Model model = init_model(c.config, c.model_seed);
    const std::vector<int> tokens = c.tokens();
    const std::optional<Memory> mem = c.memory();
    const auto exact = reference::Decoder<double>(model).forward(tokens, mem);  // [T, V]
    const std::vector<double> oracle(exact.begin(), exact.end());
    const std::vector<double> bound = reference::DecoderBound(model).forward(tokens, mem).bound;
    const auto f32 = reference::Decoder<float>(model).forward(tokens, mem);
    r.reference_float = check_against_bound(std::vector<float>(f32.begin(), f32.end()), oracle, bound);
    for (const attncheck_kernel_fn fn : kernels) {
        try {
            // Teacher-forced only: one call per layer whatever the kernel declares, so it
            // declares nothing.
            const optimized::Decoder d(model, {.fn = fn});
            r.kernel.push_back(check_against_bound(d.forward(tokens, mem), oracle, bound));
            r.refused.push_back(false);
        } catch (const optimized::KernelError&) {
            r.kernel.push_back(Agreement{});
            r.refused.push_back(true);
        }
    }
    return r;
}

}  // namespace attncheck::zoo
