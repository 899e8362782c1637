#!/bin/bash
# Bad values of the flags added for capacity planning and chat output parsing
# end the process with a clear message and a usage-error exit code, before
# anything is loaded or served: `spar plan`, `spar-worker --stage-layers`,
# `spar-scheduler --reasoning-parser / --tool-call-parser`, and
# --num-speculative-tokens on every command that has it.
# usage: flag_errors_test.sh SPAR SPAR_WORKER SPAR_SCHEDULER
set -u
spar=$1 worker=$2 scheduler=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$spar" make-tiny --out "$dir/model" >/dev/null || { echo "make-tiny failed"; exit 1; }
failures=0

# expect CODE PATTERN CMD...: the command exits with CODE and its stderr matches PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 2
  local err rc
  err=$(timeout 60 "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAIL: $* -> exit $rc (want $code), stderr: $err (want /$pattern/)"
    failures=$((failures + 1))
  else
    echo "ok: ${*:2} -> $rc: $err"
  fi
}

expect 2 'exactly one of --model' "$spar" plan --model "$dir/model" --geometry glm5-full
expect 2 'exactly one of --model' "$spar" plan
expect 2 '--geometry must be glm5-full' "$spar" plan --geometry dsv32-full
expect 2 '"0" is not a positive token count' "$spar" plan --geometry glm5-full --contexts 8192,0
expect 2 '--tp and --stages must be at least 1' "$spar" plan --geometry glm5-full --tp 0
expect 2 'not contiguous from layer 0' "$spar" plan --geometry glm5-full --tp 8 --stage-layers 0:40,41:78
expect 2 'end at layer 70; the model has 78' "$spar" plan --geometry glm5-full --tp 8 --stage-layers 0:40,40:70
expect 1 'attention heads' "$spar" plan --geometry glm5-full --tp 3 --stages 2
expect 1 'does not fit: .*use more GPUs per stage' "$spar" plan --geometry glm5-full --tp 8
expect 1 'max model len 300000' "$spar" plan --geometry glm5-full --tp 8 --stages 2 --max-model-len 300000
expect 1 'config.json' "$spar" plan --model "$dir/missing"

expect 2 '^worker: --stage-layers: stage layers 0:1 end at layer 1; the model has 3' "$worker" --model "$dir/model" --stage 0 --stages 2 --stage-layers 0:1
expect 2 'names 3 stages, --stages 2' "$worker" --model "$dir/model" --stage 0 --stages 2 --stage-layers 0:1,1:2,2:3

expect 2 '--reasoning-parser must be auto, glm45, deepseek_v3 or none, got "hermes"' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --reasoning-parser hermes
expect 2 '--tool-call-parser must be auto, glm47, glm45 or none, got "qwen"' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --tool-call-parser qwen

# --num-speculative-tokens: 0 to 4 everywhere; a model without an MTP layer says so.
expect 2 '^worker: --num-speculative-tokens must be 0 \(off\) to 4' "$worker" --model "$dir/model" --num-speculative-tokens 5
expect 2 '^scheduler: --num-speculative-tokens must be 0 \(off\) to 4' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --num-speculative-tokens -1
expect 2 '^cluster: --num-speculative-tokens must be 0 \(off\) to 4' "$spar" cluster --model "$dir/model" --num-speculative-tokens 7
expect 2 '^generate: --num-speculative-tokens must be 0 \(off\) to 4, got 9' \
  "$spar" generate --model "$dir/model" --prompt hi --num-speculative-tokens 9
expect 2 'is the in-process engine' "$spar" generate --server 127.0.0.1:1 --prompt hi --num-speculative-tokens 2
expect 1 'num_nextn_predict_layers 0' "$spar" generate --model "$dir/model" --prompt hi --num-speculative-tokens 2

[[ $failures -eq 0 ]] || { echo "$failures failed"; exit 1; }
echo "all bad flags refused"
