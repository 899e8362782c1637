#!/usr/bin/env bash
# Runs on the GPU host (device tool): trains the tiny GLM-5 chat model and
# leaves bf16.tar, fp8.tar, tokenizer.tar, evals.tar, results.tar (goldens,
# provenance), ckpt.pt and the log in $OUT. Arguments go to train.py, e.g.
#   tools/device/train_tiny.sh --dense-seconds 300 --sparse-seconds 150
# continues from the committed checkpoint with its tokenizer (pass
# FRESH=1 to start from random weights and train a new tokenizer).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
resume=(--resume-dir models/tiny-glm5-chat/bf16 --tokenizer-dir models/tiny-glm5-chat/bf16)
[[ ${FRESH:-0} == 1 ]] && resume=()
python3 tools/train_tiny/train.py --out "$OUT" "${resume[@]}" "$@" 2>&1 | tee "$OUT/log"
