#!/usr/bin/env bash
# The performance gate: this build against the base commit, both built and benchmarked on this
# machine in the same run, interleaved (A B B A A B ...), judged by tools/perf_gate.py (one-sided
# Mann-Whitney U test + a relative threshold on the paired figures). Like is compared with like:
# same CPU, same instruction set, same minutes of the same machine. See docs/ci.md.
#
# Usage:
#   ci/perf_gate.sh                  base commit (below) against build/bench/attncheck_bench
#   ci/perf_gate.sh --base REV       against that commit (also ATTNCHECK_GATE_BASE)
#   ci/perf_gate.sh --a BIN [--b BIN] [--b-env VAR=VALUE]
#                                    two given binaries (B defaults to this build); --b-env sets a
#                                    variable for the B processes only (tests/gate/ injects a
#                                    slowdown with ATTNCHECK_INJECT_SLOWDOWN=0.5)
#   ci/perf_gate.sh --record         run this build alone and write bench/baselines/$NAME.json, a
#                                    record with the machine's fingerprint (commit it)
#   ci/perf_gate.sh --against-record this build against the record, when the fingerprints match
#                                    (same CPU model, instruction set, CPU count); else it says so
#                                    and passes
#   ci/perf_gate.sh --proof-rounds M ...
#                                    also runs, in the first M of the interleaved rounds, B with
#                                    ATTNCHECK_INJECT_SLOWDOWN=0.5 (s-I.json beside a-I and b-I),
#                                    for tests/gate/proof.sh --runs to judge the gate's own proof
#                                    on the same processes (CI's stages gate and gate-proof)
# Options: --pairs N (A/B process pairs, default 20), --repetitions N (per process, default 3,
#   of which the fastest counts: the process is the unit of the test, see tools/perf_gate.py),
#   --out DIR (default out/perf), --filter REGEX (the gated benchmarks), --baseline NAME.
# The base commit, unless given: the newest ancestor of HEAD committed more than
# ATTNCHECK_GATE_WINDOW_HOURS (default 3) before HEAD, i.e. the state before the latest burst of
# commits, so that a multi-commit submission is judged whole (a CI that knows the target branch,
# e.g. a pull request's base, should pass it as ATTNCHECK_GATE_BASE). With no such commit (a
# first commit) the gate says so and passes.
# Environment: ATTNCHECK_BENCH (this build's binary, default build/bench/attncheck_bench),
#   ATTNCHECK_GATE_THRESHOLD (relative drop a regression must exceed; default: the tool's, 5% for
#   A/B, 10% against a record),
#   ATTNCHECK_GATE_BASE, ATTNCHECK_GATE_WINDOW_HOURS, ATTNCHECK_GATE_BUILD_ROOT (where base
#   commits are built, default out/gate-base; a built base is reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

# The gated benchmarks: the calibrations (context: the machine's state during each process) and
# one or two cases of each kind of figure: kernel causal prefill T=512 (1 and all threads),
# kernel decode kv 4096, the reference kernel at T=512 (speed-up over the optimized one measured
# just before it), the backward pass at T=512 on one thread, decoder prefill of `base` at T=128,
# decode step at ctx 128, and the decoder against the reference (speed-up).
default_filter='^BM_(FmaPeak|DramRead)|^BM_AttentionPrefill/threads:[01]/T:512/|^BM_AttentionDecode/|^BM_AttentionReference/Tq:512/|^BM_AttentionV2BackwardF32/threads:1/T:512/|^BM_Prefill/T:128/|^BM_DecodeStep/ctx:128/|^BM_VsReference'
filter=${ATTNCHECK_GATE_FILTER:-$default_filter}
threshold=()
[ -n "${ATTNCHECK_GATE_THRESHOLD:-}" ] && threshold=(--threshold "$ATTNCHECK_GATE_THRESHOLD")
bin_b=${ATTNCHECK_BENCH:-build/bench/attncheck_bench}
bin_a=""
b_env=()
base=${ATTNCHECK_GATE_BASE:-}
name=default
out=out/perf
pairs=20
reps=3
min_time=0.1
mode=ab
proof_rounds=${ATTNCHECK_GATE_PROOF_ROUNDS:-0}
proof_slowdown=0.5

