// optimized/simd_targets.hpp — which instruction sets the hot code is compiled for, and the one
// place that picks among them at run time.
//
// The GEMM (gemm.cpp), the fused attention kernels (attention_kernel.cpp, attention_v2.cpp, with
// attention_tile.hpp) and the FMA calibration (perf/calibration.cpp) are compiled once per target by Google Highway's foreach_target.h and
// called through HWY_DYNAMIC_DISPATCH, so one build runs the best path of whatever x86-64 CPU it
// lands on. Every file that includes a Highway header includes this one first: all of them must
// compile the same set of targets.
//
//   avx512  Highway's HWY_AVX3 (AVX-512 F/VL/DQ/BW): the hand-written AVX-512 kernels
//   avx2    HWY_AVX2 (AVX2 + FMA): the same algorithms in Highway vectors of 8 floats
//   scalar  Highway's baseline scalar target (HWY_SCALAR with g++ 12, else HWY_EMU128): plain C++
//           with std::fma and std::exp (any x86-64 CPU)
//
// SSSE3 and SSE4 are not compiled (a CPU without AVX2 runs `scalar`), and neither are the AVX-512
// variants beyond HWY_AVX3 (they would add compile time, not speed, to this code). All targets
// are compiled whatever -march the build uses (HWY_COMPILE_ALL_ATTAINABLE), so that every path
// can be forced and tested on a machine that has it. (The scalar target is compiled with the
// build's own -march: x86-64-v3 by default, so that it too auto-vectorizes for AVX2; a build for
// plain x86-64, -DATTNCHECK_MARCH=x86-64, runs it on CPUs without AVX2.)
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#ifndef HWY_COMPILE_ALL_ATTAINABLE
#define HWY_COMPILE_ALL_ATTAINABLE
#endif

#include <string>

namespace attncheck::optimized {

// The path the dispatched code runs in this process, chosen on first use and then fixed:
// ATTNCHECK_ISA=avx512|avx2|scalar when set (an error when this CPU lacks it), else the best
// path this CPU supports. `error` is empty unless ATTNCHECK_ISA asked for something impossible;
// the code then runs the best path, and the command line refuses to start (cli/main.cpp).
struct IsaChoice {
    std::string path;          // "avx512", "avx2" or "scalar"
    std::string available;     // the paths this CPU can run, best first: "avx512, avx2, scalar"
    std::string error;
};
const IsaChoice& isa_choice();

// For tests that compare paths in one process: makes the dispatched code run `path` from now on
// (isa_choice() still reports the process's choice; switch back with isa_choice().path). False,
// changing nothing, when this CPU cannot run it. Not thread-safe against running kernels.
bool use_isa_path_for_test(const std::string& path);

}  // namespace attncheck::optimized
