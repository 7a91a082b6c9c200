// properties/kernel_lib.hpp — loading a kernel author's attention kernel from a shared library
// (`attncheck fuzz --kernel-lib PATH.so --symbol NAME`, issue 6).
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
// The refusal probe (probe_abi_refusal) calls the kernel once with abi_version = 2 on a 1x1x1x1
// problem. The ABI says a kernel refuses a version it does not know, so accepting it is a FAILURE
// (not a warning): such a kernel would silently misread a future attncheck_problem layout. The
// probe calls untrusted code, so a driver should run it where the other cases of that kernel run
// (inside the isolated worker, properties/isolation.hpp), and report it as its own property
// ("refuses an unknown abi_version").
//
// ---- PROPOSAL to the properties engineer: the one-call API for an outside project ----------
// The installed package (cmake/install.cmake) and examples/outside-project use this; please
// implement it with these names, or tell the zoo engineer what you changed. The header is
// include/attncheck/check.hpp (installed; it includes only kernel_abi.h and the standard
// library, so an outside test needs no xtensor/rapidcheck headers):
//
//   namespace attncheck::properties {
//   struct CheckOptions {
//       std::uint64_t seed = 0;          // 0: the suite's default seed (printed in the report)
//       int cases = 100;                 // per property
//       bool decoder = true;             // also the decoder-level properties, kernel plugged in
//       std::vector<std::string> only;   // property names to run; empty: all
//       // ATTNCHECK_SEED, ATTNCHECK_CASES, ATTNCHECK_PROPERTY (comma list) override the above,
//       // so a failure's replay line for a linked kernel reads
//       //   "replay: ATTNCHECK_SEED=S ATTNCHECK_CASES=N ATTNCHECK_PROPERTY=P <your test binary>"
//       static CheckOptions from_environment(CheckOptions defaults = {});
//   };
//   struct CheckReport {
//       bool passed = false;             // every property passed (unsupported cases allowed,
//                                        // a property with every case unsupported fails)
//       std::string text;                // the property table, then for each failure: property,
//                                        // shrunk case, worst element, bound, replay line
//       std::vector<std::string> failed; // names of the failed properties
//   };
//   CheckReport check_kernel(attncheck_kernel_fn fn, const std::string& name,
//                            const CheckOptions& options = CheckOptions::from_environment());
//   }
// Runs in process (no isolation: we do not own the caller's main()). Used as
//   auto r = attncheck::properties::check_kernel(my_kernel, "my_kernel");
//   INFO(r.text); REQUIRE(r.passed);
// ---------------------------------------------------------------------------------------------
//
// For the properties engineer: kernel_lib.cpp must be listed in properties/CMakeLists.txt and
// ${CMAKE_DL_LIBS} linked (target_link_libraries(attncheck_properties PUBLIC ${CMAKE_DL_LIBS})).
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

struct AbiProbe {
    bool refused = false;   // the kernel returned nonzero for abi_version = 2 (correct)
    std::string message;    // "" when refused; else what went wrong, for the report
};

// Calls fn once with abi_version = ATTNCHECK_ABI_VERSION + 1 on a tiny problem (all sizes 1,
// guarded buffers, so a kernel that computes anyway cannot corrupt memory).
AbiProbe probe_abi_refusal(attncheck_kernel_fn fn);

}  // namespace attncheck::properties
