#!/usr/bin/env bash
# Two pipeline stages of the cuda backend on ONE GPU (device tool, kind
# nvidia-h200): a spar-scheduler over two cuda spar-worker processes (stage 0
# and stage 1, both on GPU 0; hidden states cross the hop as the cuda
# backend's bf16 bytes) against the same scheduler over one cuda worker
# holding every layer. Greedy ids of six prompts (beyond the tiny model's
# index_topk) must be identical: the hop is exact. About 40 s.
#
# Options: SPAR_HOP_STAGES (default 2) stages in the second run;
# SPAR_HOP_SPECULATIVE=K (default 0) runs the second configuration with MTP
# speculative decoding (--num-speculative-tokens K on the scheduler and the
# workers; the MTP layer on the last stage), so the ids must equal plain
# decoding's; SPAR_HOP_MODEL: a model directory instead of a make-tiny one
# (e.g. models/tiny-glm5-chat/fp8, which has a trained MTP layer).
# Binaries: SPAR_BIN / SPAR_WORKER_BIN / SPAR_SCHEDULER_BIN, or a bundle
# .bundle-gpu with spar, spar-worker and spar-scheduler.
# Exit 0: identical; 1: a difference or failure.
set -uo pipefail
[[ -z ${SPAR_BIN:-} && -f .bundle-gpu/env.sh ]] && source .bundle-gpu/env.sh
spar=${SPAR_BIN:-.bundle-gpu/bin/spar}
worker=${SPAR_WORKER_BIN:-.bundle-gpu/bin/spar-worker}
scheduler=${SPAR_SCHEDULER_BIN:-.bundle-gpu/bin/spar-scheduler}
backend=${SPAR_HOP_BACKEND:-cuda}
out=${OUT:-$(mktemp -d /tmp/stage-hop.XXXXXX)}/stage_hop
mkdir -p "$out"
work=$(mktemp -d /tmp/stage-hop-run.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  pids=()
  return 0
}
trap 'cleanup; rm -rf "$work"' EXIT
stages_b=${SPAR_HOP_STAGES:-2} spec=${SPAR_HOP_SPECULATIVE:-0}
model=${SPAR_HOP_MODEL:-$work/model}
if [[ -z ${SPAR_HOP_MODEL:-} ]]; then
  mtp=(); (( spec > 0 )) && mtp=(--mtp --predictable)
  "$spar" make-tiny --arch glm5 --out "$model" --seed 12 "${mtp[@]}" > /dev/null || { echo "make-tiny failed"; exit 1; }
fi
wait_file() {  # path, seconds
  for ((i = 0; i < $2 * 10; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done
  echo "timed out waiting for $1"; return 1
}
# start NAME STAGES [K]: STAGES workers on GPU 0 and a scheduler over them,
# with K speculative tokens (default 0).
start() {
  local name=$1 stages=$2 addrs="" k=${3:-0}
  local specf=(); (( k > 0 )) && specf=(--num-speculative-tokens "$k")
  for ((s = 0; s < stages; s++)); do
    "$worker" --host 127.0.0.1 --port 0 --port-file "$work/$name.w$s" --model "$model" --stage "$s" \
      --stages "$stages" --backend "$backend" --device 0 --num-blocks 64 --metrics-port 0 "${specf[@]}" \
      > "$out/$name.worker$s.log" 2>&1 &
    pids+=($!)
    wait_file "$work/$name.w$s" 90 || return 1
    addrs+="${addrs:+,}127.0.0.1:$(cat "$work/$name.w$s")"
  done
  "$scheduler" --host 127.0.0.1 --port 0 --port-file "$work/$name.s" --model "$model" --workers "$addrs" \
    --http-port -1 --metrics-port 0 --connect-timeout-s 120 "${specf[@]}" > "$out/$name.scheduler.log" 2>&1 &
  pids+=($!)
  wait_file "$work/$name.s" 90 || return 1
  port=$(cat "$work/$name.s")
  for ((i = 0; i < 240; i++)); do
    "$spar" generate --server "127.0.0.1:$port" --prompt-ids 1,2,3 --max-tokens 1 --timeout-s 10 >/dev/null 2>&1 &&
      return 0
    sleep 0.5
  done
  echo "$name never served a request"; return 1
}
prompts=()
RANDOM=12
for i in 0 1 2 3 4 5; do
  ids=$((RANDOM % 288))
  for ((t = 1; t < i * 12 + 9; t++)); do ids+=",$((RANDOM % 288))"; done
  prompts+=("$ids")
done
generate() {  # NAME: one line of greedy ids per prompt into $out/NAME.ids
  : > "$out/$1.ids"
  local i=0
  for p in "${prompts[@]}"; do
    "$spar" generate --server "127.0.0.1:$port" --prompt-ids "$p" --max-tokens 24 --temperature 0 --ignore-eos \
      --show-ids --timeout-s 120 > "$out/$1.raw$i" 2>&1
    grep -a -E '^([0-9]+ )+$' "$out/$1.raw$i" | tail -1 >> "$out/$1.ids"
    ((i++))
  done
}
start one 1 || { echo "one stage did not start"; exit 1; }
generate one
cleanup
start two "$stages_b" "$spec" || { echo "$stages_b stages did not start"; exit 1; }
generate two
if [[ $(grep -c . "$out/one.ids") -ne ${#prompts[@]} ]]; then echo "one stage did not answer every prompt"; exit 1; fi
if diff "$out/one.ids" "$out/two.ids" > "$out/diff.txt"; then
  echo "stage_hop_gpu: $stages_b $backend stages on one GPU$( ((spec > 0)) && echo " with $spec speculative tokens") == one stage: ${#prompts[@]}/${#prompts[@]} prompts, 24 greedy ids each"
  exit 0
fi
echo "stage_hop_gpu: DIFFERENT"; cat "$out/diff.txt"; exit 1
