#!/usr/bin/env bash
# The code paths and instruction sets the test stage does not exercise, so that CI on one
# machine guards all of them:
#   1. every other path of the run-time dispatch this CPU can run (optimized/simd_targets.hpp:
#      avx512, avx2, scalar; the test stage ran the best one): the whole ctest suite on build/
#      again with ATTNCHECK_ISA forcing it;
#   2. a build for -march=znver3 (AVX2 + FMA, what g++ 12 picks on AMD Zen 3, the class of most
#      hosted CI runners) with warnings as errors, compiled and not run: g++ gives some
#      warnings only for some -march targets (g++ 12's false -Wstringop-overflow at znver3).
# Usage: ci/other_isa.sh [extra ctest arguments]
# Environment: ATTNCHECK_BUILD_DIR (default build, already built), ATTNCHECK_OTHER_ISA_BUILD_DIR
# (default build-other-isa), as ci/build.sh otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

build=${ATTNCHECK_BUILD_DIR:-build}
dir=${ATTNCHECK_OTHER_ISA_BUILD_DIR:-build-other-isa}
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
best=$("$build/cli/attncheck" --version | sed -n 's/.*(kernels: \([a-z0-9]*\);.*/\1/p')
echo "== other_isa.sh: this CPU: $cpu; the test stage ran the $best path"
ran=0
for path in avx512 avx2 scalar; do
  [ "$path" = "$best" ] && continue
  if ! ATTNCHECK_ISA=$path "$build/cli/attncheck" --version >/dev/null 2>&1; then
    echo "other_isa.sh: this CPU cannot run the $path path: skipped"
    continue
  fi
  echo "== other_isa.sh: the whole suite on the $path path (ATTNCHECK_ISA=$path)"
  ATTNCHECK_ISA=$path "$build/cli/attncheck" --version
  ATTNCHECK_ISA=$path ATTNCHECK_BUILD_DIR=$build ATTNCHECK_JUNIT=out/test/junit-isa-$path.xml \
    ci/test.sh "$@"
  ran=$((ran + 1))
done
echo "== other_isa.sh: building for -march=znver3 with warnings as errors (not run)"
ATTNCHECK_WERROR=ON ATTNCHECK_BUILD_DIR=$dir ci/build.sh -DATTNCHECK_MARCH=znver3 -DATTNCHECK_BUILD_BENCH=OFF
echo "other_isa.sh: $ran other path(s) tested; the znver3 build is clean"
