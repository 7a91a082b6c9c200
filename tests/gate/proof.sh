#!/usr/bin/env bash
# Proof that the performance gate works, against the real benchmark binary:
#   1. two unchanged runs each pass against the committed baseline and against each other
#      (no false alarm);
#   2. a run with an injected slowdown (ATTNCHECK_INJECT_SLOWDOWN=1: the benchmark binary runs
#      its optimized paths the slow way, see docs/ci.md) fails against both, with exit code 1
#      (a regression verdict, not an error).
# Usage: tests/gate/proof.sh        (after ci/build.sh; CI runs it after ci/perf_gate.sh and
#                                    reuses that run as the first unchanged one)
# Environment: as ci/perf_gate.sh (ATTNCHECK_BENCH, ATTNCHECK_GATE_FILTER).
set -uo pipefail
cd "$(dirname "$0")/../.."
. ci/lib.sh

py=$(gate_python)
bin=${ATTNCHECK_BENCH:-build/bench/attncheck_bench}
work=out/gate-proof
rm -rf "$work"; mkdir -p "$work"
problems=0

# expect WANT LABEL CMD...: CMD must exit with WANT.
expect() {
  local want=$1 label=$2; shift 2
  local rc=0
  "$@" > "$work/$label.txt" 2>&1 || rc=$?
  cat "$work/$label.txt"
  if [ "$rc" -eq "$want" ]; then
    echo "proof: $label: exit $rc as expected"
  else
    echo "proof: $label: exit $rc, expected $want" >&2
    problems=$((problems + 1))
  fi
}

# Run A (unchanged): the gate stage's runs when they are there and newer than the binary.
if ls out/perf/run-*.json >/dev/null 2>&1 && [ out/perf/run-1.json -nt "$bin" ]; then
  a_runs=$(ls out/perf/run-*.json)
  echo "proof: run A = the gate stage's runs: $a_runs"
else
  expect 0 gate-a ci/perf_gate.sh --out "$work/a"
  a_runs=$(ls "$work"/a/run-*.json)
fi
# Run B (unchanged, a second time).
expect 0 gate-b ci/perf_gate.sh --out "$work/b"
# Run C (the injected slowdown).
expect 1 gate-slow env ATTNCHECK_INJECT_SLOWDOWN=1 ci/perf_gate.sh --out "$work/slow"
if ! grep -q '"attncheck_inject_slowdown"' "$work"/slow/run-1.json 2>/dev/null; then
  echo "proof: the benchmark binary did not report attncheck_inject_slowdown in its context:" \
       "the injected slowdown did not happen (docs/ci.md)" >&2
  problems=$((problems + 1))
fi

# The same runs judged against each other: A as the baseline.
# shellcheck disable=SC2086  # lists of files
"$py" tools/perf_gate.py record --current $a_runs --baseline "$work/a-baseline.json" >/dev/null
expect 0 b-vs-a "$py" tools/perf_gate.py compare --current "$work"/b/run-*.json \
  --baseline "$work/a-baseline.json" --out "$work/b-vs-a" --threshold "${ATTNCHECK_GATE_THRESHOLD:-0.40}"
expect 1 slow-vs-a "$py" tools/perf_gate.py compare --current "$work"/slow/run-*.json \
  --baseline "$work/a-baseline.json" --out "$work/slow-vs-a" --threshold "${ATTNCHECK_GATE_THRESHOLD:-0.40}"

if [ "$problems" -ne 0 ]; then
  echo "proof: FAILED ($problems expectation(s) not met); outputs in $work/" >&2
  exit 1
fi
echo "proof: the gate passes unchanged runs and catches the injected slowdown (outputs in $work/)"
