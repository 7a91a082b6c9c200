# ci/lib.sh — shared helpers of the ci/ scripts (sourced, not run).
#
# stage NAME CMD...  runs CMD, prints "== NAME" before and "== NAME: ok|FAILED (Ns)" after, and
# appends "NAME<TAB>seconds<TAB>status" to $ATTNCHECK_STAGE_LOG when set (.ci/run prints the
# table at the end). It returns CMD's exit status, so `set -e` callers stop at the first failure.

# The number of parallel build jobs: every core, unless the caller says otherwise.
jobs() { echo "${ATTNCHECK_JOBS:-$(nproc)}"; }

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
