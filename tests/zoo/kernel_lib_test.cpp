// tests/zoo/kernel_lib_test.cpp — loading a kernel from a shared library: the happy path, and a
// clear InputError for each way it goes wrong, and the refusal of an unknown abi_version.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "attncheck/error.hpp"
#include "properties/isolation/kernel_lib.hpp"
#include "kernels/registry.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/property_runs.hpp"
#include "zoo_check.hpp"

using namespace attncheck::properties;
using Catch::Matchers::Contains;

TEST_CASE("a library without a declared version loads, and its kernel computes attention") {
    const LoadedKernel lk = load_kernel_library(ZOO_LIB_NOVERSION, "zoo_naive_kernel");
    REQUIRE(lk.fn != nullptr);
    CHECK(lk.handle != nullptr);
    CHECK(lk.path == ZOO_LIB_NOVERSION);
    CHECK(lk.symbol == "zoo_naive_kernel");
    CHECK_FALSE(lk.declares_abi_version);
    for (const zoo_test::Problem& pr : zoo_test::witness_problems()) {
        const zoo_test::Verdict v = zoo_test::check_once(lk.fn, zoo_test::make_inputs(pr, 5));
        INFO(pr.name << ": " << v.why);
        CHECK_FALSE(v.flagged);
    }
}

TEST_CASE("attncheck_abi_version = 1, as a variable or as a function, is accepted") {
    CHECK(load_kernel_library(ZOO_LIB_ABI_VAR1, "zoo_naive_kernel").declares_abi_version);
    CHECK(load_kernel_library(ZOO_LIB_ABI_FN1, "zoo_naive_kernel").declares_abi_version);
}

TEST_CASE("a kernel's declaration is read from <symbol>_declaration, a variable or a function") {
    CHECK(load_kernel_library(ZOO_LIB_NOVERSION, "zoo_naive_kernel").declaration.empty());
    CHECK(load_kernel_library(ZOO_LIB_ABI_VAR1, "zoo_naive_kernel").declaration == "head_dim=1..512; deterministic=yes");
    CHECK(load_kernel_library(ZOO_LIB_ABI_FN1, "zoo_naive_kernel").declaration == "head_dim=1..512; max_kv_len=100000");
    CHECK_THROWS_WITH(load_kernel_library(ZOO_LIB_ABI_FN1, "zoo_sloppy_kernel"),
                      Contains("zoo_sloppy_kernel_declaration = \"head_dim=zero\": declaration item 'head_dim=zero'"));
}

TEST_CASE("a wrong declared ABI version is refused, as a variable or as a function") {
    CHECK_THROWS_WITH(load_kernel_library(ZOO_LIB_ABI_VAR3, "zoo_naive_kernel"),
                      Contains("wrong ABI version: attncheck_abi_version = 3, this suite speaks 1 and 2"));
    CHECK_THROWS_WITH(load_kernel_library(ZOO_LIB_ABI_FN3, "zoo_naive_kernel"),
                      Contains("wrong ABI version: attncheck_abi_version = 3"));
    CHECK_THROWS_AS(load_kernel_library(ZOO_LIB_ABI_VAR3, "zoo_naive_kernel"), attncheck::InputError);
}

TEST_CASE("<symbol>_abi_version = 2 loads a version 2 kernel, and takes precedence over the library's version") {
    for (const char* lib : {ZOO_LIB_NOVERSION, ZOO_LIB_ABI_VAR1, ZOO_LIB_ABI_FN1}) {
        INFO(lib);
        const LoadedKernel v2 = load_kernel_library(lib, "zoo_v2_stub");
        CHECK(v2.abi_version == 2);
        CHECK(v2.fn_v2 != nullptr);
        CHECK(v2.fn == nullptr);
        CHECK(v2.declares_abi_version);
        const LoadedKernel v1 = load_kernel_library(lib, "zoo_naive_kernel");
        CHECK(v1.abi_version == 1);
        CHECK(v1.fn != nullptr);
        CHECK(v1.fn_v2 == nullptr);
    }
}

TEST_CASE("a missing file, a directory, a non-library and a missing symbol are clear InputErrors") {
    CHECK_THROWS_WITH(load_kernel_library("/nonexistent/libk.so", "k"),
                      Contains("kernel library /nonexistent/libk.so: no such file"));
    CHECK_THROWS_WITH(load_kernel_library("/tmp", "k"), Contains("is a directory"));

    const std::string text = std::string(ZOO_BINARY_DIR) + "/not_a_library.so";
    std::ofstream(text) << "this is a text file, not an ELF shared object\n";
    CHECK_THROWS_WITH(load_kernel_library(text, "k"), Contains("not a loadable shared library: "));
    CHECK_THROWS_AS(load_kernel_library(text, "k"), attncheck::InputError);

    CHECK_THROWS_WITH(load_kernel_library(ZOO_LIB_NOVERSION, "no_such_kernel"),
                      Contains("no symbol 'no_such_kernel'"));
    CHECK_THROWS_WITH(load_kernel_library(ZOO_LIB_NOVERSION, ""), Contains("empty symbol name"));
    CHECK_THROWS_AS(load_kernel_library("", "k"), attncheck::InputError);
}

// Refusing an unknown per-call abi_version is the kernel property abi_version, the path
// `attncheck fuzz --kernel-lib` runs (inside its worker) on every loaded kernel.
TEST_CASE("abi_version: a loaded kernel that refuses an unknown version passes, one that accepts it fails") {
    const auto abi_version = [](attncheck_kernel_fn fn) {
        for (const KernelProperty& prop : kernel_properties())
            if (prop.name == "abi_version") return run_kernel_property(prop, KernelUnderTest{"k", fn, false}, {1, 20});
        FAIL("no property abi_version");
        return PropertyResult{};
    };
    const LoadedKernel lk = load_kernel_library(ZOO_LIB_NOVERSION, "zoo_naive_kernel");
    const PropertyResult good = abi_version(lk.fn);
    INFO(good.message);
    CHECK(good.status == Status::pass);

    const LoadedKernel sloppy = load_kernel_library(ZOO_LIB_NOVERSION, "zoo_sloppy_kernel");
    const PropertyResult bad = abi_version(sloppy.fn);
    CHECK(bad.status == Status::fail);
    CHECK_THAT(bad.message, Contains("accepted abi_version 2 (in its version 1 problem) (returned 0)"));

    CHECK(abi_version(attncheck::find_kernel("zoo_base")->fn).status == Status::pass);
}
