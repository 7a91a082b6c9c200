// properties/isolation/kernel_lib.hpp — loading a kernel author's attention kernel from a shared library
// (`attncheck fuzz --kernel-lib PATH.so --symbol NAME`).
//
// The library is opened with dlopen(RTLD_NOW | RTLD_LOCAL): RTLD_NOW so that an unresolved
// symbol is an error here, with the loader's message, instead of a crash in the middle of a
// property; RTLD_LOCAL so that two kernel libraries (or a kernel and the suite) exporting the
// same helper names do not bind to each other's code.
//
// ABI version. A library MAY export, with C linkage, for one kernel or for all of its kernels,
//     const int32_t <symbol>_abi_version = 2;                         // this kernel's version
//     const int32_t attncheck_abi_version = ATTNCHECK_ABI_VERSION;   // the library's version
// each a variable (preferred) or an `int32_t name(void)` function (the ELF symbol type says
// which); the kernel's own name is looked up first. 1 means `symbol` is an attncheck_kernel_fn
// (attncheck/kernel_abi.h), 2 an attncheck_kernel_v2_fn (attncheck/kernel_abi_v2.h); any other
// value is refused ("wrong ABI version"). When neither is exported the kernel is version 1 and
// the per-call abi_version field is the only check.
//
// Refusing an unknown per-call abi_version is checked by the kernel property abi_version
// (properties/kernel_properties.cpp), which runs inside the isolated worker like every other
// case of a loaded kernel. The one-call API for an outside project's own test is
// attncheck/check.hpp.
#pragma once

#include <string>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"

namespace attncheck::properties {

struct LoadedKernel {
    attncheck_kernel_fn fn = nullptr;        // a version 1 kernel
    attncheck_kernel_v2_fn fn_v2 = nullptr;  // a version 2 kernel (exactly one of fn, fn_v2 is set)
    // A version 2 kernel's `<symbol>_backward` (kernel_abi_v2.h, attncheck_grads_v2), when exported.
    attncheck_kernel_v2_backward_fn backward_v2 = nullptr;
    int abi_version = 1;                     // what the library declares (1 when it says nothing)
    std::string path, symbol;
    void* handle = nullptr;   // the dlopen handle; never closed (fn must stay valid for the run)
    bool declares_abi_version = false;  // the library exports <symbol>_abi_version or attncheck_abi_version
    // The text of `<symbol>_declaration` when the library exports it (attncheck/declaration.hpp),
    // checked to parse; "" when absent.
    std::string declaration;
};

// Opens `path` and looks up `symbol`. Throws attncheck::InputError with a message that names
// the path and the problem:
//   - "kernel library PATH: no such file"
//   - "kernel library PATH: not a loadable shared library: <dlerror text>"
//   - "kernel library PATH: no symbol 'NAME' (exported symbols need C linkage: extern \"C\")"
//   - "kernel library PATH: wrong ABI version: attncheck_abi_version = 3, this suite speaks 1 and 2"
//   - "kernel library PATH: NAME_declaration = \"...\": declaration item '...': <what is wrong>"
// A path without a '/' is taken relative to the current directory (not searched for on
// LD_LIBRARY_PATH), so that `--kernel-lib libk.so` means the file the user sees.
LoadedKernel load_kernel_library(const std::string& path, const std::string& symbol);

}  // namespace attncheck::properties
