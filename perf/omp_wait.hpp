// perf/omp_wait.hpp — how idle OpenMP workers wait while something is timed.
//
// A decode step opens ~31 parallel regions of a few hundred microseconds each: a worker that has
// gone to sleep (the passive policy) costs a futex wake-up per region, and spinning forever
// (libgomp's default, 300000 spins per wait and then more) wrecks every timing as soon as
// anything else runs on the same cores. A short spin (GOMP_SPINCOUNT=10000, then sleep) is the
// compromise, measured on a quiet 2-vCPU machine in one run: decode step at ctx 1024, 0.62 of the
// bandwidth bound passive, 0.91 with the short spin; prefill T=512 on 2 threads, 0.66 of the FMA
// peak passive, 0.75 with the short spin. libgomp reads its environment once, at load time, so
// a program that times anything re-executes itself with the setting.
#pragma once

namespace attncheck::perf {

// Re-executes this program (/proc/self/exe, same argv) with GOMP_SPINCOUNT=10000 unless the
// caller set OMP_WAIT_POLICY or GOMP_SPINCOUNT; returns only when it did not (a failed exec is
// reported on stderr under `who`, and the program goes on with the default waiting).
void reexec_with_short_spin(char** argv, const char* who);

}  // namespace attncheck::perf
