#!/usr/bin/env bash
# The performance gate: runs the gated benchmarks with repetitions and judges them against a
# committed baseline with tools/perf_gate.py (Mann-Whitney U test + a relative threshold, on
# machine-independent figures only: frac_peak, frac_bw, speedup). See docs/ci.md.
#
# Usage:
#   ci/perf_gate.sh                     run, compare with bench/baselines/$NAME.json; exit 1 on a
#                                       significant regression (table on stdout, chart + table in
#                                       out/perf/gate.svg and out/perf/gate.md)
#   ci/perf_gate.sh --record            run, and write the run as the new baseline (commit it)
#   ci/perf_gate.sh --current "A.json B.json"  judge existing runs instead of running anything
# Options: --baseline NAME (default: default), --out DIR (default out/perf),
#          --repetitions N (in all, default 9, at least 9), --filter REGEX (the gated benchmarks).
# Environment: ATTNCHECK_BENCH (the binary, default build/bench/attncheck_bench),
#   ATTNCHECK_GATE_PROCESSES (separate benchmark processes the repetitions are spread over, 3),
#   ATTNCHECK_GATE_THRESHOLD (relative drop a regression must exceed, 0.40: see below).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

# The gated benchmarks: the calibrations (every ratio is relative to them) and one or two cases of
# each kind of figure, small enough that 9 repetitions take a few minutes on 2 cores:
#   kernel causal prefill T=512 (1 and all threads; frac_peak), kernel decode kv 4096 (frac_bw),
#   the reference kernel at T=512 (speedup over the optimized one measured just before it),
#   decoder prefill of `base` at T=128 (frac_peak), decode step at ctx 128 (frac_bw), and the
#   decoder against the reference (speedup).
default_filter='^BM_(FmaPeak|DramRead)|^BM_AttentionPrefill/threads:[01]/T:512/|^BM_AttentionDecode/|^BM_AttentionReference/Tq:512/|^BM_Prefill/T:128/|^BM_DecodeStep/ctx:128/|^BM_VsReference'
filter=${ATTNCHECK_GATE_FILTER:-$default_filter}
# The relative drop a regression must exceed. tools/perf_gate.py's own default, 10%, suits a
# dedicated quiet runner. On this project's CI machines (2 shared vCPUs) the figures of an
# UNCHANGED build drift more than that between runs minutes apart, which no within-run spread
# shows: measured here against a baseline recorded 15 minutes earlier, kernel decode frac_bw
# -30% and -35% (the DRAM calibration swings 48-76 GB/s), optimized-over-reference speed-up
# -28%, prefill T=128 frac_peak -20%. 40% is above that drift and far below the injected
# slowdown of tests/gate/proof.sh (attention figures -95% and more). Set
# ATTNCHECK_GATE_THRESHOLD=0.10 on a runner quiet enough to hold its figures within 10%.
threshold=${ATTNCHECK_GATE_THRESHOLD:-0.40}
bin=${ATTNCHECK_BENCH:-build/bench/attncheck_bench}
name=default
out=out/perf
reps=9
procs=${ATTNCHECK_GATE_PROCESSES:-3}
mode=compare
current=""

while [ $# -gt 0 ]; do
  case "$1" in
    --record) mode=record ;;
    --baseline) name=$2; shift ;;
    --out) out=$2; shift ;;
    --repetitions) reps=$2; shift ;;
    --filter) filter=$2; shift ;;
    --current) current=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "perf_gate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
baseline=bench/baselines/$name.json
mkdir -p "$out"

if [ -z "$current" ]; then
  if [ ! -x "$bin" ]; then
    echo "perf_gate.sh: $bin not found: build first (ci/build.sh) or set ATTNCHECK_BENCH" >&2
    exit 2
  fi
  # The repetitions are spread over separate processes: each process measures the machine's
  # peaks once (bench/calibration.hpp), so one process alone would shift all its repetitions by
  # the same calibration error, which the U test would take for a real change.
  per_run=$(( (reps + procs - 1) / procs ))
  current=""
  rm -f "$out"/run-*.json
  # Random interleaving (ATTNCHECK_GATE_INTERLEAVE=true) runs the repetitions of all benchmarks
  # in a shuffled order, so a slow minute of the machine spreads over every benchmark instead of
  # landing on one. Off by default: the reference benchmarks' speedup divides by the optimized
  # benchmark's time of the same process, so the optimized one must run first.
  for i in $(seq 1 "$procs"); do
    echo "== perf_gate.sh: process $i of $procs, $per_run repetitions"
    "$bin" --benchmark_filter="$filter" \
           --benchmark_repetitions="$per_run" \
           --benchmark_enable_random_interleaving="${ATTNCHECK_GATE_INTERLEAVE:-false}" \
           --benchmark_out="$out/run-$i.json" --benchmark_out_format=json \
           --benchmark_counters_tabular=true
    current="$current $out/run-$i.json"
  done
fi

if [ "$mode" = record ]; then
  ATTNCHECK_GIT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || true) \
    "$(gate_python)" tools/perf_gate.py record --current $current --baseline "$baseline"
  echo "perf_gate.sh: review and commit $baseline"
else
  "$(gate_python)" tools/perf_gate.py compare --current $current --baseline "$baseline" --out "$out" \
    --threshold "$threshold"
fi
