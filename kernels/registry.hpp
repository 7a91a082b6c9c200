// kernels/registry.hpp — every attention kernel attncheck knows by name: the built-in kernels,
// the mutant zoo's correct base kernels and its mutants, in one registry with one lookup.
//
// The names are stable: they appear in reports and on the command line (`attncheck fuzz
// --kernel NAME`). Every kernel follows attncheck/kernel_abi.h (a mutant except for its one bug).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/kernels.hpp"
#include "optimized/decoder.hpp"

namespace attncheck {

enum class KernelRole {
    builtin,   // the kernels attncheck ships (reference, optimized): `attncheck fuzz` runs them
    zoo_base,  // a correct kernel the mutants derive from: must pass every property
    mutant,    // a zoo base with one deliberate bug: some property must fail it
};
const char* to_string(KernelRole role);

struct KernelEntry {
    std::string name;
    attncheck_kernel_fn fn;
    std::string description;
    KernelRole role;
    // What the kernel declares (attncheck/declaration.hpp); "": every problem, empty rows 0,
    // deterministic.
    std::string declaration;
    // True for a kernel that writes outside its outputs (out; a v2 kernel's out and lse): call it
    // only with guard elements after them (or in an isolated worker).
    bool writes_out_of_bounds = false;
    std::string bug;  // a mutant's one bug, in one line; "" for a correct kernel
    // True for a kernel that promises optimized::AttentionKernel::reads_only_visible_keys: it
    // never reads a key or value row past the last one visible to the call's last query row, so
    // the optimized decoder may pass it a layer's whole cache in one call. A promise about the
    // code, not the results: a kernel that computes the right answer but touches every key row
    // (masking scores afterwards) does not make it.
    bool reads_only_visible_keys = false;
    // A version 2 kernel (attncheck/kernel_abi_v2.h): fn is null and this is its entry point.
    attncheck_kernel_v2_fn fn_v2 = nullptr;
    // True for a kernel that may read outside its inputs (k, v, block_table) on some problems:
    // call it only with the inputs against guard pages, or in an isolated worker.
    bool reads_out_of_bounds = false;
    // The kernel's backward pass (kernel_abi_v2.h, attncheck_grads_v2), or null when it has none.
    attncheck_kernel_v2_backward_fn backward_v2 = nullptr;
    // A backward zoo entry (kernels/zoo_backward.cpp): its forward is a built-in, checked as such,
    // and its bug (if any) is in the backward, so the mutant run gives it the gradient properties only.
    bool backward_only = false;
};

// The kernel as the optimized decoder takes it: the entry's function with what the entry
// declares. Every optimized decoder around a registry kernel is built from this. A version 2
// kernel runs the decoder with a paged cache of kDecoderBlockSize-row blocks: small, so that
// the short sequences of the decoder properties span several blocks.
inline constexpr int kDecoderBlockSize = 4;
optimized::AttentionKernel attention_kernel_of(const KernelEntry& entry);

// Every kernel: the built-ins, the zoo's bases, the mutants (each group in a fixed order).
const std::vector<KernelEntry>& kernel_registry();
// The kernel of that name (of that role, when given); nullptr when there is none.
const KernelEntry* find_kernel(const std::string& name, std::optional<KernelRole> role = std::nullopt);
// The kernels of one role, in registry order.
std::vector<const KernelEntry*> kernels_of(KernelRole role);

}  // namespace attncheck
