#!/usr/bin/env bash
# README's second command: on a fresh Debian 12 machine, install the packages, build in Release
# (warnings as errors) and run the whole test suite through ctest (JUnit XML in out/test/).
# Usage: ci/tests.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh

stage setup ci/setup.sh
stage build ci/build.sh
stage test ci/test.sh "$@"
