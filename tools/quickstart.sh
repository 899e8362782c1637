#!/usr/bin/env bash
# Quick start: installs what is missing, builds, writes the embedded tiny
# GLM-5 model and streams a completion from it through the in-process engine.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
tools/build.sh -DCMAKE_BUILD_TYPE=Release
model=build/models/tiny-glm5
[[ -f $model/config.json ]] || build/services/cli/spar make-tiny --arch glm5 --out "$model"
build/services/cli/spar generate --model "$model" --prompt "${1:-The capital of France is}" --max-tokens 32
