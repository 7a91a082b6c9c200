// kernels/registry.cpp — the kernel registry (kernels/registry.hpp): the built-in kernels listed
// here, then the mutant zoo's entries (kernels/mutants.cpp).
//
// To add a built-in kernel: implement an attncheck_kernel_fn (kernel_abi.h), declare it in
// attncheck/kernels.hpp, and append one line to kBuiltins below. To add a mutant, see the top of
// kernels/mutants.cpp.
#include "kernels/registry.hpp"

#include "kernels/mutants.hpp"

namespace attncheck {

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
            {"reference", attncheck_reference_kernel,
             "textbook float32 attention: full score matrix, max-subtracted softmax, P V", KernelRole::builtin, "",
             false, ""},
            {"optimized", attncheck_optimized_kernel,
             "fused online-softmax kernel over key tiles, AVX-512, OpenMP, deterministic", KernelRole::builtin, "",
             false, ""},
        };
        for (KernelEntry& e : zoo_entries()) all.push_back(std::move(e));
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
