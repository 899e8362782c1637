#!/usr/bin/env bash
# deploy/docker/spar-entrypoint.sh with stand-in daemons: the command lines
# it builds from LeaderWorkerSet variables, its refusals of bad input, and
# its process handling (SIGTERM reaches every daemon; a daemon's failure
# stops the others and becomes the exit status).
# usage: entrypoint_test.sh PATH/TO/spar-entrypoint.sh
set -uo pipefail
entry="$1"
fails=0 passes=0
check() {  # check NAME EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then passes=$((passes + 1)); else
    fails=$((fails + 1)); echo "FAIL $1: expected [$2] got [$3]" >&2; fi
}
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

out="$(SPAR_ENTRYPOINT_DRY_RUN=1 LWS_GROUP_SIZE=3 LWS_LEADER_ADDRESS=spar-0.spar.ns.svc.cluster.local bash "$entry" scheduler)"
check "scheduler workers from LWS" \
  "/opt/spar/bin/spar-scheduler --workers 127.0.0.1:50061\,spar-0-1.spar.ns.svc.cluster.local:50061\,spar-0-2.spar.ns.svc.cluster.local:50061 " "$out"
out="$(SPAR_ENTRYPOINT_DRY_RUN=1 SPAR_WORKERS=a:1,b:2 bash "$entry" scheduler)"
check "scheduler workers from SPAR_WORKERS" "/opt/spar/bin/spar-scheduler --workers a:1\,b:2 " "$out"
out="$(SPAR_ENTRYPOINT_DRY_RUN=1 LWS_GROUP_SIZE=2 LWS_WORKER_INDEX=1 SPAR_TP_SIZE=2 bash "$entry" stage)"
check "stage ranks" "/opt/spar/bin/spar-worker --stage 1 --stages 2 --tp-rank 0 --tp-size 2 --device 0 --port 50061 --metrics-port 9401 
/opt/spar/bin/spar-worker --stage 1 --stages 2 --tp-rank 1 --tp-size 2 --tp-leader 127.0.0.1:50061 --device 1 --port 50062 --metrics-port 9402 " "$out"
SPAR_ENTRYPOINT_DRY_RUN=1 LWS_GROUP_SIZE=2 LWS_WORKER_INDEX=2 bash "$entry" stage 2>/dev/null
check "stage index past the group refused" 2 $?
SPAR_ENTRYPOINT_DRY_RUN=1 SPAR_TP_SIZE=9 bash "$entry" stage 2>/dev/null
check "tp size 9 refused" 2 $?
SPAR_ENTRYPOINT_DRY_RUN=1 bash "$entry" scheduler 2>/dev/null
check "scheduler outside LWS without SPAR_WORKERS refused" 1 $?
bash "$entry" bogus 2>/dev/null
check "unknown role refused" 2 $?

# Stand-in worker: records its rank, exits 0 on SIGTERM (a drain), or
# exits 7 by itself when its rank is FAIL_RANK.
cat > "$dir/spar-worker" <<'W'
#!/usr/bin/env bash
rank="$6"
echo "$rank" >> "$LOG"
trap 'echo "term $rank" >> "$LOG"; exit 0' TERM
if [[ "$rank" == "${FAIL_RANK:-}" ]]; then sleep 0.5; exit 7; fi
while true; do sleep 0.05; done
W
chmod +x "$dir/spar-worker"
export LOG="$dir/log"
SPAR_BIN_DIR="$dir" SPAR_TP_SIZE=3 bash "$entry" stage &
pid=$!
for _ in $(seq 100); do [[ $(wc -l < "$LOG" 2>/dev/null || echo 0) -ge 3 ]] && break; sleep 0.05; done
kill -TERM "$pid"
wait "$pid"
check "SIGTERM: exit 0" 0 $?
check "SIGTERM reached every rank" 3 "$(grep -c '^term' "$LOG")"

: > "$LOG"
SPAR_BIN_DIR="$dir" SPAR_TP_SIZE=3 FAIL_RANK=1 timeout 20 bash "$entry" stage
check "a failed rank is the exit status" 7 $?
check "the other ranks were stopped" 2 "$(grep -c '^term' "$LOG")"

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
