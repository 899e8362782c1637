#!/bin/bash
# Bad values of the flags added for capacity planning and chat output parsing
# end the process with a clear message and a usage-error exit code, before
# anything is loaded or served: `spar plan`, `spar-worker --stage-layers`,
# `spar-scheduler --reasoning-parser / --tool-call-parser`, the HTTP server's
# threads, connection cap and timeouts, the cache formats (--kv-cache-dtype,
# --indexer-cache-dtype: generate, worker, cluster, plan; also from the
# worker's SPAR_* environment), that `spar plan` sizes the cache by the
# format chosen, and --num-speculative-tokens on every command that has it.
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
expect 2 '--quant must be int4 or nvfp4, got "int8"' "$spar" plan --geometry glm5-full --tp 8 --quant int8
expect 2 '--quant goes with --geometry' "$spar" plan --model "$dir/model" --quant int4
expect 2 '--quant must be awq, gptq, int4-ct or nvfp4, got "int3"' "$spar" make-tiny --quant int3 --out "$dir/q"
expect 1 '--quant and --fp8 are different weight formats' "$spar" make-tiny --quant awq --fp8 --out "$dir/q"
# A 4-bit checkpoint whose config no longer describes its tensors is refused at load.
"$spar" make-tiny --quant awq --out "$dir/awq" >/dev/null || { echo "make-tiny --quant failed"; exit 1; }
sed -i 's/"zero_point": true/"zero_point": false/' "$dir/awq/config.json"
expect 1 'quantization_config.zero_point' "$spar" generate --model "$dir/awq" --prompt-ids 1,2 --max-tokens 1

expect 2 '^worker: --stage-layers: stage layers 0:1 end at layer 1; the model has 3' "$worker" --model "$dir/model" --stage 0 --stages 2 --stage-layers 0:1
expect 2 'names 3 stages, --stages 2' "$worker" --model "$dir/model" --stage 0 --stages 2 --stage-layers 0:1,1:2,2:3

expect 2 '--reasoning-parser must be auto, glm45, deepseek_v3 or none, got "hermes"' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --reasoning-parser hermes
expect 2 '--tool-call-parser must be auto, glm47, glm45, deepseek_v32 or none, got "qwen"' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --tool-call-parser qwen
expect 2 '--http-threads in \[1, 256\]' "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --http-threads 0
expect 2 '--http-max-connections and the --http-\*-timeout-s flags must be >= 1' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --http-max-connections 0
expect 2 '--http-max-connections and the --http-\*-timeout-s flags must be >= 1' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --http-header-timeout-s 0

expect 2 '^generate: --kv-cache-dtype must be auto, bf16, fp8 .*got "fp16"' \
  "$spar" generate --model "$dir/model" --prompt hi --kv-cache-dtype fp16
expect 2 '^generate: --indexer-cache-dtype must be auto, fp8, bf16 .*got "int8"' \
  "$spar" generate --model "$dir/model" --prompt hi --indexer-cache-dtype int8
expect 2 '^generate: the cuda backend has no fp32 cache kernels' \
  "$spar" generate --model "$dir/model" --prompt hi --backend cuda --kv-cache-dtype fp32
expect 2 '^worker: --kv-cache-dtype must be .*got "e5m2"' "$worker" --model "$dir/model" --kv-cache-dtype e5m2
expect 2 '^worker: --indexer-cache-dtype must be .*got "fp4"' \
  env SPAR_INDEXER_CACHE_DTYPE=fp4 "$worker" --model "$dir/model"
expect 2 '^cluster: --kv-cache-dtype must be .*got "half"' "$spar" cluster --model "$dir/model" --kv-cache-dtype half
expect 2 '^scheduler: --enable-prefix-caching needs true or false, got "maybe"' \
  "$scheduler" --model "$dir/model" --workers 127.0.0.1:1 --enable-prefix-caching=maybe
expect 2 'SPAR_NO_ENABLE_PREFIX_CACHING' env SPAR_NO_ENABLE_PREFIX_CACHING=2 "$scheduler" --model "$dir/model" --workers 127.0.0.1:1
expect 2 '^plan: --kv-cache-dtype must be .*got "fp6"' "$spar" plan --geometry glm5-full --tp 8 --kv-cache-dtype fp6
expect 2 '^plan: the cuda backend has no fp32 cache kernels' "$spar" plan --geometry glm5-full --tp 8 --kv-cache-dtype fp32

# spar plan sizes the cache by the format: 656-byte FP8 rows + 132-byte FP8
# keys = 788 bytes per token per layer (bf16 rows: 1152 + 132 = 1284).
plan_bytes() { "$spar" plan --geometry glm5-full --tp 8 --stages 2 "$@" | grep -oE '[0-9]+ bytes per token per layer'; }
for want in "788:--kv-cache-dtype fp8" "1284:" "1408:--indexer-cache-dtype bf16"; do
  got=$(plan_bytes ${want#*:})
  if [[ "$got" != "${want%%:*} bytes per token per layer" ]]; then
    echo "FAIL: spar plan ${want#*:}: \"$got\", want ${want%%:*} bytes per token per layer"
    failures=$((failures + 1))
  else
    echo "ok: spar plan ${want#*:}: $got"
  fi
done
fp8_tokens=$("$spar" plan --geometry glm5-full --tp 8 --stages 2 --kv-cache-dtype fp8 | grep -oE 'the pipeline holds [0-9]+' | grep -oE '[0-9]+$')
bf16_tokens=$("$spar" plan --geometry glm5-full --tp 8 --stages 2 | grep -oE 'the pipeline holds [0-9]+' | grep -oE '[0-9]+$')
if [[ -z "$fp8_tokens" || -z "$bf16_tokens" ]] || (( fp8_tokens * 100 < bf16_tokens * 150 )); then
  echo "FAIL: FP8 latent rows should hold ~1.6x the tokens of bf16: $fp8_tokens vs $bf16_tokens"
  failures=$((failures + 1))
else
  echo "ok: the pipeline holds $fp8_tokens tokens with FP8 latent rows, $bf16_tokens with bf16"
fi

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
