#!/usr/bin/env bash
# The sanitizer job: builds with AddressSanitizer + UndefinedBehaviorSanitizer in build-sanitize/
# (no benchmarks), runs every ctest test once (and the tests of the dispatched code, label isa,
# again on every other path of the run-time dispatch this CPU has) and a short `attncheck fuzz`,
# and fails on any sanitizer report, including one inside a test that expected a nonzero exit (a
# CLI error-path test that wants exit code 2 would otherwise hide a heap overflow behind its own
# failure): every report is also written to out/sanitize/*.log and their presence fails the job.
#
# Usage: ci/sanitize.sh [extra ctest arguments]
# Environment: ATTNCHECK_SANITIZE_BUILD_DIR (default build-sanitize), ATTNCHECK_FUZZ_CASES
#   (cases of `attncheck fuzz`, default 10: the sanitized ctest above it runs every property
#   already; this run covers the command's own code), ATTNCHECK_CI_CASES (properties budget,
#   default 10: sanitized code runs 2-5x slower, and the textbook reference decoder's
#   incremental and generation properties, which re-run a whole forward per token, far more;
#   a memory error shows on most shapes, and 10 cases of each property on each kernel are
#   thousands of shapes), ATTNCHECK_SANITIZE_ISA_CASES (the avx2 path's isa tests, default 10).
# The scalar path's isa tests run in Release only (ci/other_isa.sh): its loops have no vector
# tails, and on the 2-vCPU Zen 5 VM the stage did not fit its budget with them.
#
# Not run sanitized, each run in the test stage, where what it checks can fail:
# - the `attncheck bench` tests whose subject is the verdict's arithmetic (the sign test's reach,
#   --min-frac-peak, spread-512's scores, a decode verdict's divisor) and the gate's reading of
#   its JSON, and the two that time a built-in version 2 kernel (against a version 1 baseline;
#   its backward pass). They time the same code paths as the bench tests that do run here (a
#   built-in kernel, a library kernel against a baseline on decode, the checks and refusals of
#   version 2 kernels and of backward passes), and each costs 25-75 s under the sanitizers;
# - the check of the campaign examples (campaign:validate_examples: YAML files, and a dozen shard
#   runs whose code the campaign tests of cli_tests run here);
# - the correct outside-style kernels' bound campaign over 2000 generated problems (a question of
#   numerics; the same kernels pass every property at the fixed slice here, sanitized).
# They were 200 s of the stage's CPU time; a change to a widely included header compiles a third
# of the sanitized tree again (about 300 s on 2 cores), and the stage has to hold both.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

dir=${ATTNCHECK_SANITIZE_BUILD_DIR:-build-sanitize}
logs=$(realpath -m out/sanitize)
rm -rf "$logs"; mkdir -p "$logs"

# RelWithDebInfo at -O1 -g1: optimised enough for the properties to finish, with line numbers in
# reports (-g1: line tables only, what a sanitizer's stack trace prints). The default -O2 -g
# made this build the longest step of CI: 30 of the 42 minutes of this job on a 2-vCPU AMD EPYC
# (Zen 3); one test file compiled in 20.7 s at -O2 -g, 17.7 s at -O2 -g1, 10.4 s at -O1 -g1.
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DATTNCHECK_SANITIZE=ON -DATTNCHECK_PYTHON=OFF \
      -DATTNCHECK_BUILD_BENCH=OFF $(werror_flag) $(launcher_flags)
cmake --build "$dir" -j"$(jobs)"

# halt_on_error: the first report ends the process; log_path: reports also land in files
# (one per process, suffixed with the pid) that this script checks at the end.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:log_path=$logs/asan:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan"
export ATTNCHECK_CI_CASES=${ATTNCHECK_CI_CASES:-10}
[ -n "${RC_PARAMS:-}" ] || export RC_PARAMS="seed=$(ci_seed) max_success=$ATTNCHECK_CI_CASES"

rc=0
not_sanitized='cli_tests:bench: (a comparison too short to judge|--min-frac-peak fails|spread-512|a decode shape.s verdict divides|a version 2 kernel, in the dtype)|cli_tests:bench --backward: the backward pass checked, then timed|cli:bench_json_in_perf_gate|campaign:validate_examples|zoo_correct_kernels_test:correct kernels stay within the bound on 2000'
ctest --test-dir "$dir" --output-on-failure -j"$(jobs)" -E "$not_sanitized" \
      --output-junit "$logs/junit.xml" "$@" || rc=$?
# The dispatched code's other paths (optimized/simd_targets.hpp) under the sanitizers too: its
# tests (ctest label isa: GEMM, the attention kernels, exp, the optimized decoder) on each one
# this CPU has besides the best. Everything else is the same code on every path: once is enough.
best=$("$dir/cli/attncheck" --version | sed -n 's/.*(kernels: \([a-z0-9]*\);.*/\1/p')
for path in avx512 avx2; do
  [ "$path" = "$best" ] && continue
  ATTNCHECK_ISA=$path "$dir/cli/attncheck" --version >/dev/null 2>&1 || continue
  echo "== the isa tests on the $path path (sanitized, ${ATTNCHECK_SANITIZE_ISA_CASES:-10} cases per property)"
  ATTNCHECK_ISA=$path RC_PARAMS="seed=$(ci_seed) max_success=${ATTNCHECK_SANITIZE_ISA_CASES:-10}" \
    ctest --test-dir "$dir" --output-on-failure -j"$(jobs)" -L isa || rc=$?
done
echo "== attncheck fuzz --cases ${ATTNCHECK_FUZZ_CASES:-10} --seed $(ci_seed) (sanitized)"
"$dir/cli/attncheck" fuzz --cases "${ATTNCHECK_FUZZ_CASES:-10}" --seed "$(ci_seed)" || rc=$?

reports=$(find "$logs" -name 'asan*' -o -name 'ubsan*' | sort)
if [ -n "$reports" ]; then
  for r in $reports; do echo "---- $r"; head -n 60 "$r"; done
  echo "sanitize.sh: $(echo "$reports" | wc -l) sanitizer report(s)" >&2
  rc=1
fi
exit "$rc"