while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift ;;
    --a) bin_a=$2; mode=binaries; shift ;;
    --b) bin_b=$2; shift ;;
    --b-env) b_env+=("$2"); shift ;;
    --record) mode=record ;;
    --against-record) mode=against-record ;;
    --baseline) name=$2; shift ;;
    --out) out=$2; shift ;;
    --pairs) pairs=$2; shift ;;
    --repetitions) reps=$2; shift ;;
    --min-time) min_time=$2; shift ;;
    --filter) filter=$2; shift ;;
    --proof-rounds) proof_rounds=$2; shift ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "perf_gate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
record=bench/baselines/$name.json
py=$(gate_python)
if [ ! -x "$bin_b" ]; then
  echo "perf_gate.sh: $bin_b not found: build first (ci/build.sh) or set ATTNCHECK_BENCH" >&2
  exit 2
fi
mkdir -p "$out"
rm -f "$out"/a-*.json "$out"/b-*.json "$out"/s-*.json "$out"/run-*.json
if [ "$proof_rounds" -gt "$pairs" ]; then
  echo "perf_gate.sh: --proof-rounds $proof_rounds is more than the $pairs rounds" >&2
  exit 2
fi

# bench LABEL OUTFILE BIN [VAR=VALUE...]: one process of the gated benchmarks.
bench() {
  local label=$1 file=$2 bin=$3
  shift 3
  echo "== perf_gate.sh: $label ($reps repetitions)"
  env "$@" "$bin" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
    --benchmark_min_time="$min_time" \
    --benchmark_out="$file" --benchmark_out_format=json --benchmark_counters_tabular=true \
    > "$file.log" 2>&1 || { cat "$file.log"; echo "perf_gate.sh: $bin failed" >&2; return 2; }
  grep -E '^attncheck: isa' "$file.log" || true
}

# The base commit of the default mode (empty: none).
resolve_base() {
  git rev-parse --git-dir >/dev/null 2>&1 || return 0
  if [ -n "$base" ]; then
    git rev-parse --verify --quiet "$base^{commit}" || {
      echo "perf_gate.sh: base $base is not a commit of this repository" >&2; return 2; }
    return 0
  fi
  local hours=${ATTNCHECK_GATE_WINDOW_HOURS:-3} head head_time cutoff sha
  head=$(git rev-parse HEAD) || return 0
  head_time=$(git log -1 --format=%ct HEAD)
  cutoff=$(( head_time - hours * 3600 ))
  # git reads a cutoff before 1970 as no limit at all (it answered HEAD itself): none is older.
  [ "$cutoff" -gt 0 ] || return 0
  sha=$(git rev-list -1 --first-parent --before="$cutoff" HEAD 2>/dev/null || true)
  [ "$sha" != "$head" ] && echo "$sha"
  return 0
}

# build_base SHA: builds the benchmark binary of a commit with this build's options, into
# $root/<sha>/src/build (a source tree at the checkout's folder depth below $root/<sha>/..., so
# that ccache's relative paths match build/'s). Prints the binary's path.
build_base() {
  local sha=$1 root dir cache opts=()
  root=${ATTNCHECK_GATE_BUILD_ROOT:-out/gate-base}
  dir="$root/$sha/src"
  if [ -x "$dir/build/bench/attncheck_bench" ]; then
    echo "$dir/build/bench/attncheck_bench"; return 0
  fi
  rm -rf "$root/$sha"; mkdir -p "$dir"
  git archive --format=tar "$sha" | tar -x -C "$dir"
  # The candidate's code-generation options, so both binaries target the same instruction set.
  cache=$(dirname "$(dirname "$bin_b")")/CMakeCache.txt
  if [ -f "$cache" ]; then
    local var v
    for var in CMAKE_BUILD_TYPE ATTNCHECK_NATIVE ATTNCHECK_MARCH ATTNCHECK_WERROR; do
      v=$(sed -n "s/^$var:[A-Z]*=//p" "$cache")
      [ -n "$v" ] && opts+=("-D$var=$v")
    done
  fi
  # shellcheck disable=SC2046  # the flag list is words
  {
    cmake -S "$dir" -B "$dir/build" -DATTNCHECK_BUILD_TESTS=OFF "${opts[@]}" $(launcher_flags) \
      && cmake --build "$dir/build" -j"$(jobs)" --target attncheck_bench
  } > "$root/$sha/build.log" 2>&1 || {
    # A base that does not build with warnings as errors (a newer compiler, another -march) is
    # still a base: its speed is what is compared.
    echo "perf_gate.sh: base $sha did not build as configured; retrying without -Werror" >&2
    cmake -S "$dir" -B "$dir/build" -DATTNCHECK_WERROR=OFF >> "$root/$sha/build.log" 2>&1 &&
      cmake --build "$dir/build" -j"$(jobs)" --target attncheck_bench >> "$root/$sha/build.log" 2>&1 || {
        tail -n 40 "$root/$sha/build.log" >&2
        echo "perf_gate.sh: base $sha does not build (log: $root/$sha/build.log)" >&2
        return 2; }
  }
  echo "$dir/build/bench/attncheck_bench"
}

