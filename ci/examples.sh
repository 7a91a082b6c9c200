#!/usr/bin/env bash
# The kernel authors' path, end to end: install attncheck from the Release build of the test
# stage (build/, ci/build.sh) to a prefix, then build and run the examples against the
# INSTALLED package only:
#   examples/outside-project  find_package(attncheck) + a Catch2 test calling check_kernel()
#   examples/c-kernel         a plain C kernel in a shared library, checked with
#                             `attncheck fuzz --kernel-lib`; plus a kernel that segfaults and
#                             one that loops forever, which must be reported as such (exit 1,
#                             "crashed (SIGSEGV)" / "timed out") without stopping the run.
#   examples/flash-kernel     a kernel in FlashAttention's conventions (bf16, [B,T,H,D], GQA,
#                             paged KV) on kernel ABI version 2, checked as it is with
#                             check_kernel() from its own test and with --kernel-lib
# Usage: ci/examples.sh [--use-installed]
#   --use-installed  skip the install: use the package already at the prefix (for iterating on
#                    the examples; CI runs without it)
# Environment:
#   ATTNCHECK_PREFIX        install prefix (default /tmp/attncheck-prefix; emptied first)
#   ATTNCHECK_EXAMPLES_DIR  the examples' build folders (default out/examples; emptied first)
#   ATTNCHECK_BUILD_DIR     the build that is installed (default build; built by ci/build.sh
#                           when it is not there yet)
#   ATTNCHECK_JOBS          parallel build jobs (default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

use_installed=0
case "${1:-}" in
  "") ;;
  --use-installed) use_installed=1 ;;
  *) echo "usage: ci/examples.sh [--use-installed]" >&2; exit 2 ;;
esac

prefix=$(realpath -m "${ATTNCHECK_PREFIX:-/tmp/attncheck-prefix}")
work=$(realpath -m "${ATTNCHECK_EXAMPLES_DIR:-out/examples}")
install_build=${ATTNCHECK_BUILD_DIR:-build}
rm -rf "$work"
[ "$use_installed" -eq 1 ] || rm -rf "$prefix"
mkdir -p "$work"

build_and_install() {
  # The test stage's build, not a second one: the installed libraries and `attncheck` are the
  # ones the tests ran. The build is brought up to date first (a no-op after ci/build.sh).
  ATTNCHECK_BUILD_DIR=$install_build ci/build.sh
  cmake --install "$install_build" --prefix "$prefix"
}

# build_example DIR [ctest]: configures and builds examples/DIR against the install in $prefix;
# with `ctest`, runs its tests too.
build_example() {
  cmake -S "examples/$1" -B "$work/$1" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
  cmake --build "$work/$1" -j"$(jobs)"
  if [ "${2:-}" = ctest ]; then ctest --test-dir "$work/$1" --output-on-failure; fi
}

outside_project() { build_example outside-project ctest; }
c_kernel_build() { build_example c-kernel; }
flash_kernel_build() { build_example flash-kernel ctest; }

# expect_fuzz WANT_RC PATTERN LIB SYMBOL [FLAGS...]: runs the installed `attncheck fuzz` on a
# kernel library, shows its output, and fails unless it exits WANT_RC and prints PATTERN (grep -E).
expect_fuzz() {
  local want_rc=$1 pattern=$2 lib=$3 symbol=$4 rc=0 log
  shift 4
  log="$work/fuzz-$symbol.log"
  echo "\$ attncheck fuzz --kernel-lib $lib --symbol $symbol $*"
  "$prefix/bin/attncheck" fuzz --kernel-lib "$lib" --symbol "$symbol" "$@" > "$log" 2>&1 || rc=$?
  cat "$log"
  if [ "$rc" -ne "$want_rc" ]; then
    echo "examples: expected exit $want_rc from fuzz of $symbol, got $rc" >&2
    return 1
  fi
  if ! grep -Eq "$pattern" "$log"; then
    echo "examples: fuzz of $symbol did not print /$pattern/" >&2
    return 1
  fi
}

if [ "$use_installed" -eq 1 ]; then
  [ -x "$prefix/bin/attncheck" ] || { echo "examples: no attncheck installed at $prefix" >&2; exit 1; }
else
  stage "examples: install attncheck from $install_build/ to $prefix" build_and_install
fi
stage "examples: outside-project (find_package + check_kernel)" outside_project
stage "examples: c-kernel (build the shared libraries)" c_kernel_build
# At the CI seed, like every randomized stage of CI: a failure there replays exactly.
stage "examples: c-kernel naive_attention passes" \
  expect_fuzz 0 "" "$work/c-kernel/libnaive_kernel.so" naive_attention --seed "$(ci_seed)"
stage "examples: c-kernel crash_attention is reported as a crash" \
  expect_fuzz 1 "crashed \((SIGSEGV|AddressSanitizer: SEGV)" "$work/c-kernel/libcrash_kernel.so" crash_attention
# Every property: after the first timeout the kernel's other properties are skipped, so the
# whole run costs one --timeout.
stage "examples: c-kernel hang_attention is reported as a timeout" \
  expect_fuzz 1 "timed out: a case ran past the limit of [0-9.]+ s per case on case" "$work/c-kernel/libhang_kernel.so" hang_attention \
  --timeout 5
stage "examples: flash-kernel (build; find_package + check_kernel of ABI v2)" flash_kernel_build
stage "examples: flash-kernel flash_attention (ABI v2) passes" \
  expect_fuzz 0 "" "$work/flash-kernel/libflash_style_kernel.so" flash_attention --seed "$(ci_seed)"
# The Python package as installed (python/CMakeLists.txt: <prefix>/lib/python3/dist-packages):
# --attncheck-cases is an option of the plugin, so pytest accepts it only when the installed
# entry point loaded it. The full Python examples run in the test stage (ctest label python).
python_installed() {
  PYTHONPATH="$prefix/lib/python3/dist-packages" "$(gate_python)" -m pytest -q -p no:cacheprovider \
    --attncheck-cases 30 --attncheck-seed "$(ci_seed)" examples/python/test_torch_sdpa.py -k mask_from_the_positions
}
stage "examples: python (the installed package, its pytest plugin, the PyTorch example)" python_installed
echo "examples: all passed"
