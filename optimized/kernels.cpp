// optimized/kernels.cpp — the registry of built-in attention kernels (attncheck/kernels.hpp).
//
// `attncheck fuzz` iterates over builtin_kernels() and `--kernel NAME` looks a name up with
// find_builtin_kernel(). To add a kernel: implement an attncheck_kernel_fn (kernel_abi.h),
// declare it in attncheck/kernels.hpp, and append one line below.
#include "attncheck/kernels.hpp"

namespace attncheck {

const std::vector<KernelEntry>& builtin_kernels() {
    static const std::vector<KernelEntry> kernels = {
        {"reference", attncheck_reference_kernel,
         "textbook float32 attention: full score matrix, max-subtracted softmax, P V", ""},
        {"optimized", attncheck_optimized_kernel,
         "fused online-softmax kernel over key tiles, AVX-512, OpenMP, deterministic", ""},
    };
    return kernels;
}

const KernelEntry* find_builtin_kernel(const std::string& name) {
    for (const KernelEntry& e : builtin_kernels())
        if (e.name == name) return &e;
    return nullptr;
}

}  // namespace attncheck
