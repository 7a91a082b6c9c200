#!/usr/bin/env bash
# Builds the libFuzzer harnesses of libfuzzer/ with clang (ASan + UBSan) and runs each for a bounded
# time over its committed corpus (libfuzzer/corpus/<target>/). Any crash, sanitizer report, leak,
# timeout, giant allocation or exception other than attncheck::InputError fails the run; the
# reproducer is written to out/fuzz/<target>/crash-* (replay: build-fuzz/fuzz_<target> FILE).
#
# Usage: ci/fuzz.sh [--merge] [target...]      targets: model npy tokens (default: all)
#   --merge   after fuzzing, fold the new interesting inputs into libfuzzer/corpus/ (then commit them)
# Environment: ATTNCHECK_FUZZ_SECONDS (per target, default 50), ATTNCHECK_FUZZ_BUILD_DIR
#   (default build-fuzz), CXX_FUZZ (the clang++, default clang++-14 or clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

seconds=${ATTNCHECK_FUZZ_SECONDS:-50}
dir=${ATTNCHECK_FUZZ_BUILD_DIR:-build-fuzz}
cxx=${CXX_FUZZ:-$(command -v clang++-14 || command -v clang++)}
merge=0
targets=()
for a in "$@"; do
  case "$a" in
    --merge) merge=1 ;;
    model|npy|tokens) targets+=("$a") ;;
    *) echo "fuzz.sh: unknown argument $a (targets: model npy tokens)" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(model npy tokens)

cmake -S libfuzzer -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$dir" -j"$(jobs)"

# Sizes and limits: model files grow up to 64 KB (room for several layers), a legal input never
# needs 512 MB (the loader must not allocate what a header merely claims), one input never takes
# 10 s (a hang is a bug too).
declare -A max_len=([model]=65536 [npy]=4096 [tokens]=1024)
# One harness: fuzzes target $1, its log in out/fuzz/$1/log.txt; exit 1 on a finding.
fuzz_one() {
  local t=$1 work=out/fuzz/$1
  rm -rf "$work"; mkdir -p "$work/new"
  # One more model seed, made by the command line itself, when a build is there to make it.
  if [ "$t" = model ] && [ -x build/cli/attncheck ]; then
    build/cli/attncheck init --out "$work/new/init_tiny.safetensors" --preset tiny --seed 1 \
      >/dev/null 2>&1 || true
  fi
  # New inputs go to the scratch folder (first), the committed corpus is read only.
  "$dir/fuzz_$t" "$work/new" "libfuzzer/corpus/$t" \
    -dict="libfuzzer/$t.dict" -max_total_time="$seconds" -max_len="${max_len[$t]}" \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -artifact_prefix="$work/" -print_final_stats=1 2> "$work/log.txt"
}

# The harnesses run side by side, as many at a time as there are jobs (each is one process on
# one core: one after another, a 2-core machine idled half of this stage).
declare -A pid=()
running=()
failed=()
report() {
  local t=$1 work=out/fuzz/$1
  if ! wait "${pid[$t]}"; then
    failed+=("$t")
    tail -n 60 "$work/log.txt"
    echo "fuzz.sh: fuzz_$t FAILED; reproducer(s): $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | tr '\n' ' ')"
  else
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+ *DONE" "$work/log.txt" || true
    echo "fuzz_$t: no crash; $(ls "$work/new" | wc -l) new corpus inputs"
  fi
  if [ "$merge" = 1 ]; then
    "$dir/fuzz_$t" -merge=1 "libfuzzer/corpus/$t" "$work/new" 2>/dev/null
  fi
}
for t in "${targets[@]}"; do
  if [ ${#running[@]} -ge "$(jobs)" ]; then
    report "${running[0]}"
    running=("${running[@]:1}")
  fi
  echo "== fuzz_$t for ${seconds}s"
  fuzz_one "$t" &
  pid[$t]=$!
  running+=("$t")
done
for t in "${running[@]}"; do report "$t"; done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failures in: ${failed[*]}" >&2
  exit 1
fi
