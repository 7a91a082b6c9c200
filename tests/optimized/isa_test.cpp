// Tests of the instruction-set report (attncheck/isa.hpp): it names the path this binary was
// compiled for, and that path is one this CPU can run.
#include "attncheck/isa.hpp"

#include <catch2/catch.hpp>

#include <string>

using attncheck::isa_info;

namespace {
bool has(const std::string& features, const std::string& f) {
    return ("+" + features + "+").find("+" + f + "+") != std::string::npos;
}
}  // namespace

TEST_CASE("isa_info names the compiled path, and this CPU can run it", "[optimized][isa]") {
    const attncheck::IsaInfo i = isa_info();
    INFO(attncheck::isa_line());
#if defined(__AVX512F__)
    CHECK(i.compiled == "avx512f+avx2+fma");
    CHECK(i.kernels == "avx512");
#elif defined(__AVX2__) && defined(__FMA__)
    CHECK(i.compiled == "avx2+fma");
    CHECK(i.kernels == "portable");
#else
    CHECK(i.kernels == "portable");
#endif
    // Every feature the build uses is one the CPU reports (else this test would not be running).
    for (const char* f : {"avx512f", "avx2", "fma"})
        if (has(i.compiled, f)) CHECK(has(i.cpu_features, f));
    CHECK_FALSE(i.cpu_model.empty());
    CHECK(i.cpu_count >= 1);
    const std::string line = attncheck::isa_line();
    CHECK(line.rfind("isa " + i.compiled + " (kernels: " + i.kernels, 0) == 0);
    CHECK(line.find(i.cpu_model) != std::string::npos);
}
