#!/usr/bin/env bash
# The main job: install, build, make a small model and show it (logits, a masked attention
# matrix), then run the whole check, `attncheck fuzz` (every built-in kernel and both decoders).
# Usage: ci/main.sh [extra `attncheck fuzz` flags]
set -euo pipefail
cd "$(dirname "$0")/.."

ci/setup.sh
ci/build.sh

bin=build/cli/attncheck
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== attncheck init --preset tiny --seed 1"
"$bin" init --out "$work/tiny.safetensors" --preset tiny --seed 1
echo "== attncheck logits (reference, teacher-forced)"
"$bin" logits --model "$work/tiny.safetensors" --tokens 3,1,4,1,5
echo "== attncheck explain (layer 0, head 0)"
"$bin" explain --model "$work/tiny.safetensors" --tokens 3,1,4,1,5 --layer 0 --head 0
echo "== attncheck fuzz $*"
"$bin" fuzz "$@"
