# ci/lib.sh — shared helpers of the ci/ scripts (sourced, not run).
#
# stage NAME CMD...  runs CMD, prints "== NAME" before and "== NAME: ok|FAILED (Ns)" after, and
# appends "NAME<TAB>seconds<TAB>status" to $ATTNCHECK_STAGE_LOG when set (.ci/run prints the
# table at the end). It returns CMD's exit status, so `set -e` callers stop at the first failure.

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

stage() {
  local name=$1; shift
  local start rc=0 secs status
  start=$(date +%s)
  echo "== $name"
  "$@" || rc=$?
  secs=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ]; then status=ok; else status="FAILED(rc=$rc)"; fi
  echo "== $name: $status (${secs}s)"
  if [ -n "${ATTNCHECK_STAGE_LOG:-}" ]; then
    printf '%s\t%s\t%s\n' "$name" "$secs" "$status" >> "$ATTNCHECK_STAGE_LOG"
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
