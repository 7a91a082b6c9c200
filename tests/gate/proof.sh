#!/usr/bin/env bash
# Proof that the performance gate works, against the real benchmark binary, on this machine
# (whatever its instruction set: the A/B gate compares the machine with itself):
#   1. the cheap paths: with no base commit the gate says so and passes; a base that is not a
#      commit is an error (exit 2);
#   2. an unchanged build passes: the gate's judgement of one binary against itself, on B's
#      processes of the odd rounds against those of the even rounds (a false alarm here would
#      fail CI for a change that touches nothing);
#   3. an injected slowdown fails: B's processes against S's, the same binary run with
#      ATTNCHECK_INJECT_SLOWDOWN=0.5 (every timed call of the code under test takes 1.5 times as
#      long, bench/slowdown.hpp) in the same rounds: exit 1, only rates of the code under test
#      flagged, and every one of them lower than B's.
# The processes are a gate's own (ci/perf_gate.sh --proof-rounds M): in CI the gate stage runs
# them beside its A/B pairs and this script judges them (--runs out/perf), so the proof costs no
# benchmark run of its own. Without --runs it runs such a gate first, this build against itself.
# The smallest detectable slowdown itself is measured by tests/gate/power.sh (minutes of
# benchmarking, not part of CI).
# Usage: tests/gate/proof.sh [--runs DIR]   (after ci/build.sh)
# Environment: as ci/perf_gate.sh (ATTNCHECK_BENCH, ATTNCHECK_GATE_FILTER).
set -uo pipefail
cd "$(dirname "$0")/../.."
. ci/lib.sh

py=$(gate_python)
bin=${ATTNCHECK_BENCH:-build/bench/attncheck_bench}
work=out/gate-proof
runs=""
case "${1:-}" in
  "") ;;
  --runs) runs=${2:?--runs needs a folder} ;;
  *) echo "usage: tests/gate/proof.sh [--runs DIR]" >&2; exit 2 ;;
esac
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

# 1. No base commit (no ancestor older than a million hours), and a base that does not exist.
expect 0 no-base env ATTNCHECK_GATE_WINDOW_HOURS=1000000 ci/perf_gate.sh --out "$work/no-base"
if ! grep -q "no base commit" "$work/no-base.txt"; then
  echo "proof: the gate without a base commit did not say so" >&2
  problems=$((problems + 1))
fi
expect 2 bad-base ci/perf_gate.sh --base no-such-revision-anywhere --out "$work/bad-base"

# The processes to judge: a gate's a-I, b-I and s-I (I = 1..rounds).
if [ -z "$runs" ]; then
  runs=$work/runs
  echo "== proof: running the gate's processes (this build against itself, 12 rounds, each with S)"
  ci/perf_gate.sh --a "$bin" --b "$bin" --pairs 12 --proof-rounds 12 --out "$runs" \
    > "$work/runs.txt" 2>&1 || { cat "$work/runs.txt"; echo "proof: the gate did not run" >&2; exit 1; }
fi
b_odd=(); b_even=(); b_slowed=(); s_runs=()
i=1
while [ -f "$runs/b-$i.json" ]; do
  f=$runs/b-$i.json
  if [ $(( i % 2 )) -eq 1 ]; then b_odd+=("$f"); else b_even+=("$f"); fi
  if [ -f "$runs/s-$i.json" ]; then b_slowed+=("$f"); s_runs+=("$runs/s-$i.json"); fi
  i=$((i + 1))
done
# The gate's test takes sides of one size: an odd number of rounds leaves the last one out.
[ ${#b_odd[@]} -eq ${#b_even[@]} ] || unset 'b_odd[-1]'
if [ ${#b_odd[@]} -lt 6 ] || [ ${#b_even[@]} -lt 6 ] || [ ${#s_runs[@]} -lt 8 ]; then
  echo "proof: $runs holds ${#b_odd[@]}+${#b_even[@]} processes of B and ${#s_runs[@]} slowed ones:" \
       "at least 6+6 and 8 are needed (ci/perf_gate.sh --pairs 12 --proof-rounds 8 or more)" >&2
  exit 1
fi
echo "== proof: judging ${#b_odd[@]} + ${#b_even[@]} processes of B (unchanged) and" \
     "${#s_runs[@]} pairs of B and S (slowed) from $runs"

# 2. Unchanged: B against itself, odd rounds against even ones (interleaved in time, as A and B).
expect 0 unchanged "$py" tools/perf_gate.py ab --a "${b_odd[@]}" --b "${b_even[@]}" \
  --a-label "B, odd rounds" --b-label "B, even rounds" --out "$work/unchanged"

# 3. The injected slowdown: S against the B of the same rounds (a 33% drop is far beyond what
#    8 pairs need).
expect 1 slow "$py" tools/perf_gate.py ab --a "${b_slowed[@]}" --b "${s_runs[@]}" \
  --a-label "B" --b-label "S = B with ATTNCHECK_INJECT_SLOWDOWN=0.5" --out "$work/slow"
if ! grep -q '"attncheck_inject_slowdown": "0.5"' "${s_runs[0]}" 2>/dev/null; then
  echo "proof: the S runs do not report attncheck_inject_slowdown 0.5 in their context:" \
       "the injected slowdown did not happen" >&2
  problems=$((problems + 1))
fi
# What was flagged must be code under test (the reference kernel's rate, BM_AttentionReference,
# is not slowed), and every rate of the code under test must have dropped, flagged or not.
if ! "$py" - "$work/slow/gate.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
bad, flagged = [], 0
for r in rows:
    reference = r["benchmark"].startswith("BM_AttentionReference")
    regressed = r["verdict"].startswith("REGRESSION")
    flagged += regressed
    if reference and regressed:
        bad.append(f'{r["benchmark"]}: flagged ({r["change"]:+.1%}) though it is not slowed')
    if not reference and not r["change"] < 0:
        bad.append(f'{r["benchmark"]}: {r["change"]:+.1%} under a 33% slowdown')
if bad:
    print("proof: wrong verdicts under the injected slowdown:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"proof: {flagged} of {len(rows)} rates flagged under the injected slowdown, every rate of "
      "the code under test lower, the reference kernel's not flagged")
EOF
then
  problems=$((problems + 1))
fi

if [ "$problems" -ne 0 ]; then
  echo "proof: FAILED ($problems expectation(s) not met); outputs in $work/" >&2
  exit 1
fi
echo "proof: the gate passes an unchanged build and catches the injected slowdown (outputs in $work/)"
