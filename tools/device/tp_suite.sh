#!/usr/bin/env bash
# Runs on a two-GPU host (device tool, kind nvidia-h200-x2): the tensor
# parallel test, the cuda parity test, and engine_bench at GLM-5 layer
# geometry on one GPU and on two (TP 2). Needs the bundle built by
#   ../shared/scripts/bundle.sh .bundle-tp build-cuda/tests/kernels/tensor_parallel_gpu_test \
#       build-cuda/tests/kernels/cuda_parity_gpu_test build-cuda/bench/engine/engine_bench
set -uo pipefail
source .bundle-tp/env.sh
export SPAR_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi -L | tee "$out/gpus.txt"
.bundle-tp/bin/tensor_parallel_gpu_test 2>&1 | tee "$out/tp_test.log" | grep -E "^\[|TP2" 
.bundle-tp/bin/cuda_parity_gpu_test 2>&1 | tee "$out/parity.log" | grep -E "FAILED|PASSED|tests ran|gpu-memory" | tail -12
[[ ${SPAR_TP_BENCH:-1} == 1 ]] || exit 0
# The checkpoint (~15 GB) goes to RAM when /dev/shm is large enough.
m=/tmp/glm5full
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && m=/dev/shm/glm5full
.bundle-tp/bin/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 \
  --batches 1,8,64 --context 8192 2>&1 | tee "$out/bench_tp1.log"
.bundle-tp/bin/engine_bench --model $m --layers 3:4 --batches 1,64 --context 8192 --latent fp8 2>&1 | tee "$out/bench_tp1_fp8.log"
rm -f /tmp/ncclid
.bundle-tp/bin/engine_bench --model $m --layers 3:4 --batches 1,8,64 --context 8192 --tp-size 2 --tp-rank 1 \
  --device 1 --nccl-id-file /tmp/ncclid > "$out/bench_tp2_rank1.log" 2>&1 &
.bundle-tp/bin/engine_bench --model $m --layers 3:4 --batches 1,8,64 --context 8192 --tp-size 2 --tp-rank 0 \
  --device 0 --nccl-id-file /tmp/ncclid 2>&1 | tee "$out/bench_tp2.log"
wait
cat "$out/bench_tp2_rank1.log" | tail -3
