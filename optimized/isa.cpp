// optimized/isa.cpp — the instruction set of the build and of this CPU (see attncheck/isa.hpp).
#include "attncheck/isa.hpp"

#include <unistd.h>

#include <cpuid.h>

#include <cstring>
#include <string>

namespace attncheck {

namespace {

std::string compiled_isa() {
#if defined(__AVX512F__)
    return "avx512f+avx2+fma";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2+fma";
#elif defined(__AVX2__)
    return "avx2";
#elif defined(__AVX__)
    return "avx";
#elif defined(__SSE4_2__)
    return "sse4.2";
#elif defined(__x86_64__)
    return "sse2";
#else
    return "generic";
#endif
}

std::string cpu_brand() {
    unsigned regs[12] = {};
    unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
    if (max_ext < 0x80000004u) return "unknown CPU";
    for (unsigned i = 0; i < 3; ++i)
        __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    char brand[49] = {};
    std::memcpy(brand, regs, 48);
    std::string s(brand);
    const auto first = s.find_first_not_of(' ');
    const auto last = s.find_last_not_of(' ');
    return first == std::string::npos ? "unknown CPU" : s.substr(first, last - first + 1);
}

std::string cpu_features() {
    __builtin_cpu_init();
    std::string s;
    const auto add = [&s](bool has, const char* name) {
        if (!has) return;
        if (!s.empty()) s += "+";
        s += name;
    };
    add(__builtin_cpu_supports("avx512f"), "avx512f");
    add(__builtin_cpu_supports("avx2"), "avx2");
    add(__builtin_cpu_supports("fma"), "fma");
    if (s.empty()) add(__builtin_cpu_supports("sse2"), "sse2");
    return s.empty() ? "none of avx512f/avx2/fma/sse2" : s;
}

}  // namespace

IsaInfo isa_info() {
    IsaInfo info;
    info.compiled = compiled_isa();
#if defined(__AVX512F__)
    info.kernels = "avx512";
#else
    info.kernels = "portable";
#endif
    info.cpu_model = cpu_brand();
    info.cpu_features = cpu_features();
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    info.cpu_count = n > 0 ? int(n) : 0;
    return info;
}

std::string isa_line() { return isa_line(isa_info()); }

std::string isa_line(const IsaInfo& i) {
    return "isa " + i.compiled + " (kernels: " + i.kernels + "; cpu: " + i.cpu_model + ", " +
           i.cpu_features + ", " + std::to_string(i.cpu_count) + " cpus)";
}

}  // namespace attncheck