case "$mode" in
  record)
    for i in $(seq 1 "$pairs"); do bench "record process $i of $pairs" "$out/run-$i.json" "$bin_b"; done
    ATTNCHECK_GIT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || true) \
      "$py" tools/perf_gate.py record --current "$out"/run-*.json --baseline "$record"
    echo "perf_gate.sh: review and commit $record"
    exit 0 ;;
  against-record)
    for i in $(seq 1 "$pairs"); do bench "process $i of $pairs" "$out/run-$i.json" "$bin_b"; done
    exec "$py" tools/perf_gate.py compare --current "$out"/run-*.json --baseline "$record" \
      --out "$out" "${threshold[@]}" ;;
  ab)
    sha=$(resolve_base) || exit 2
    if [ -z "$sha" ] && [ "$proof_rounds" -eq 0 ]; then
      echo "perf gate: PASS — no base commit to compare with (a first commit, or no git history);" \
           "nothing was measured"
      exit 0
    elif [ -z "$sha" ]; then
      # The proof still needs its processes: this build stands in for the base.
      echo "perf gate: no base commit to compare with (a first commit, or no git history): this" \
           "build runs as A too, for the proof's processes"
      bin_a=$bin_b
      a_label="this build (no base commit)"
    else
      echo "== perf_gate.sh: base $(git log -1 --format='%h %ci %s' "$sha" | cut -c1-100)"
      echo "== perf_gate.sh: building the base's benchmarks"
      bin_a=$(build_base "$sha") || exit 2
      a_label="base $(git rev-parse --short "$sha")"
    fi
    b_label="this build ($(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + changes'))" ;;
  binaries)
    a_label="A $bin_a"
    b_label="B $bin_b${b_env[*]:+ with ${b_env[*]}}" ;;
esac

# Interleaved A/B: pair i runs A then B for odd i and B then A for even i, so a machine that
# drifts during the run (a turbo budget, a neighbour) weighs on both sides alike. The slowed
# processes of the proof (S) sit next to B's in the same rounds (A B S, then S B A): the proof
# compares B with S, the same binary with and without the injected slowdown, minutes apart at most.
slowed() {
  bench "round $1 of $pairs: S = $b_label with ATTNCHECK_INJECT_SLOWDOWN=$proof_slowdown (the proof)" \
    "$out/s-$1.json" "$bin_b" "${b_env[@]}" "ATTNCHECK_INJECT_SLOWDOWN=$proof_slowdown"
}
for i in $(seq 1 "$pairs"); do
  if [ $(( i % 2 )) -eq 1 ]; then
    bench "pair $i of $pairs: A = $a_label" "$out/a-$i.json" "$bin_a"
    bench "pair $i of $pairs: B = $b_label" "$out/b-$i.json" "$bin_b" "${b_env[@]}"
    [ "$i" -gt "$proof_rounds" ] || slowed "$i"
  else
    [ "$i" -gt "$proof_rounds" ] || slowed "$i"
    bench "pair $i of $pairs: B = $b_label" "$out/b-$i.json" "$bin_b" "${b_env[@]}"
    bench "pair $i of $pairs: A = $a_label" "$out/a-$i.json" "$bin_a"
  fi
done
a_runs=(); b_runs=()
for i in $(seq 1 "$pairs"); do a_runs+=("$out/a-$i.json"); b_runs+=("$out/b-$i.json"); done
exec "$py" tools/perf_gate.py ab --a "${a_runs[@]}" --b "${b_runs[@]}" --a-label "$a_label" \
  --b-label "$b_label" --out "$out" "${threshold[@]}"
