#!/usr/bin/env bash
# Runs on a two-GPU host (device tool, kind nvidia-h200-x2): the cuda engine's
# GPU tests (parity with the cpu backend, decode CUDA graphs against eager
# steps, TP 2 against TP 1), `spar generate --backend cuda` streaming from a
# make-tiny model, and engine_bench at GLM-5 layer geometry on one GPU and
# on two (TP 2). Needs the bundle built by
#   ../shared/scripts/bundle.sh .bundle-engine build-cuda/tests/kernels/tensor_parallel_gpu_test \
#       build-cuda/tests/kernels/cuda_parity_gpu_test build-cuda/bench/engine/engine_bench \
#       build-cuda/services/cli/spar build-cuda/tests/kernels/tp_abort_gpu_test \
#       build-cuda/services/worker/spar-worker build-cuda/services/scheduler/spar-scheduler
# SPAR_ENGINE_BENCH=0 skips the benchmarks; SPAR_WORKER_TP=1 also runs
# tools/device/worker_tp_gpu.sh (worker TP groups through the services);
# SPAR_BENCH_ARGS adds engine_bench flags (e.g. --op-profile).
set -uo pipefail
source .bundle-engine/env.sh
B=.bundle-engine/bin
export SPAR_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi -L | tee "$out/gpus.txt"
timeout ${SPAR_PARITY_TIMEOUT:-170} stdbuf -oL $B/cuda_parity_gpu_test 2>&1 | tee "$out/parity.log" | grep -E "FAILED|PASSED|tests ran|decode steps|gpu-memory" | tail -20
timeout ${SPAR_TP_TIMEOUT:-90} stdbuf -oL $B/tensor_parallel_gpu_test 2>&1 | tee "$out/tp_test.log" | grep -E "^\[  |TP2" | tail -8
# A rank losing its peer: the blocked step released, teardown, a new group.
timeout ${SPAR_ABORT_TIMEOUT:-200} stdbuf -oL $B/tp_abort_gpu_test 2>&1 | tee "$out/tp_abort.log" | grep -E "^\[  |  [a-z_]+ = " | tail -14
if [[ ${SPAR_WORKER_TP:-0} == 1 ]]; then
  OUT=$out/worker_tp SPAR_BIN=$B/spar SPAR_WORKER_BIN=$B/spar-worker SPAR_SCHEDULER_BIN=$B/spar-scheduler \
    timeout ${SPAR_WORKER_TP_TIMEOUT:-200} bash tools/device/worker_tp_gpu.sh 2>&1 | tee "$out/worker_tp.log" | tail -8
fi
# The done-when of the cuda engine: tokens streamed from a make-tiny model on a GPU.
[[ ${SPAR_GENERATE:-1} == 1 ]] && timeout 30 $B/spar make-tiny --arch glm5 --out /tmp/tiny-glm5 >/dev/null 2>&1
[[ ${SPAR_GENERATE:-1} == 1 ]] && timeout 30 $B/spar generate --model /tmp/tiny-glm5 --backend cuda --prompt-ids 1,2,3,4,5 --max-tokens 24 --show-ids \
  --temperature 0 2>&1 | tee "$out/generate_cuda.log" | tail -3
[[ ${SPAR_GENERATE:-1} == 1 ]] && timeout 30 $B/spar generate --model /tmp/tiny-glm5 --backend cuda --prompt-ids 1,2,3,4,5 --max-tokens 24 --show-ids \
  --temperature 0 --enforce-eager 2>&1 | tail -1 | sed 's/^/eager: /'
[[ ${SPAR_ENGINE_BENCH:-1} == 1 ]] || exit 0
# The checkpoint (4 real-size layers, ~40 GB) goes to RAM when /dev/shm is large enough.
m=/tmp/glm5full
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 60 ]] && m=/dev/shm/glm5full
timeout ${SPAR_BENCH_TIMEOUT:-200} $B/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 \
  --batches ${SPAR_BENCH_BATCHES:-1,8,32,128} --contexts ${SPAR_BENCH_CONTEXTS:-1024,8192,32768} ${SPAR_BENCH_ARGS:-} 2>&1 | tee "$out/bench_tp1.log"
[[ ${SPAR_BENCH_FP8:-0} == 1 ]] && $B/engine_bench --model $m --layers 3:4 --batches 1,64 --contexts 8192 --latent fp8 2>&1 | tee "$out/bench_tp1_fp8.log"
rm -f /tmp/ncclid
timeout ${SPAR_TP_BENCH_TIMEOUT:-110} $B/engine_bench --model $m --layers 3:4 --batches 1,64 --contexts 8192 --tp-size 2 --tp-rank 1 \
  --device 1 --nccl-id-file /tmp/ncclid ${SPAR_BENCH_ARGS:-} > "$out/bench_tp2_rank1.log" 2>&1 &
timeout ${SPAR_TP_BENCH_TIMEOUT:-110} $B/engine_bench --model $m --layers 3:4 --batches 1,64 --contexts 8192 --tp-size 2 --tp-rank 0 \
  --device 0 --nccl-id-file /tmp/ncclid ${SPAR_BENCH_ARGS:-} 2>&1 | tee "$out/bench_tp2.log"
wait
tail -3 "$out/bench_tp2_rank1.log"
