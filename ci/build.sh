#!/usr/bin/env bash
# Configures and builds attncheck in Release into build/ (warnings are errors under CI=true, see
# werror_flag in ci/lib.sh; ccache when installed), the Python package included (ci/setup.sh
# installs pybind11; a later -DATTNCHECK_PYTHON=OFF in the arguments turns it off).
# Usage: ci/build.sh [extra cmake -D options]
# Environment: ATTNCHECK_BUILD_DIR (default build), ATTNCHECK_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

dir=${ATTNCHECK_BUILD_DIR:-build}
# shellcheck disable=SC2046  # the flag lists are words
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DATTNCHECK_PYTHON=ON $(werror_flag) $(launcher_flags) "$@"
cmake --build "$dir" -j"$(jobs)"
