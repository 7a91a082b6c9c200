# ci/lib.sh — shared helpers of the ci/ scripts (sourced, not run).
#
# stage NAME CMD...  runs CMD, prints "== NAME" before and "== NAME: ok|FAILED (Ns)" after, and
# appends "NAME<TAB>seconds<TAB>status<TAB>budget" to $ATTNCHECK_STAGE_LOG when set (.ci/run
# prints the table at the end). It returns CMD's exit status, so `set -e` callers stop at the
# first failure.
# A stage named in ci/budget.tsv has a time budget: when it is enforced (CI=true, or
# ATTNCHECK_CI_BUDGET=on; never with ATTNCHECK_CI_BUDGET=off), a stage still running at its
# budget is stopped, and one that ends past it fails, each with one line "CI budget: ...".

# The number of parallel build jobs: every core, unless the caller says otherwise.
jobs() { echo "${ATTNCHECK_JOBS:-$(nproc)}"; }

# The RapidCheck seed of the property tests in CI, the same as tests/properties/ci_params.hpp's
# default: CI is reproducible, and a red run replays with the same RC_PARAMS. Exploring new
# cases is `attncheck fuzz`'s job (a time-based seed, printed). ATTNCHECK_CI_SEED overrides.
ci_seed() { echo "${ATTNCHECK_CI_SEED:-20240611}"; }

# -DATTNCHECK_WERROR=ON|OFF for the ci/ builds. Warnings are errors in CI (CI=true), where a new
# warning must stop a change; a user's own run of the README's commands builds with warnings
# shown but not fatal, so that a compiler's false positive on an unusual CPU target (g++ 12 has
# several at some -march values) never stops a first build. ATTNCHECK_WERROR=ON|OFF overrides.
werror_flag() {
  local on=OFF
  [ "${CI:-}" = "true" ] && on=ON
  echo "-DATTNCHECK_WERROR=${ATTNCHECK_WERROR:-$on}"
}

# ccache, when installed (ci/setup.sh installs it), for every ci/ build: CI builds the project
# several times (tests, sanitizers, the examples' install, the gate's base commit), mostly from
# the same sources with the same flags. CCACHE_BASEDIR makes paths under the checkout relative,
# so a build of another commit in a folder of the same depth (the gate's base) hits the cache
# for every file the change left alone.
launcher_flags() {
  if [ "${ATTNCHECK_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
    echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  fi
}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# -march=native means another instruction set on another CPU, and ccache keys on the command
# line: hash what the compiler makes of native here (its version and every target option), so
# a cache carried to another machine never serves an object built for a different CPU. The
# output must be the same on every call: `g++ -v` prints its temporary file names, and a check
# with -v made every compilation a miss (0.97% hits over 6,700 compilations).
export CCACHE_COMPILERCHECK=${CCACHE_COMPILERCHECK:-"%compiler% -dumpfullversion; %compiler% -march=native -Q --help=target"}

ci_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# budget_of NAME: the budget of stage NAME in seconds (ci/budget.tsv, or the table named by
# ATTNCHECK_CI_BUDGET_FILE: the budget's own test uses one of tiny budgets), or nothing.
budget_of() {
  awk -F'\t' -v name="$1" '$1 !~ /^#/ && $1 == name { print $2; exit }' \
    "${ATTNCHECK_CI_BUDGET_FILE:-$ci_dir/budget.tsv}"
}

# Budgets are enforced in CI, where they keep the run inside its own 45 minutes; a person's own
# run of the scripts (another machine, other load) only sees the times.
budget_enforced() {
  case "${ATTNCHECK_CI_BUDGET:-}" in
    on) return 0 ;;
    off) return 1 ;;
  esac
  [ "${CI:-}" = "true" ]
}

# ATTNCHECK_CI_SLOW_STAGE=NAME=SECONDS makes stage NAME sleep that long before its command, inside
# its budget: the proof that a slow stage fails CI with the budget's message (docs/ci.md).
injected_sleep() {
  local spec=${ATTNCHECK_CI_SLOW_STAGE:-}
  [ "${spec%=*}" = "$1" ] && [ -n "${spec#*=}" ] && echo "${spec#*=}"
  return 0
}

stage() {
  local name=$1; shift
  local start rc=0 secs status budget="" slow
  budget=$(budget_of "$name")
  budget_enforced || budget=""
  slow=$(injected_sleep "$name")
  start=$(date +%s)
  echo "== $name${budget:+ (budget ${budget} s)}"
  [ -z "$slow" ] || echo "== $name: sleeping ${slow} s first (ATTNCHECK_CI_SLOW_STAGE)"
  if [ -n "$budget" ] && ! declare -F "$1" >/dev/null; then
    # timeout(1) leads its own process group and stops the whole tree (ctest and its tests).
    timeout --kill-after=20 "$budget" bash -c 'sleep "$0" && exec "$@"' "${slow:-0}" "$@" || rc=$?
  else
    # A shell function (a step inside a script) runs in this shell, and is judged when it ends.
    { [ -z "$slow" ] || sleep "$slow"; } && "$@" || rc=$?
  fi
  secs=$(( $(date +%s) - start ))
  if [ -n "$budget" ] && [ "$secs" -ge "$budget" ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
    echo "CI budget: stage $name stopped after ${secs} s: its budget is ${budget} s (ci/budget.tsv)"
    rc=124
  elif [ -n "$budget" ] && [ "$secs" -gt "$budget" ]; then
    echo "CI budget: stage $name took ${secs} s, over its budget of ${budget} s (ci/budget.tsv)"
    [ "$rc" -ne 0 ] || rc=1
  fi
  if [ "$rc" -eq 0 ]; then status=ok; else status="FAILED(rc=$rc)"; fi
  echo "== $name: $status (${secs}s${budget:+ of ${budget}})"
  if [ -n "${ATTNCHECK_STAGE_LOG:-}" ]; then
    printf '%s\t%s\t%s\t%s\n' "$name" "$secs" "$status" "$budget" >> "$ATTNCHECK_STAGE_LOG"
  fi
  return "$rc"
}

# The Python that has Debian's python3-scipy and python3-matplotlib (ci/setup.sh installs them):
# the system one, not whatever a virtualenv or pyenv puts first on PATH.
gate_python() {
  if [ -n "${ATTNCHECK_PYTHON:-}" ]; then echo "$ATTNCHECK_PYTHON"
  elif [ -x /usr/bin/python3 ]; then echo /usr/bin/python3
  else command -v python3; fi
}
