// kernels/registry.cpp — the kernel registry (kernels/registry.hpp): the built-in kernels listed
// here, then the mutant zoo's entries (kernels/mutants.cpp, version 1; kernels/zoo_v2.cpp, version 2).
//
// To add a built-in kernel: implement an attncheck_kernel_fn (kernel_abi.h), declare it in
// attncheck/kernels.hpp, and append one line to kBuiltins below. To add a mutant, see the top of
// kernels/mutants.cpp.
#include "kernels/registry.hpp"

#include "kernels/mutants.hpp"
#include "kernels/zoo_backward.hpp"
#include "kernels/zoo_v2.hpp"
#include "reference/attention_v2.hpp"

namespace attncheck {

optimized::AttentionKernel attention_kernel_of(const KernelEntry& entry) {
    if (entry.fn_v2) return {.fn_v2 = entry.fn_v2, .block_size = kDecoderBlockSize};
    return {.fn = entry.fn, .reads_only_visible_keys = entry.reads_only_visible_keys};
}

const char* to_string(KernelRole role) {
    switch (role) {
        case KernelRole::builtin: return "builtin";
        case KernelRole::zoo_base: return "zoo_base";
        case KernelRole::mutant: return "mutant";
    }
    return "?";
}

const std::vector<KernelEntry>& kernel_registry() {
    static const std::vector<KernelEntry> registry = [] {
        std::vector<KernelEntry> all = {
            // reference_v2 behind version 1 of the ABI (reference/reference_kernel.cpp): reads
            // every key and value row of a sequence's head once, as float64, whatever the mask hides.
            {.name = "reference",
             .fn = attncheck_reference_kernel,
             .description = "the float64 oracle rounded to float32 (reference_v2 behind ABI v1)",
             .role = KernelRole::builtin,
             .declaration = "",
             .bug = "",
             .reads_only_visible_keys = false},
            // Never loads a key or value row at or past min(kv_valid_len, q_offset + q_len): key
            // tiles past the causal diagonal or in the padding are skipped, the last one packed
            // only up to that row (optimized/attention_kernel.cpp).
            {.name = "optimized",
             .fn = attncheck_optimized_kernel,
             .description = "fused online-softmax kernel, key tiles, SIMD chosen at run time, OpenMP, deterministic",
             .role = KernelRole::builtin,
             .declaration = "",
             .bug = "",
             .reads_only_visible_keys = true},
            // Version 2 (attncheck/kernel_abi_v2.h): the float64 oracle's values rounded to the
            // problem's dtype (reference/attention_v2.cpp); reads only visible keys. Its backward:
            // the float64 gradient oracle rounded (reference/attention_grad.cpp).
            {.name = "reference_v2",
             .fn = nullptr,
             .description = "ABI v2: the float64 oracle rounded to the dtype (every v2 feature)",
             .role = KernelRole::builtin,
             .declaration = "sinks=yes",
             .bug = "",
             .reads_only_visible_keys = false,
             .fn_v2 = attncheck_reference_kernel_v2,
             .backward_v2 = attncheck_reference_kernel_v2_backward},
            // Reads only keys some row of its query block sees; a problem version 1 expresses
            // is handed to `optimized` (optimized/attention_v2.cpp). Its backward: FlashAttention-2's
            // on 64 x 64 blocks, deterministic (optimized/attention_backward.cpp).
            {.name = "optimized_v2",
             .fn = nullptr,
             .description = "ABI v2: fused online-softmax kernel, GQA without copies, paged, OpenMP, deterministic",
             .role = KernelRole::builtin,
             .declaration = "sinks=yes",
             .bug = "",
             .reads_only_visible_keys = false,
             .fn_v2 = attncheck_optimized_kernel_v2,
             .backward_v2 = attncheck_optimized_kernel_v2_backward},
        };
        for (KernelEntry& e : zoo_entries()) all.push_back(std::move(e));
        for (KernelEntry& e : zoo_v2_entries()) all.push_back(std::move(e));
        for (KernelEntry& e : zoo_backward_entries()) all.push_back(std::move(e));
        return all;
    }();
    return registry;
}

const KernelEntry* find_kernel(const std::string& name, std::optional<KernelRole> role) {
    for (const KernelEntry& e : kernel_registry())
        if (e.name == name && (!role || e.role == *role)) return &e;
    return nullptr;
}

std::vector<const KernelEntry*> kernels_of(KernelRole role) {
    std::vector<const KernelEntry*> out;
    for (const KernelEntry& e : kernel_registry())
        if (e.role == role) out.push_back(&e);
    return out;
}

}  // namespace attncheck
