#!/usr/bin/env bash
# Worker tensor-parallel groups on two GPUs (device tool, kind nvidia-h200-x2;
# or `ctest -L gpu -R worker_tp_gpu` on a CUDA build): a spar-scheduler with
# one stage of two cuda spar-worker processes (TP 2: the leader on GPU 0, the
# peer on GPU 1, NCCL id handed out by the leader through Configure), against
# the same scheduler over one cuda worker (TP 1): greedy tokens compared per
# prompt (see below for what must be equal). Then the peer is killed: a request must end
# UNAVAILABLE promptly, and once the peer is back the stage serves the same
# tokens again. About a minute.
#
# Binaries: a bundle made here with
#   ../shared/scripts/bundle.sh .bundle-wtp build-cuda/services/cli/spar \
#       build-cuda/services/worker/spar-worker build-cuda/services/scheduler/spar-scheduler
# or SPAR_BIN / SPAR_WORKER_BIN / SPAR_SCHEDULER_BIN (what ctest passes).
# SPAR_WTP_BACKEND=cpu runs the same steps on the cpu backend (a check of
# this script on a machine without GPUs).
# Exit 0: equal; 1: a difference or failure; 77: fewer than two GPUs.
set -uo pipefail
if [[ -z ${SPAR_BIN:-} && -f .bundle-wtp/env.sh ]]; then
  source .bundle-wtp/env.sh
fi
spar=${SPAR_BIN:-.bundle-wtp/bin/spar}
worker=${SPAR_WORKER_BIN:-.bundle-wtp/bin/spar-worker}
scheduler=${SPAR_SCHEDULER_BIN:-.bundle-wtp/bin/spar-scheduler}
export NCCL_NVLS_ENABLE=0
backend=${SPAR_WTP_BACKEND:-cuda}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ $backend == cuda ]] && ((gpus < 2)); then
  echo "worker_tp_gpu: needs two GPUs, found ${gpus:-0}: skipped"
  exit 77
