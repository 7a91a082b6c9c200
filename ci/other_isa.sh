#!/usr/bin/env bash
# The instruction set this machine's own build does not use, so that CI on one machine guards
# both paths of the code (the hand-vectorized AVX-512 path and the portable one) and the
# warnings g++ gives only for some -march targets (g++ 12 reports false -Wstringop-overflow at
# -march=znver3, which a build at -march=native on an AVX-512 CPU never shows):
#   CPU with AVX-512  build for znver3 (AVX2 + FMA, what g++ 12 picks on AMD Zen 3, the class of
#                     most hosted CI runners) and run the whole ctest suite on it;
#   CPU without it    build for x86-64-v4 (AVX-512) with warnings as errors; it cannot run here.
# Usage: ci/other_isa.sh [extra ctest arguments]
# Environment: ATTNCHECK_OTHER_ISA_BUILD_DIR (default build-other-isa), as ci/build.sh otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

dir=${ATTNCHECK_OTHER_ISA_BUILD_DIR:-build-other-isa}
if grep -qw avx512f /proc/cpuinfo; then
  march=znver3 run_tests=1
else
  march=x86-64-v4 run_tests=0
fi
echo "== other_isa.sh: building for -march=$march (this CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
ATTNCHECK_BUILD_DIR=$dir ci/build.sh -DATTNCHECK_MARCH="$march" -DATTNCHECK_BUILD_BENCH=OFF
if [ "$run_tests" -eq 1 ]; then
  "$dir/cli/attncheck" --version
  ATTNCHECK_BUILD_DIR=$dir ATTNCHECK_JUNIT=out/test/junit-other-isa.xml ci/test.sh "$@"
else
  echo "other_isa.sh: this CPU cannot run -march=$march code: built with warnings as errors, not run"
fi
