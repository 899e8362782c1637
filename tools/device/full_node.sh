#!/usr/bin/env bash
# Issue 12 on one node of N GPUs (device tool: kind nvidia-h200-x8 for the
# issue, N = 8; on the lent nvidia-h200-x4 it runs the same steps with N = 4):
# GLM-5 geometry with random FP8 weights,
#   1. engine_bench TP/EP N (one process per GPU, NCCL): decode at contexts
#      x batches, prefill, per-layer time and all-reduce time, over
#      $SPAR_FULL_LAYERS real-size MoE layers (default 24). Each GPU holds
#      ~1.3 GB of FP8 weights per layer at TP/EP 8, and the bench sizes its
#      caches from its batch x context grid (1284 B per token per layer,
#      replicated on every rank): keep both within an A100-80GB (24 layers,
#      128 sequences x 8K: ~31 GB of weights + ~32 GB of caches);
#   2. the served path: `spar cluster --backend cuda` with 2 pipeline stages of
#      TP N/2 (loopback gRPC between the stages, like two nodes) against one
#      TP 1 worker on a 4-layer checkpoint: greedy tokens per prompt (first
#      token equal, identical prefixes reported: bf16 partial sums, see
#      worker_tp_gpu.sh), then the workers' /metrics: stage busy fraction and
#      activation transfer time.
# Binaries: ../shared/scripts/bundle.sh .bundle-full build-cuda/bench/engine/engine_bench \
#   build-cuda/services/cli/spar build-cuda/services/worker/spar-worker build-cuda/services/scheduler/spar-scheduler
set -uo pipefail
source .bundle-full/env.sh
B=.bundle-full/bin
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
gpus=$(nvidia-smi -L | grep -c '^GPU')
n=${SPAR_FULL_GPUS:-$gpus}
((n >= 4 && n % 2 == 0 && n <= gpus)) || { echo "full_node: needs an even number >= 4 of GPUs, found $gpus"; exit 77; }
layers=${SPAR_FULL_LAYERS:-24}
m=/dev/shm/glm5full
# 1. TP/EP N engine bench over layers [3, 3 + layers) (layer 3 is GLM-5's first MoE layer).
$B/engine_bench --make-geometry glm5-full --make-layers $((3 + layers)) --model $m --layers 3:4 --batches 1 \
  --contexts 1024 > /dev/null 2>&1  # writes the checkpoint once
rm -f /tmp/ncclid
for ((r = n - 1; r >= 0; r--)); do
  timeout ${SPAR_FULL_BENCH_TIMEOUT:-400} $B/engine_bench --model $m --layers 3:$((3 + layers)) \
    --batches ${SPAR_FULL_BATCHES:-1,8,32,128} --contexts ${SPAR_FULL_CONTEXTS:-8192} --tp-size $n --tp-rank $r \
    --device $r --nccl-id-file /tmp/ncclid ${SPAR_FULL_BENCH_ARGS:-} > "$out/tp${n}_rank$r.log" 2>&1 &
done
wait
cat "$out/tp${n}_rank0.log"
# 2. Two stages of TP N/2 on one node vs one TP 1 worker, served.
small=/dev/shm/glm5full4
$B/engine_bench --make-geometry glm5-full --make-layers 4 --model $small --layers 3:4 --batches 1 --contexts 1024 \
  > /dev/null 2>&1
prompts=("1,2,3,4,5,6,7,8,9" "11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35")
serve() {  # NAME STAGES TP
  local name=$1 stages=$2 tp=$3
  mkdir -p "$out/$name-logs"  # spar cluster writes the daemons' logs there, it does not create it
  $B/spar cluster --model $small --backend cuda --stages "$stages" --tp-size "$tp" --port 0 \
    --port-file "/tmp/$name.port" --http-port -1 --metrics-port 0 --metrics-targets-file "/tmp/$name.targets" \
    --num-blocks 512 --log-dir "$out/$name-logs" > "$out/$name.cluster.log" 2>&1 &
  cluster_pid=$!
  for ((i = 0; i < 180; i++)); do [[ -s /tmp/$name.port ]] && break; sleep 1; done
  : > "$out/$name.ids"
  for p in "${prompts[@]}"; do
    $B/spar generate --server 127.0.0.1:$(cat /tmp/$name.port) --prompt-ids "$p" --max-tokens 32 --temperature 0 \
      --ignore-eos --show-ids --timeout-s 150 2>&1 | grep -a -E '^([0-9]+ )+$' | tail -1 >> "$out/$name.ids"
  done
  # Stage busy fraction and activation transfer from every worker's /metrics.
  for t in $(grep -o '127.0.0.1:[0-9]*' "/tmp/$name.targets" 2>/dev/null); do
    curl -s "http://$t/metrics" | grep -E '^spar_(stage_busy|activation_transfer_seconds_(sum|count)|nccl_allreduce_seconds_(sum|count))' \
      | sed "s|^|$name $t |" >> "$out/$name.metrics.txt"
  done
  kill $cluster_pid; wait $cluster_pid 2>/dev/null
}
serve tp1 1 1
serve pp2tp$((n / 2)) 2 $((n / 2))
echo "greedy ids, TP 1 then 2 stages x TP $((n / 2)), per prompt:"
paste -d'\n' "$out/tp1.ids" "$out/pp2tp$((n / 2)).ids"
cat "$out/pp2tp$((n / 2)).metrics.txt"
