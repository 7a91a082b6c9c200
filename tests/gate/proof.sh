#!/usr/bin/env bash
# Proof that the performance gate works, against the real benchmark binary, on this machine
# (whatever its instruction set: the A/B gate compares the machine with itself):
#   1. the cheap paths: with no base commit the gate says so and passes; a base that is not a
#      commit is an error (exit 2);
#   2. an unchanged build passes: A and B are the same binary (a false alarm here would fail CI
#      for a change that touches nothing);
#   3. an injected slowdown fails: B runs with ATTNCHECK_INJECT_SLOWDOWN=0.5 (every timed call of
#      the code under test takes 1.5 times as long, bench/slowdown.hpp): exit 1, only rates of
#      the code under test flagged, and every one of them lower than A's.
# The smallest detectable slowdown itself is measured by tests/gate/power.sh (minutes of
# benchmarking, not part of CI).
# Usage: tests/gate/proof.sh        (after ci/build.sh)
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

# 1. No base commit (no ancestor older than a million hours), and a base that does not exist.
expect 0 no-base env ATTNCHECK_GATE_WINDOW_HOURS=1000000 ci/perf_gate.sh --out "$work/no-base"
if ! grep -q "no base commit" "$work/no-base.txt"; then
  echo "proof: the gate without a base commit did not say so" >&2
  problems=$((problems + 1))
fi
expect 2 bad-base ci/perf_gate.sh --base no-such-revision-anywhere --out "$work/bad-base"

# 2. Unchanged: the same binary on both sides. 12 pairs (the gate's default is 20) keep the
#    stage short; the false-alarm rate does not depend on the number of pairs.
expect 0 unchanged ci/perf_gate.sh --a "$bin" --b "$bin" --pairs 12 --out "$work/unchanged"

# 3. The injected slowdown on B (12 pairs: a 33% drop is far beyond what they need).
expect 1 slow ci/perf_gate.sh --a "$bin" --b "$bin" --b-env ATTNCHECK_INJECT_SLOWDOWN=0.5 \
  --pairs 12 --out "$work/slow"
if ! grep -q '"attncheck_inject_slowdown": "0.5"' "$work"/slow/b-1.json 2>/dev/null; then
  echo "proof: the B runs do not report attncheck_inject_slowdown 0.5 in their context:" \
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
