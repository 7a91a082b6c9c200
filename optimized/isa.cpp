// optimized/isa.cpp — the instruction set of the build and of this CPU (see attncheck/isa.hpp),
// and the run-time choice of the dispatched code path (simd_targets.hpp).
#include "attncheck/isa.hpp"

#include <unistd.h>

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "optimized/simd_targets.hpp"
// simd_targets.hpp first: it sets the targets every Highway translation unit compiles.
#include <hwy/targets.h>

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

// The dispatched paths, best first, with the Highway target each one is.
struct Path {
    const char* name;
    std::int64_t target;
};
constexpr Path kPaths[] = {{"avx512", HWY_AVX3}, {"avx2", HWY_AVX2}, {"scalar", HWY_BASELINE_SCALAR}};

// What this CPU supports (Highway's detection; the scalar path is always there).
std::int64_t supported_targets() {
    static const std::int64_t supported = hwy::SupportedTargets() | HWY_BASELINE_SCALAR;
    return supported;
}

// Highway dispatches to the best compiled target among the supported ones: hide the better
// ones than `target` (a target's bit is smaller the better it is).
void dispatch_to(std::int64_t supported, std::int64_t target) {
    hwy::SetSupportedTargetsForTest(supported & ~(target - 1));
}

// The path of that name, or nullptr.
const Path* find_path(const std::string& name) {
    for (const Path& p : kPaths)
        if (name == p.name) return &p;
    return nullptr;
}

optimized::IsaChoice choose_isa() {
    optimized::IsaChoice c;
    const std::int64_t supported = supported_targets();
    for (const Path& p : kPaths)
        if (supported & p.target) c.available += (c.available.empty() ? "" : ", ") + std::string(p.name);
    c.path = c.available.substr(0, c.available.find(','));  // the best: Highway's own choice
    const char* env = std::getenv("ATTNCHECK_ISA");
    const std::string want = env ? env : "";
    if (want.empty()) return c;
    const Path* asked = find_path(want);
    if (!asked)
        c.error = "ATTNCHECK_ISA=" + want + ": unknown path (one of: avx512, avx2, scalar)";
    else if (!(supported & asked->target))
        c.error = "ATTNCHECK_ISA=" + want + ": this CPU cannot run the " + want + " path (it can run: " +
                  c.available + ")";
    else {
        c.path = asked->name;
        dispatch_to(supported, asked->target);
    }
    return c;
}

}  // namespace

const optimized::IsaChoice& optimized::isa_choice() {
    static const IsaChoice choice = choose_isa();
    return choice;
}

bool optimized::use_isa_path_for_test(const std::string& path) {
    isa_choice();  // the process's own choice first, so that it is not made after this one
    const Path* p = find_path(path);
    if (!p || !(supported_targets() & p->target)) return false;
    dispatch_to(supported_targets(), p->target);
    return true;
}

IsaInfo isa_info() {
    IsaInfo info;
    info.compiled = compiled_isa();
    info.kernels = optimized::isa_choice().path;
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
