#!/usr/bin/env bash
# The CI time budget's own test (ctest ci:budget): the table of ci/budget.tsv is complete and
# adds up (every stage .ci/run and ci/tests.sh run has a budget; the stages' sum leaves at least
# 300 s of the total for noise; docs/ci.md shows the same table), and the mechanism of ci/lib.sh
# fails what it must: a stage still running at its budget is stopped at once with the one-line
# message, a stage that ends past its budget fails, one within it keeps its own exit status, and
# nothing is enforced outside CI.
set -uo pipefail
cd "$(dirname "$0")/../.."
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
table=ci/budget.tsv

# 1. The table: every stage named, the sum within the total less 300 s of room.
rows=$(awk -F'\t' '$1 !~ /^#/ && NF >= 3' "$table")
total=$(awk -F'\t' '$1 == "total" { print $2 }' <<< "$rows")
sum=$(awk -F'\t' '$1 != "total" { s += $2 } END { print s }' <<< "$rows")
[ "$total" = 2700 ] || fail "the total budget is '$total', not 2700 s (45 minutes)"
[ "$sum" -le $(( total - 300 )) ] || fail "the stages' budgets add up to $sum s: over $(( total - 300 )) s"
[ "$sum" -le 2400 ] || fail "the stages' budgets add up to $sum s, over 2400 s (40 minutes)"
for name in $(grep -hoE '^ *stage [a-z-]+' .ci/run ci/tests.sh | awk '{ print $2 }'); do
  grep -qP "^\Q$name\E\t[0-9]+\t" "$table" || fail "stage '$name' of .ci/run or ci/tests.sh has no budget in $table"
done
# docs/ci.md's table: rows "| `stage` | seconds | ... |" between the "Budget" heading and the next.
docs=$(awk '/^## Budget/ { on = 1; next } /^## / { on = 0 } on' docs/ci.md |
       sed -nE 's/^\| `([a-z-]+)` \| ([0-9]+) \|.*/\1\t\2/p')
want=$(awk -F'\t' '{ print $1 "\t" $2 }' <<< "$rows")
if [ "$docs" != "$want" ]; then
  fail "docs/ci.md's budget table differs from $table (< the table, > the docs):"
  diff <(echo "$want") <(echo "$docs") | sed 's/^/    /'
fi

# 2. The mechanism, on a table of tiny budgets.
tiny=$(mktemp); log=$(mktemp)
trap 'rm -f "$tiny" "$log"' EXIT
printf 'quick\t5\tx\nslow\t2\tx\nlate\t1\tx\n' > "$tiny"
export ATTNCHECK_CI_BUDGET_FILE=$tiny ATTNCHECK_STAGE_LOG=

start=$(date +%s)
ATTNCHECK_CI_BUDGET=on ATTNCHECK_CI_SLOW_STAGE=slow=60 bash -c '. ci/lib.sh; stage slow true' > "$log" 2>&1
rc=$?; took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] || fail "a stage slept past its budget and passed"
[ "$took" -le 10 ] || fail "a stage past its budget of 2 s was stopped after $took s, not at once"
grep -qx "CI budget: stage slow stopped after [0-9]* s: its budget is 2 s (ci/budget.tsv)" "$log" ||
  fail "no one-line budget message for the stopped stage: $(cat "$log")"

ATTNCHECK_CI_BUDGET=on bash -c '. ci/lib.sh; f() { sleep 2; }; stage late f' > "$log" 2>&1
[ $? -ne 0 ] || fail "a stage that ended past its budget passed"
grep -qx "CI budget: stage late took [0-9]* s, over its budget of 1 s (ci/budget.tsv)" "$log" ||
  fail "no one-line budget message for the late stage: $(cat "$log")"

ATTNCHECK_CI_BUDGET=on bash -c '. ci/lib.sh; stage quick true' > "$log" 2>&1
[ $? -eq 0 ] || fail "a stage within its budget failed: $(cat "$log")"
ATTNCHECK_CI_BUDGET=on bash -c '. ci/lib.sh; stage quick bash -c "exit 3"' > "$log" 2>&1
[ $? -eq 3 ] || fail "a failing stage within its budget did not keep its exit status"
grep -q "CI budget" "$log" && fail "a stage within its budget printed a budget message"

ATTNCHECK_CI_BUDGET=off ATTNCHECK_CI_SLOW_STAGE=late=2 bash -c '. ci/lib.sh; stage late true' > "$log" 2>&1
[ $? -eq 0 ] || fail "a budget was enforced with ATTNCHECK_CI_BUDGET=off"
CI=false bash -c 'unset ATTNCHECK_CI_BUDGET; . ci/lib.sh; f() { sleep 2; }; stage late f' > "$log" 2>&1
[ $? -eq 0 ] || fail "a budget was enforced outside CI"

if [ "$fails" -ne 0 ]; then echo "budget_test: $fails failure(s)"; exit 1; fi
echo "budget_test: the table adds up ($sum s of stages within $total s) and the budget fails slow stages"
