// properties/property_runs.cpp — run_kernel_property() and run_decoder_property(): a property's
// generator, the input-spread tags and the exception guard around its check.
#include "properties/property_runs.hpp"

#include <exception>
#include <string>

#include <rapidcheck.h>

#include "attncheck/problem_v2.hpp"

namespace attncheck::properties {

std::string canonical_property_name(const std::string& name) {
    static const std::pair<const char*, const char*> renamed[] = {
        {"agreement_v2", "agreement"},       {"causality_v2", "causality"},
        {"empty_rows_v2", "empty_rows"},     {"no_oob_write_v2", "no_oob_write"},
        {"inputs_unchanged_v2", "inputs_unchanged"}, {"abi_version_v2", "abi_version"},
        {"refuses_undeclared_v2", "refuses_undeclared"}, {"varlen_equals_separate", "batch"}};
    for (const auto& [old_name, now] : renamed)
        if (name == old_name) return now;
    return name;
}

bool is_property(const std::string& given) {
    const std::string name = canonical_property_name(given);
    for (const auto& p : kernel_properties())
        if (p.name == name) return true;
    for (const auto& p : decoder_properties())
        if (p.name == name) return true;
    return false;
}

int property_rank(const std::string& name) {
    int rank = 0;
    for (const auto& p : kernel_properties()) {
        if (p.name == name) return rank;
        ++rank;
    }
    for (const auto& p : decoder_properties()) {
        if (p.name == name) return rank;
        ++rank;
    }
    return rank;
}

namespace {

// A check that throws fails its case, with the exception's message.
template <class Check>
Verdict exception_is_failure(Check check) {
    try {
        return check();
    } catch (const std::exception& e) {
        return Verdict::fail(std::string("exception: ") + e.what());
    }
}

}  // namespace

PropertyResult run_kernel_property(const KernelProperty& prop, const KernelUnderTest& given, const RunParams& params,
                                      const Progress& progress, const WorkerChannel* channel) {
    const KernelUnderTest k = checked(given);
    const rc::Gen<KernelCase> gen = gen_kernel_case(prop.options, k.declaration);
    PropertyResult result = run_property(
        prop.name,
        [&](const CaseInfo& at) {
            const KernelCase c = *gen.as("case");
            if (channel) channel->announce_case(prop.name, std::uint64_t(at.number), params.seed, "", describe(c), at.shrink_step);
            RC_TAG(std::string("dtype ") + dtype_name(c.dtype));
            RC_TAG(std::string("layout ") + to_string(c.layout.kind));
            RC_TAG(std::string("style ") + to_string(c.style));
            RC_TAG(std::string("mode ") + to_string(c.mode));
            RC_CLASSIFY(c.kv_heads < c.q_heads, "gqa");
            RC_CLASSIFY(c.window_left >= 0 || c.window_right >= 0, "window");
            RC_CLASSIFY(c.softcap > 0, "softcap");
            RC_CLASSIFY(!c.alibi_slopes.empty(), "alibi");
            RC_CLASSIFY(c.want_lse, "lse");
            RC_CLASSIFY(!c.causal, "not causal");
            RC_CLASSIFY(c.max_kv_len() > 64 || c.head_dim > 32, "large shapes");
            return exception_is_failure([&] { return prop.check(k, c); });
        },
        params, progress);
    if (const std::string u = untried(prop, k.declaration); !u.empty())
        result.warning = result.warning.empty() ? u : result.warning + "; " + u;
    return result;
}

PropertyResult run_decoder_property(const DecoderProperty& prop, const DecoderUnderTest& d, const RunParams& params,
                                    const Progress& progress, const WorkerChannel* channel) {
    const rc::Gen<DecoderCase> gen = gen_decoder_case(prop.options, d.declaration, d.kernel.fn_v2 != nullptr);
    return run_property(
        prop.name,
        [&](const CaseInfo& at) {
            const DecoderCase c = *gen.as("case");
            if (channel) channel->announce_case(prop.name, std::uint64_t(at.number), params.seed, "", describe(c), at.shrink_step);
            RC_TAG(std::string("norm ") + to_string(c.config.norm));
            RC_CLASSIFY(c.config.cross_attention, "cross-attention");
            RC_CLASSIFY(c.tokens_len == 1, "T 1");
            RC_CLASSIFY(c.config.n_heads > 1, "heads > 1");
            RC_CLASSIFY(c.config.d_model >= 64, "large model");
            return exception_is_failure([&] { return prop.check(d, c); });
        },
        params, progress);
}

}  // namespace attncheck::properties
