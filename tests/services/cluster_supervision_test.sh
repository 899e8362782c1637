#!/bin/bash
# `spar cluster` supervises its daemons (real processes): a stage worker
# killed with SIGKILL is restarted on its port and the cluster answers again
# within 5 s, the restart is logged and counted by
# spar_cluster_worker_restarts_total on the cluster's metrics port; the same
# for the scheduler (back on its gRPC and HTTP ports, counted by
# spar_cluster_scheduler_restarts_total); SIGTERM still stops everything.
# The cluster runs with --served-model-name, --max-model-len and --api-key,
# which must reach the daemons (the key through the scheduler's environment,
# not its command line) and hold across the restarts.
# SPAR_TEST_TIME_SCALE stretches the 5 s (the sanitizer pass runs the
# daemons several times slower).
# usage: cluster_supervision_test.sh SPAR MODEL_DIR
set -u
spar=$1 model=$2
scale=${SPAR_TEST_TIME_SCALE:-1}
dir=$(mktemp -d)
cluster=
cleanup() {
  if [[ -n $cluster ]]; then
    kill "$cluster" 2>/dev/null
    wait "$cluster" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- cluster stdout"; cat "$dir/out"
  echo "--- cluster stderr"; cat "$dir/err"
  for f in "$dir"/logs/*.log; do echo "--- $f"; tail -n 20 "$f"; done
  exit 1
}
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

key=cluster-test-key
"$spar" cluster --stages 2 --model "$model" --served-model-name tiny-glm5 --max-model-len 512 --api-key "$key" \
  --port 0 --port-file "$dir/port" \
  --http-port 0 --http-port-file "$dir/http.port" --metrics-port 0 --metrics-targets-file "$dir/targets.json" \
  --log-dir "$dir/logs" >"$dir/out" 2>"$dir/err" &
cluster=$!
for _ in $(seq $((600 * scale))); do
  [[ -s $dir/port && -s $dir/targets.json ]] && break
  kill -0 "$cluster" 2>/dev/null || fail "the cluster did not start"
  sleep 0.1
done
[[ -s $dir/port && -s $dir/targets.json ]] || fail "the cluster did not become ready"
grpc=127.0.0.1:$(cat "$dir/port")
http=127.0.0.1:$(cat "$dir/http.port")
# The cluster's own target group is the last one.
metrics=$(grep -o '"targets": \["[^"]*"\]' "$dir/targets.json" | tail -n 1 | sed 's/.*\["\(.*\)"\]/\1/')
grep -q "\"job\": \"spar-cluster\"" "$dir/targets.json" || fail "no spar-cluster target in targets.json"

ask_grpc() {
  "$spar" generate --server "$grpc" --api-key "$key" --prompt "[gMASK]<sop><|user|>What is 12 plus 7?<|assistant|></think>" \
    --max-tokens 8 --temperature 0 2>/dev/null | grep -q '</think>19$'
}
ask_http() {
  curl -sf "http://$http/v1/chat/completions" -H 'Content-Type: application/json' -H "Authorization: Bearer $key" \
    -d '{"model": "tiny-glm5", "messages": [{"role": "user", "content": "What is 6 times 7?"}], "max_tokens": 16, "temperature": 0}' |
    grep -q '"content":"42"'
}
# The pid of the cluster's child whose command line matches $1.
child_pid() {
  local p
  for p in $(cat "/proc/$cluster/task/$cluster/children"); do
    tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "$1" && { echo "$p"; return; }
  done
}
metric() { curl -sf "http://$metrics/metrics" | grep "^$1 " | awk '{print $2}'; }
# Kills the child matching $1 with SIGKILL, then asks with $2 until it
# answers; fails past 5 s (scaled).
kill_and_recover() {
  local pattern=$1 ask=$2 what=$3 old new start elapsed
  old=$(child_pid "$pattern")
  [[ -n $old ]] || fail "no $what process"
  start=$(now_ms)
  kill -9 "$old"
  until $ask; do
    (($(now_ms) - start < 5000 * scale)) || fail "no answer within $((5 * scale)) s after $what was killed"
    sleep 0.05
  done
  elapsed=$(($(now_ms) - start))
  new=$(child_pid "$pattern")
  [[ -n $new && $new != "$old" ]] || fail "$what was not restarted (pid $old, now '$new')"
  echo "ok: $what (pid $old) killed; restarted as pid $new, answering again after $elapsed ms"
}

# The pass-through flags.
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://$http/v1/models") == 401 ]] || fail "the API key is not required"
models=$(curl -sf "http://$http/v1/models" -H "Authorization: Bearer $key")
grep -q '"id":"tiny-glm5"' <<<"$models" && grep -q '"max_model_len":512' <<<"$models" ||
  fail "--served-model-name / --max-model-len did not reach the scheduler: $models"
for p in $(cat "/proc/$cluster/task/$cluster/children"); do
  cmdline=$(tr '\0' ' ' <"/proc/$p/cmdline")
  grep -q -- "$key" <<<"$cmdline" && fail "the API key is on a daemon's command line: $cmdline"
  grep -q -- '--max-model-len 512' <<<"$cmdline" || fail "--max-model-len did not reach $cmdline"
done
echo "ok: --served-model-name, --max-model-len and --api-key reach the daemons (the key not on a command line)"

ask_grpc || fail "no answer before any fault"
ask_http || fail "no HTTP answer before any fault"
[[ $(metric 'spar_cluster_worker_restarts_total{rank="0",stage="1"}') == 0 ]] || fail "restart counter not at 0"

kill_and_recover 'worker-1.port' ask_grpc "the stage 1 worker"
grep -q 'the stage 1 worker (pid [0-9]*) killed by signal 9; restarting it in 500ms (restart 1;' "$dir/err" ||
  fail "the death was not logged"
grep -q 'restarted the stage 1 worker (pid [0-9]*, restart 1)' "$dir/err" || fail "the restart was not logged"
[[ $(metric 'spar_cluster_worker_restarts_total{rank="0",stage="1"}') == 1 ]] || fail "stage 1's restart not counted"
[[ $(metric 'spar_cluster_worker_restarts_total{rank="0",stage="0"}') == 0 ]] || fail "stage 0 counted a restart"
[[ $(metric 'spar_cluster_worker_up{rank="0",stage="1"}') == 1 ]] || fail "stage 1 not up again"
ask_http || fail "no HTTP answer after the worker came back"

kill_and_recover 'scheduler.port' ask_http "the scheduler"
ask_grpc || fail "no gRPC answer after the scheduler came back (same port)"
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://$http/v1/models") == 401 ]] ||
  fail "the restarted scheduler does not require the API key"
grep -q 'the scheduler (pid [0-9]*) killed by signal 9; restarting it in 500ms (restart 1;' "$dir/err" ||
  fail "the scheduler's death was not logged"
[[ $(metric spar_cluster_scheduler_restarts_total) == 1 ]] || fail "the scheduler's restart not counted"
[[ $(metric 'spar_cluster_worker_restarts_total{rank="0",stage="1"}') == 1 ]] || fail "the worker counter moved"

kill -TERM "$cluster"
wait "$cluster"
rc=$?
cluster=
[[ $rc -eq 0 ]] || fail "the cluster exited $rc on SIGTERM"
grep -q 'spar cluster: stopped' "$dir/out" || fail "no 'stopped' line"
echo "supervision holds"
