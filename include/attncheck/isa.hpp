// include/attncheck/isa.hpp — which instruction set the code runs, and on which CPU.
//
// Every figure and every verdict depends on the code path: the optimized GEMM and attention
// kernel have an AVX-512, an AVX2 and a scalar path, chosen at run time for this CPU (or forced
// with ATTNCHECK_ISA=avx512|avx2|scalar). The AVX-512 and AVX2 paths give the same bits; the
// scalar path (std::exp) agrees with them within the NUMERICS bound, not bitwise. So the bench's output and
// JSON context, `attncheck --version` and the failure reports of `attncheck fuzz` name the path
// (e.g. "isa avx2+fma"), and the performance gate fingerprints the machine with the CPU fields.
#pragma once

#include <string>

namespace attncheck {

struct IsaInfo {
    // What the compiled code may use (the -march target of the build): "avx512f+avx2+fma",
    // "avx2+fma", "sse2", ...
    std::string compiled;
    // The path the optimized GEMM and attention kernel run in this process: "avx512", "avx2"
    // or "scalar" (plain C++ with std::fma and std::exp), chosen at run time.
    std::string kernels;
    // This CPU, read at run time: its brand string and what it supports of the above.
    std::string cpu_model;
    std::string cpu_features;
    int cpu_count = 0;  // online logical CPUs
};

IsaInfo isa_info();

// One line: "isa avx2+fma (kernels: portable; cpu: AMD EPYC 7763 64-Core Processor,
// avx2+fma, 2 cpus)".
std::string isa_line(const IsaInfo& info);
std::string isa_line();  // isa_line(isa_info())

}  // namespace attncheck
