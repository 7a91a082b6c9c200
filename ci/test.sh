#!/usr/bin/env bash
# Runs the whole test suite of an existing build through ctest, with JUnit XML for CI systems.
# Usage: ci/test.sh [extra ctest arguments, e.g. -R model]
# Environment:
#   ATTNCHECK_BUILD_DIR  build folder (default build)
#   ATTNCHECK_CI_CASES   random cases per property (default 100 under CI=true, else the tests' own)
#   RC_PARAMS            RapidCheck's own settings; when unset: seed=$ATTNCHECK_CI_SEED (ci/lib.sh)
#                        and max_success=$ATTNCHECK_CI_CASES
# Writes out/test/junit.xml (path in ATTNCHECK_JUNIT).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

dir=${ATTNCHECK_BUILD_DIR:-build}
junit=${ATTNCHECK_JUNIT:-out/test/junit.xml}
mkdir -p "$(dirname "$junit")"

# The CI budget for the properties: enough random cases to find the planted bugs of the zoo,
# few enough that the suite ends in minutes on two cores. A local run without CI keeps the
# tests' own (larger) defaults unless the caller sets a budget.
if [ "${CI:-}" = "true" ] && [ -z "${ATTNCHECK_CI_CASES:-}" ]; then
  export ATTNCHECK_CI_CASES=100
fi
if [ -n "${ATTNCHECK_CI_CASES:-}" ] && [ -z "${RC_PARAMS:-}" ]; then
  # With a seed: RC_PARAMS without one makes RapidCheck draw a random seed, and CI then judged
  # different cases on every run.
  export RC_PARAMS="seed=$(ci_seed) max_success=${ATTNCHECK_CI_CASES}"
fi

ctest --test-dir "$dir" --output-on-failure --output-junit "$(realpath -m "$junit")" \
  -j"$(jobs)" "$@"
