#!/usr/bin/env bash
# What the A/B performance gate can detect on this machine: its false-alarm rate and the
# smallest slowdown it catches with 95% power (the figures of docs/ci.md). Not a CI stage: it
# benchmarks for 15-30 minutes on 2 cores.
#   1. RUNS gate runs of one build against itself (A/A, PAIRS process pairs each): the noise;
#   2. tools/perf_gate.py power: resamples those pairs into simulated gate runs with every figure
#      of B divided by 1 + s, for a range of s, and applies the gate's rule: the detection rate
#      per figure (s = 0: the false-alarm rate);
#   3. CHECKS real gate runs with ATTNCHECK_INJECT_SLOWDOWN=S on B (the smallest s found in 2 by
#      default): how many of them fail, to confirm the simulation with the real slowdown.
# Usage: tests/gate/power.sh [RUNS (default 3)] [CHECKS (default 3)] [S]
# Environment: ATTNCHECK_BENCH, ATTNCHECK_GATE_PAIRS (default 12, as ci/perf_gate.sh); output in
#   out/gate-power/ (power.json, the runs, each check's gate.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
. ci/lib.sh

runs=${1:-3}
checks=${2:-3}
s=${3:-}
pairs=${ATTNCHECK_GATE_PAIRS:-12}
bin=${ATTNCHECK_BENCH:-build/bench/attncheck_bench}
py=$(gate_python)
work=out/gate-power
rm -rf "$work"; mkdir -p "$work"

a=(); b=()
for r in $(seq 1 "$runs"); do
  echo "== power: A/A gate run $r of $runs"
  ci/perf_gate.sh --a "$bin" --b "$bin" --pairs "$pairs" --out "$work/aa-$r" > "$work/aa-$r.txt" 2>&1 ||
    echo "power: A/A run $r FAILED the gate (a false alarm): see $work/aa-$r.txt"
  grep -E '^perf gate:' "$work/aa-$r.txt" | head -n 1
  for i in $(seq 1 "$pairs"); do a+=("$work/aa-$r/a-$i.json"); b+=("$work/aa-$r/b-$i.json"); done
done
"$py" tools/perf_gate.py power --a "${a[@]}" --b "${b[@]}" --pairs "$pairs" \
  --out "$work/power.json" | tee "$work/power.txt"

if [ -z "$s" ]; then
  s=$("$py" - "$work/power.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))["smallest_slowdown_at_95pct_power"].values()
print("" if None in v else max(v))
EOF
)
fi
if [ -z "$s" ]; then
  echo "power: 95% power not reached within the simulated slowdowns; no real check run"
  exit 0
fi
caught=0
for c in $(seq 1 "$checks"); do
  rc=0
  ci/perf_gate.sh --a "$bin" --b "$bin" --b-env "ATTNCHECK_INJECT_SLOWDOWN=$s" --pairs "$pairs" \
    --out "$work/slow-$c" > "$work/slow-$c.txt" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && caught=$((caught + 1))
  grep -E '^perf gate:' "$work/slow-$c.txt" | head -n 1
done
echo "power: real injected slowdown s=$s: the gate failed $caught of $checks runs"
