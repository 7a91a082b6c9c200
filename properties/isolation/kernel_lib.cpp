// properties/isolation/kernel_lib.cpp — dlopen a kernel library, check its ABI version and its exported
// declaration (see kernel_lib.hpp).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  // dladdr1, RTLD_DL_SYMENT
#endif
#include "properties/isolation/kernel_lib.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <sstream>
#include <vector>

#include "attncheck/declaration.hpp"
#include "attncheck/error.hpp"

namespace attncheck::properties {
namespace {

std::string prefix(const std::string& path) { return "kernel library " + path + ": "; }

// The ELF symbol table entry of an exported symbol (its type tells a variable from a function,
// its size bounds a variable), or null when the loader cannot say.
const ElfW(Sym)* symbol_entry(void* sym) {
    Dl_info info{};
    void* entry = nullptr;
    if (dladdr1(sym, &info, &entry, RTLD_DL_SYMENT) == 0) return nullptr;
    return static_cast<const ElfW(Sym)*>(entry);
}

// The version a library declares through `name` (`<symbol>_abi_version` or
// `attncheck_abi_version`), which may be an int32_t variable or an `int32_t (void)` function; the
// symbol's ELF type tells them apart.
std::int32_t declared_abi_version(void* sym, const std::string& path, const std::string& name) {
    const ElfW(Sym)* entry = symbol_entry(sym);
    const auto type = entry ? ELF64_ST_TYPE(entry->st_info) : STT_NOTYPE;
    if (type == STT_FUNC || type == STT_GNU_IFUNC) {
        auto fn = reinterpret_cast<std::int32_t (*)()>(sym);
        return fn();
    }
    if (entry && type != STT_OBJECT && type != STT_COMMON)
        throw InputError(prefix(path) + name + " is neither an int32_t variable nor a function");
    return *static_cast<const std::int32_t*>(sym);
}

// The declaration a library exports for `symbol` as `<symbol>_declaration`: a NUL-terminated
// `const char[]` variable, or a `const char* (void)` function (the ELF type tells them apart).
// The variable is read only within its ELF size, so a missing NUL cannot run past it.
std::string exported_declaration(void* sym, const std::string& path, const std::string& name) {
    const ElfW(Sym)* entry = symbol_entry(sym);
    const auto type = entry ? ELF64_ST_TYPE(entry->st_info) : STT_NOTYPE;
    constexpr std::size_t kMaxLength = 4096;
    if (type == STT_FUNC || type == STT_GNU_IFUNC) {
        const char* text = reinterpret_cast<const char* (*)()>(sym)();
        if (!text) throw InputError(prefix(path) + name + "() returned a null pointer");
        const std::size_t n = strnlen(text, kMaxLength + 1);
        if (n > kMaxLength) throw InputError(prefix(path) + name + "() returned more than 4096 characters");
        return std::string(text, n);
    }
    if (!entry || (type != STT_OBJECT && type != STT_COMMON))
        throw InputError(prefix(path) + name + " is neither a const char[] variable nor a function");
    const std::size_t size = std::min<std::size_t>(entry->st_size, kMaxLength + 1);
    const char* text = static_cast<const char*>(sym);
    const std::size_t n = strnlen(text, size);
    if (n == size)
        throw InputError(prefix(path) + name + " is not a NUL-terminated string of at most 4096 characters (a " +
                         "const char[] variable; a const char* variable is not read)");
    return std::string(text, n);
}

}  // namespace

LoadedKernel load_kernel_library(const std::string& path, const std::string& symbol) {
    if (path.empty()) throw InputError("kernel library: empty path");
    if (symbol.empty()) throw InputError(prefix(path) + "empty symbol name (--symbol)");
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) throw InputError(prefix(path) + "no such file");
    if (S_ISDIR(st.st_mode)) throw InputError(prefix(path) + "is a directory, not a shared library");

    // dlopen searches the library path for a bare name; "./" pins it to the file we just found.
    const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
    dlerror();
    void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* err = dlerror();
        throw InputError(prefix(path) + "not a loadable shared library: " +
                         (err ? err : "dlopen failed"));
    }

    LoadedKernel lk;
    lk.path = path;
    lk.symbol = symbol;
    lk.handle = handle;

    // The kernel's own `<symbol>_abi_version` first (a library may hold kernels of both
    // versions), then the library-wide `attncheck_abi_version`.
    for (const std::string& version_name : {symbol + "_abi_version", std::string("attncheck_abi_version")}) {
        dlerror();
        void* version_sym = dlsym(handle, version_name.c_str());
        if (!version_sym) continue;
        const std::int32_t v = declared_abi_version(version_sym, path, version_name);
        if (v != ATTNCHECK_ABI_VERSION && v != ATTNCHECK_ABI_VERSION_2) {
            std::ostringstream m;
            m << prefix(path) << "wrong ABI version: " << version_name << " = " << v << ", this suite speaks "
              << ATTNCHECK_ABI_VERSION << " and " << ATTNCHECK_ABI_VERSION_2;
            dlclose(handle);
            throw InputError(m.str());
        }
        lk.declares_abi_version = true;
        lk.abi_version = v;
        break;
    }

    dlerror();
    void* fn = dlsym(handle, symbol.c_str());
    if (!fn) {
        dlclose(handle);
        throw InputError(prefix(path) + "no symbol '" + symbol +
                         "' (is it exported with C linkage, extern \"C\", and not static?)");
    }
    if (lk.abi_version == ATTNCHECK_ABI_VERSION_2) {
        lk.fn_v2 = reinterpret_cast<attncheck_kernel_v2_fn>(fn);
        dlerror();
        lk.backward_v2 = reinterpret_cast<attncheck_kernel_v2_backward_fn>(dlsym(handle, (symbol + "_backward").c_str()));
    } else
        lk.fn = reinterpret_cast<attncheck_kernel_fn>(fn);

    const std::string decl_name = symbol + "_declaration";
    dlerror();
    if (void* decl = dlsym(handle, decl_name.c_str())) {
        lk.declaration = exported_declaration(decl, path, decl_name);
        try {
            (void)KernelDeclaration::parse(lk.declaration);
        } catch (const std::invalid_argument& e) {
            throw InputError(prefix(path) + decl_name + " = \"" + lk.declaration + "\": " + e.what());
        }
    }
    return lk;
}

}  // namespace attncheck::properties
