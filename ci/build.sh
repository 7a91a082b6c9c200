#!/usr/bin/env bash
# Configures and builds attncheck in Release with warnings as errors, into build/.
# Usage: ci/build.sh [extra cmake -D options]
# Environment: ATTNCHECK_BUILD_DIR (default build), ATTNCHECK_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

dir=${ATTNCHECK_BUILD_DIR:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DATTNCHECK_WERROR=ON "$@"
cmake --build "$dir" -j"$(jobs)"
