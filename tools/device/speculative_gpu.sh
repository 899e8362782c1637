#!/usr/bin/env bash
# Runs on a one-GPU host (device tool, kind nvidia-h200): MTP speculative
# decoding on the cuda backend, in one call (~5 min):
#   1. speculative_gpu_test: greedy with --num-speculative-tokens 1..4 equals
#      plain greedy on cuda (bf16/FP8, glm5/dsv32 make-tiny with an MTP layer
#      that drafts well), verify and MTP steps replay as CUDA graphs;
#   2. `spar generate --backend cuda` with and without speculation on one
#      prompt (the same ids; drafted/accepted counts on stderr);
#   3. engine_bench --verify-tokens 2,3,4: verify steps against decode at
#      GLM-5 layer geometry, batch 1/8/32, 8K context (runs last).
# Needs the bundle built by
#   ../shared/scripts/bundle.sh .bundle-spec build/tests/kernels/speculative_gpu_test \
#       build/bench/engine/engine_bench build/services/cli/spar [build/tests/chat/tiny_chat_gpu_test \
#       build/services/worker/spar-worker build/services/scheduler/spar-scheduler]
#   4. with tiny_chat_gpu_test in the bundle: the trained tiny model's MTP layer,
#      greedy answers with k = 1..4 equal plain decoding on cuda;
#   5. with spar-worker and spar-scheduler in the bundle: 3 cuda stages on one
#      GPU with 3 speculative tokens against one plain stage, on the trained
#      model (tools/device/stage_hop_gpu.sh).
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
for v in bf16 fp8; do
  for k in 0 1 2 3 4; do
    timeout 60 $B/spar generate --model models/tiny-glm5-chat/$v --backend cuda --chat --max-tokens 64 --ignore-eos \
      --prompt "Remember: the key is blue. What is 17 + 25? Then repeat the key." --show-ids \
      --num-speculative-tokens $k > "$out/trained_${v}_k$k.log" 2>&1
    echo "trained $v k=$k rc=$? ids $(tail -1 "$out/trained_${v}_k$k.log" | md5sum | cut -c1-8) $(grep speculative "$out/trained_${v}_k$k.log")"
  done
done
if [[ -x $B/tiny_chat_gpu_test ]]; then
  timeout 240 $B/tiny_chat_gpu_test --gtest_filter='*Speculative*' > "$out/tiny_chat_spec.log" 2>&1
  echo "tiny_chat_gpu_test speculative: rc=$?"; grep -E "k=|OK|FAILED" "$out/tiny_chat_spec.log"
fi
if [[ -x $B/spar-worker && -x $B/spar-scheduler ]]; then
  SPAR_BIN=$B/spar SPAR_WORKER_BIN=$B/spar-worker SPAR_SCHEDULER_BIN=$B/spar-scheduler SPAR_HOP_STAGES=3 \
    SPAR_HOP_SPECULATIVE=3 SPAR_HOP_MODEL=$PWD/models/tiny-glm5-chat/fp8 OUT=$out timeout 240 \
    bash tools/device/stage_hop_gpu.sh 2>&1 | tail -3
fi
[[ ${SPAR_ENGINE_BENCH:-1} == 1 ]] || exit 0
m=/tmp/glm5full
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 60 ]] && m=/dev/shm/glm5full
timeout ${SPAR_BENCH_TIMEOUT:-300} $B/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 \
  --batches 1,8,32 --contexts 8192 --verify-tokens 2,3,4 ${SPAR_BENCH_ARGS:-} 2>&1 | tee "$out/bench_verify.log"
