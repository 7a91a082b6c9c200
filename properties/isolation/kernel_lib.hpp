// properties/isolation/kernel_lib.hpp — loading a kernel author's attention kernel from a shared library
// (`attncheck fuzz --kernel-lib PATH.so --symbol NAME`).
//
// The library is opened with dlopen(RTLD_NOW | RTLD_LOCAL): RTLD_NOW so that an unresolved
// symbol is an error here, with the loader's message, instead of a crash in the middle of a
// property; RTLD_LOCAL so that two kernel libraries (or a kernel and the suite) exporting the
// same helper names do not bind to each other's code.
//
// ABI version. A library MAY export, with C linkage,
//     const int32_t attncheck_abi_version = ATTNCHECK_ABI_VERSION;   // a variable (preferred)
// or
//     int32_t attncheck_abi_version(void);                            // a function
// (both are recognised: the ELF symbol type says which). When present and not equal to
// ATTNCHECK_ABI_VERSION the library is refused ("wrong ABI version"). When absent, nothing is
// assumed and the per-call abi_version field is the only check.
//
// Refusing an unknown per-call abi_version is checked by the kernel property abi_version
// (properties/kernel_properties.cpp), which runs inside the isolated worker like every other
// case of a loaded kernel. The one-call API for an outside project's own test is
// attncheck/check.hpp.
#pragma once

#include <string>

#include "attncheck/kernel_abi.h"

namespace attncheck::properties {

struct LoadedKernel {
    attncheck_kernel_fn fn = nullptr;
    std::string path, symbol;
    void* handle = nullptr;   // the dlopen handle; never closed (fn must stay valid for the run)
    bool declares_abi_version = false;  // the library exports attncheck_abi_version (and it is 1)
    // The text of `<symbol>_declaration` when the library exports it (attncheck/declaration.hpp),
    // checked to parse; "" when absent.
    std::string declaration;
};

// Opens `path` and looks up `symbol`. Throws attncheck::InputError with a message that names
// the path and the problem:
//   - "kernel library PATH: no such file"
//   - "kernel library PATH: not a loadable shared library: <dlerror text>"
//   - "kernel library PATH: no symbol 'NAME' (exported symbols need C linkage: extern \"C\")"
//   - "kernel library PATH: wrong ABI version: attncheck_abi_version = 2, this suite speaks 1"
//   - "kernel library PATH: NAME_declaration = \"...\": declaration item '...': <what is wrong>"
// A path without a '/' is taken relative to the current directory (not searched for on
// LD_LIBRARY_PATH), so that `--kernel-lib libk.so` means the file the user sees.
LoadedKernel load_kernel_library(const std::string& path, const std::string& symbol);

}  // namespace attncheck::properties