fi
out=${OUT:-$(mktemp -d /tmp/worker-tp-gpu.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d /tmp/worker-tp-gpu-run.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  return 0
}
trap 'cleanup; rm -rf "$work"' EXIT

model=$work/model
"$spar" make-tiny --arch glm5 --out "$model" --seed 11 > /dev/null || { echo "make-tiny failed"; exit 1; }

wait_file() {  # path, seconds
  for ((i = 0; i < $2 * 10; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done
  echo "timed out waiting for $1"; return 1
}

# start_stage NAME TP: a worker group (leader on GPU 0, peers on GPU r) and a
# scheduler over it; sets $sched_port, $peer_pid.
start_stage() {
  local name=$1 tp=$2
  "$worker" --host 127.0.0.1 --port 0 --port-file "$work/$name.w0" --model "$model" --stage 0 --stages 1 \
    --backend "$backend" --device 0 --tp-size "$tp" --num-blocks 64 --metrics-port 0 > "$out/$name.worker0.log" 2>&1 &
  pids+=($!)
  wait_file "$work/$name.w0" 60 || return 1
  leader=127.0.0.1:$(cat "$work/$name.w0")
  peer_pid=
  for ((r = 1; r < tp; r++)); do
    start_peer "$name" "$r" "$tp" || return 1
  done
  "$scheduler" --host 127.0.0.1 --port 0 --port-file "$work/$name.s" --model "$model" --workers "$leader" \
    --backend "$backend" --http-port -1 --metrics-port 0 --connect-timeout-s 120 > "$out/$name.scheduler.log" 2>&1 &
  pids+=($!)
  wait_file "$work/$name.s" 60 || return 1
  sched_port=$(cat "$work/$name.s")
  wait_ready
}
# Until the scheduler answers a one-token request (the stage has loaded and
# the pipeline is connected).
wait_ready() {
  for ((i = 0; i < 240; i++)); do
    "$spar" generate --server "127.0.0.1:$sched_port" --prompt-ids 1,2,3 --max-tokens 1 --timeout-s 10 \
      > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "the scheduler never served a request"; return 1
}
start_peer() {
  local name=$1 r=$2 tp=$3
  rm -f "$work/$name.w$r"
  "$worker" --host 127.0.0.1 --port 0 --port-file "$work/$name.w$r" --model "$model" --backend "$backend" --device "$r" \
    --tp-rank "$r" --tp-size "$tp" --tp-leader "$leader" --metrics-port 0 >> "$out/$name.worker$r.log" 2>&1 &
  peer_pid=$!
  pids+=($peer_pid)
  wait_file "$work/$name.w$r" 60
}

# Six prompts of 9..59 token ids (bash's seeded RANDOM: the same every run),
# the longer ones beyond the tiny model's index_topk (32).
prompts=()
RANDOM=11
for i in 0 1 2 3 4 5; do
  ids=$RANDOM
  for ((t = 1; t < i * 10 + 9; t++)); do ids+=",$((RANDOM % 288))"; done
  prompts+=("$((${ids%%,*} % 288)),${ids#*,}")
done
# generate NAME: greedy ids of every prompt, one line each, into $out/NAME.ids
generate() {
  local name=$1
  : > "$out/$name.ids"
  local i=0
  for p in "${prompts[@]}"; do
    # The whole answer is kept: a prompt without ids is diagnosed from it.
    "$spar" generate --server "127.0.0.1:$sched_port" --prompt-ids "$p" --max-tokens 24 --temperature 0 \
      --ignore-eos --show-ids --timeout-s 120 > "$out/$name.raw$i" 2>&1
    echo "exit $?" >> "$out/$name.raw$i"
    grep -a -E '^([0-9]+ )+$' "$out/$name.raw$i" | tail -1 >> "$out/$name.ids"
    ((i++))
  done
}

start_stage tp1 1 || { echo "TP 1 stage did not start"; exit 1; }
generate tp1
cleanup; pids=()
start_stage tp2 2 || { echo "TP 2 stage did not start"; exit 1; }
generate tp2

status=0
if [[ $(grep -c . "$out/tp1.ids") -ne ${#prompts[@]} ]]; then
  echo "TP 1 did not answer every prompt:"; cat "$out/tp1.ids"; status=1
fi
# On the cuda backend TP 2 sums bf16-rounded partial sums in another order
# than TP 1, and the random tiny model's router and indexer near-ties turn
# such rounding into different picks now and then (the engine-level
# tensor_parallel_gpu_test measures the same): so every prompt's first token
# must agree and the identical prefix of each continuation is reported; on
# the cpu backend (fp32, rank-order sums) all tokens must be identical.
diff "$out/tp1.ids" "$out/tp2.ids" > "$out/diff.txt"
same_prefix() {  # two lines of ids -> length of their common prefix
  local -a a=($1) b=($2); local n=0
  while ((n < ${#a[@]} && n < ${#b[@]})) && [[ ${a[n]} == "${b[n]}" ]]; do ((n++)); done
  echo $n
}
summary=""
mapfile -t l1 < "$out/tp1.ids"
mapfile -t l2 < "$out/tp2.ids"
for ((i = 0; i < ${#prompts[@]}; i++)); do
  n=$(same_prefix "${l1[i]:-}" "${l2[i]:-}")
  summary+=" $n/24"
  if [[ $backend == cpu ]] && ((n != 24)); then status=1; fi
  if ((n == 0)); then status=1; fi
done
echo "worker TP 2 vs TP 1, identical greedy prefix per prompt:$summary"
[[ $status == 0 ]] || { echo "worker TP 2 differs from TP 1 beyond rounding:"; cat "$out/diff.txt"; }

# The peer dies: a request fails promptly (UNAVAILABLE), then the group
# re-forms when it returns (the leader keeps its layers: it rejoins).
kill -9 "$peer_pid"
start=$(date +%s%N)
"$spar" generate --server "127.0.0.1:$sched_port" --prompt-ids "${prompts[0]}" --max-tokens 24 --temperature 0 \
  --timeout-s 30 > "$out/while_down.txt" 2>&1
rc=$?
took_ms=$((($(date +%s%N) - start) / 1000000))
echo "request with the peer gone: exit $rc after ${took_ms} ms: $(tail -1 "$out/while_down.txt")"
if [[ $rc -eq 0 ]] || ! grep -q "code 14" "$out/while_down.txt"; then
  echo "expected UNAVAILABLE (code 14) while the peer is gone"; status=1
fi
start_peer tp2 1 2 || status=1
wait_ready || status=1
generate tp2_again
if diff "$out/tp2.ids" "$out/tp2_again.ids" > /dev/null; then
  echo "after the peer came back: the same tokens as before it left"
else
  echo "after the peer came back: tokens differ"; diff "$out/tp2.ids" "$out/tp2_again.ids"; status=1
fi
grep -h "rejoined a tensor-parallel group\|tensor-parallel group of 2 formed" "$out"/tp2.worker0.log | tail -2

# Two pipeline stages, one GPU each: the hidden states cross as BF16 (lossless
# for the cuda backend), so the tokens must equal the one-stage TP 1 run's.
cleanup; pids=()
"$worker" --host 127.0.0.1 --port 0 --port-file "$work/pp.w1" --model "$model" --stage 1 --stages 2 \
  --backend "$backend" --device 1 --num-blocks 64 --metrics-port 0 > "$out/pp.worker1.log" 2>&1 &
pids+=($!)
"$worker" --host 127.0.0.1 --port 0 --port-file "$work/pp.w0" --model "$model" --stage 0 --stages 2 \
  --backend "$backend" --device 0 --num-blocks 64 --metrics-port 0 > "$out/pp.worker0.log" 2>&1 &
pids+=($!)
if wait_file "$work/pp.w0" 60 && wait_file "$work/pp.w1" 60; then
  "$scheduler" --host 127.0.0.1 --port 0 --port-file "$work/pp.s" --model "$model" \
    --workers "127.0.0.1:$(cat "$work/pp.w0"),127.0.0.1:$(cat "$work/pp.w1")" --backend "$backend" --http-port -1 \
    --metrics-port 0 --connect-timeout-s 120 > "$out/pp.scheduler.log" 2>&1 &
  pids+=($!)
  if wait_file "$work/pp.s" 60 && { sched_port=$(cat "$work/pp.s"); wait_ready; }; then
    generate pp2
    if diff "$out/tp1.ids" "$out/pp2.ids" > /dev/null; then
      echo "two pipeline stages (hidden states between them as the codec picks: BF16 on cuda): the same tokens as one stage"
    else
      echo "two pipeline stages: tokens differ from one stage"; diff "$out/tp1.ids" "$out/pp2.ids"; status=1
    fi
  else
    echo "the two-stage pipeline never served"; status=1
  fi
else
  echo "the two-stage workers did not start"; status=1
fi
exit $status
