#!/usr/bin/env bash
# Prefix caching on the cuda backend (device tool, kind nvidia-h200): time to
# first token of a request that shares a 4096-token prefix with an earlier
# one, on a spar-scheduler over one cuda spar-worker holding a GLM-5-geometry
# checkpoint (`spar make-tiny --geometry glm5-full --layers 4`: real layer
# sizes, random weights). Through the OpenAI HTTP API (token-id prompts,
# greedy, max_tokens 1, so the request time is the time to first token):
#   cached:   A = prefix + 64 tokens, then B = prefix + 64 other tokens;
#   uncached: the same on a scheduler started with --no-enable-prefix-caching.
# Prints the times (median of SPAR_TTFT_REPS fresh prefixes), the ratio
# B / A, and whether B's first 8 greedy tokens are the same on both.
# Binaries: a bundle .bundle-spec (spar, spar-worker, spar-scheduler);
# SPAR_TTFT_PREFIX overrides 4096; SPAR_TTFT_MODEL: an existing checkpoint
# (e.g. the one engine_bench --make-geometry glm5-full wrote). About 3 min.
set -uo pipefail
B=${SPAR_TTFT_BUNDLE:-.bundle-spec}
source "$B/env.sh"
out=${OUT:-/tmp/out}/prefix_ttft
mkdir -p "$out"
work=$(mktemp -d /tmp/prefix-ttft.XXXXXX)
model=${SPAR_TTFT_MODEL:-$work/model}
prefix=${SPAR_TTFT_PREFIX:-4096} reps=${SPAR_TTFT_REPS:-3}
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT
wait_file() { for ((i = 0; i < $2 * 10; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done; echo "timed out: $1"; return 1; }
if [[ -z ${SPAR_TTFT_MODEL:-} ]]; then
  "$B/bin/spar" make-tiny --geometry glm5-full --layers 4 --out "$model" > "$out/make.log" 2>&1 || { echo "make-tiny failed"; exit 1; }
fi
# start NAME [scheduler flags...]: one worker with every layer, a scheduler with HTTP.
start() {
  local name=$1; shift
  "$B/bin/spar-worker" --host 127.0.0.1 --port 0 --port-file "$work/$name.w" --model "$model" --stage 0 --stages 1 \
    --backend cuda --device 0 --num-blocks 512 --metrics-port 0 > "$out/$name.worker.log" 2>&1 &
  pids+=($!)
  wait_file "$work/$name.w" 300 || return 1
  "$B/bin/spar-scheduler" --host 127.0.0.1 --port 0 --port-file "$work/$name.s" --model "$model" \
    --workers "127.0.0.1:$(cat "$work/$name.w")" --http-port 0 --http-port-file "$work/$name.h" --metrics-port 0 \
    --connect-timeout-s 300 "$@" > "$out/$name.scheduler.log" 2>&1 &
  pids+=($!)
  wait_file "$work/$name.h" 300 || return 1
  http=$(cat "$work/$name.h")
  for ((i = 0; i < 600; i++)); do
    curl -sf "http://127.0.0.1:$http/v1/models" > "$work/models.json" && break
    sleep 0.5
  done
  served=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"][0]["id"])' "$work/models.json")
  # The HTTP API answers before the workers have loaded: wait for a request
  # that succeeds.
  for ((i = 0; i < 600; i++)); do
    [[ $(request "$(ids 8 900)" 1 | cut -d' ' -f1) != fail ]] && return 0
    sleep 0.5
  done
  echo "$name never served a request"; return 1
}
ids() {  # N SALT: N token ids
  python3 -c 'import sys; n, s = int(sys.argv[1]), int(sys.argv[2]); print(",".join(str((i * 7919 + s * 104729) % 150000 + 10) for i in range(n)))' "$1" "$2"
}
# request PROMPT_IDS MAX_TOKENS -> "seconds token,ids"
request() {
  printf '{"model": "%s", "prompt": [%s], "max_tokens": %d, "temperature": 0, "ignore_eos": true, "return_token_ids": true}' \
    "$served" "$1" "$2" > "$work/body.json"
  curl -s -o "$work/resp.json" -w '%{http_code} %{time_total}' -H 'Content-Type: application/json' \
    --data-binary @"$work/body.json" "http://127.0.0.1:$http/v1/completions" > "$work/t.txt"
  read -r code secs < "$work/t.txt"
  if [[ $code != 200 ]]; then echo "fail $code $(head -c 300 "$work/resp.json")"; return 0; fi
  echo "$secs $(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; print(",".join(map(str, c.get("token_ids") or [])) or c["text"].replace(" ", "_"))' "$work/resp.json" 2>/dev/null)"
}
run() {  # NAME: timings of A then B per rep, then B's 8 tokens
  local name=$1 r p a b
  : > "$out/$name.times"
  for ((r = 0; r < reps; r++)); do
    p=$(ids "$prefix" $((r + 1)))
    request "$(ids 8 900),$(ids 8 901)" 1 > /dev/null  # warm-up request, unrelated tokens
    a=$(request "$p,$(ids 64 $((100 + r)))" 1)
    b=$(request "$p,$(ids 64 $((200 + r)))" 1)
    [[ $a == fail* || $b == fail* ]] && { echo "$name: request failed: $a / $b"; exit 1; }
    echo "${a%% *} ${b%% *}" >> "$out/$name.times"
  done
  request "$(ids "$prefix" 1),$(ids 64 200)" 8 | cut -d' ' -f2 > "$out/$name.tokens"
}
start cached || exit 1
run cached
stop_all
start uncached --no-enable-prefix-caching || exit 1
run uncached
stop_all
python3 - "$out" "$prefix" <<'PY'
import statistics, sys
out, prefix = sys.argv[1], sys.argv[2]
for name in ("cached", "uncached"):
    rows = [tuple(map(float, l.split())) for l in open(f"{out}/{name}.times") if l.strip()]
    a = statistics.median(r[0] for r in rows); b = statistics.median(r[1] for r in rows)
    print(f"{name}: A (prefix {prefix} + 64) {a * 1e3:.1f} ms, B (same prefix + 64 others) {b * 1e3:.1f} ms, "
          f"B/A {b / a:.3f} (median of {len(rows)}; all: {rows})")
same = open(f"{out}/cached.tokens").read() == open(f"{out}/uncached.tokens").read()
print(f"B's first 8 greedy tokens cached == uncached: {same} ({open(f'{out}/cached.tokens').read().strip()})")
PY
