#!/usr/bin/env bash
# Runs on the GPU host (device tool), in one call of at most ~9.5 minutes:
# trains the MTP layer of models/tiny-glm5-chat on the frozen model
# (tools/train_tiny/train_mtp.py) and leaves bf16.tar.xz and fp8.tar.xz (the
# checkpoints with model.layers.3.*; splice_mtp.py adds the layer to the
# shipped checkpoints),
# results.tar (provenance-mtp.json: phases, acceptance for k = 1, 2, 3 on the
# chat evaluations, transformers parity) and the log in $OUT.
# Arguments go to train_mtp.py, e.g. --dense-seconds 200 --sparse-seconds 90.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
python3 tools/train_tiny/train_mtp.py --base-dir models/tiny-glm5-chat --out "$OUT" "$@" 2>&1 | tee "$OUT/log"
