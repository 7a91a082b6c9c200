#!/usr/bin/env bash
# Installs the Debian packages attncheck needs (idempotent; uses sudo when not root).
# Usage: ci/setup.sh
set -euo pipefail

packages=(
  build-essential cmake ccache git
  libxtensor-dev libxsimd-dev xtl-dev
  librapidcheck-dev catch2 libbenchmark-dev libbenchmark-tools
  nlohmann-json3-dev libcli11-dev libhwy-dev
  libomp-dev clang
  python3 python3-scipy python3-numpy python3-matplotlib
  python3-dev pybind11-dev python3-pytest python3-torch
  python3-yaml python3-jsonschema
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
