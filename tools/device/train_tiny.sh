#!/usr/bin/env bash
# Runs on the GPU host (device tool), in one call of at most ~9.5 minutes:
# trains the tiny GLM-5 chat model and leaves bf16.tar, fp8.tar,
# tokenizer.tar, evals.tar, results.tar (goldens, provenance), probes.tar
# (the recall-recipe probes), ckpt.pt and the log in $OUT.
#   1. recall probes (PROBE_SECONDS, default 130): four variants of the
#      recall recipe (tools/train_tiny/recall_probe.py: key- or value-first
#      facts, with or without attention guidance) trained side by side from
#      the committed checkpoint; the best is picked (recall_probe.py pick);
#   2. train.py continues the picked variant's weights with its flags
#      through the dense, indexer and sparse phases, then exports,
#      evaluates and checks against transformers.
# Arguments go to train.py, e.g. --dense-seconds 190 --sparse-seconds 100.
# PROBE=0 skips the probes (train.py from the committed checkpoint);
# FRESH=1 starts from random weights and trains a new tokenizer (no probes).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
tt=tools/train_tiny
base=models/tiny-glm5-chat/bf16
resume=(--resume-dir "$base" --tokenizer-dir "$base")
picked=()
if [[ ${FRESH:-0} == 1 ]]; then
  resume=()
elif [[ ${PROBE:-1} == 1 ]]; then
  probes=$(mktemp -d)
  for v in kf:0:0 kf_guide:0:1 vf:1:0 vf_guide:1:1; do
    IFS=: read -r name vf guide <<<"$v"
    python3 $tt/recall_probe.py --name "$name" --value-first "$vf" --guide-weight "$guide" \
      --tokenizer-dir "$base" --resume-dir "$base" --out "$probes" --seconds "${PROBE_SECONDS:-130}" \
      >"$probes/$name.log" 2>&1 &
  done
  wait || true
  tail -n 3 "$probes"/*.log
  (cd "$probes" && tar cf "$OUT/probes.tar" ./*.log $(ls ./*.json 2>/dev/null))
  if choice=$(python3 $tt/recall_probe.py pick "$probes"); then
    read -r name flags <<<"$choice"
    echo "picked recall variant $name: $flags"
    resume=(--resume "$probes/$name.pt" --tokenizer-dir "$base" --resumed-from "recall probe $name")
    read -r -a picked <<<"$flags"
  else
    echo "no recall probe finished: train.py continues the committed checkpoint"
  fi
fi
python3 $tt/train.py --out "$OUT" "${resume[@]}" "${picked[@]}" "$@" 2>&1 | tee "$OUT/log"
