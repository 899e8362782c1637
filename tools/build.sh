#!/usr/bin/env bash
# Configures and builds spar into build/ (extra CMake flags pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja "$@" >/dev/null
cmake --build build -j "$(nproc)"
