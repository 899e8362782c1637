#!/usr/bin/env bash
# Runs on a one-GPU host (device tool, kind nvidia-h200): MTP speculative
# decoding on the cuda backend, in one call (~5 min):
#   1. speculative_gpu_test: greedy with --num-speculative-tokens 1..4 equals
#      plain greedy on cuda (bf16/FP8, glm5/dsv32 make-tiny with an MTP layer
#      that drafts well), verify and MTP steps replay as CUDA graphs;
#   2. `spar generate --backend cuda` with and without speculation on one
#      prompt (the same ids; drafted/accepted counts on stderr);
#   3. engine_bench --verify-tokens 2,3,4: verify steps against decode at
#      GLM-5 layer geometry, batch 1/8/32, 8K context.
# Needs the bundle built by
#   ../shared/scripts/bundle.sh .bundle-spec build-cuda/tests/kernels/speculative_gpu_test \
#       build-cuda/bench/engine/engine_bench build-cuda/services/cli/spar
# SPAR_ENGINE_BENCH=0 skips the benchmark; SPAR_BENCH_ARGS adds engine_bench flags.
set -uo pipefail
source .bundle-spec/env.sh
B=.bundle-spec/bin
export SPAR_SOURCE_DIR=$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi -L | tee "$out/gpus.txt"
timeout ${SPAR_SPEC_TEST_TIMEOUT:-240} stdbuf -oL $B/speculative_gpu_test 2>&1 | tee "$out/speculative_gpu_test.log" |
  grep -E "FAILED|PASSED|OK|k=|first difference" | tail -30
timeout 30 $B/spar make-tiny --arch glm5 --mtp --predictable --out /tmp/tiny-mtp >/dev/null 2>&1
for k in 0 3; do
  timeout 60 $B/spar generate --model /tmp/tiny-mtp --backend cuda --prompt-ids 5,6,7,8,9 --max-tokens 32 --show-ids \
    --ignore-eos --num-speculative-tokens $k 2>&1 | tee "$out/generate_k$k.log" | tail -3
done
[[ ${SPAR_ENGINE_BENCH:-1} == 1 ]] || exit 0
m=/tmp/glm5full
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 60 ]] && m=/dev/shm/glm5full
timeout ${SPAR_BENCH_TIMEOUT:-300} $B/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 \
  --batches 1,8,32 --contexts 8192 --verify-tokens 2,3,4 ${SPAR_BENCH_ARGS:-} 2>&1 | tee "$out/bench_verify.log"
