#!/usr/bin/env bash
# Quick start: installs what is missing, builds, starts a local cluster on
# the embedded trained tiny GLM-5 (models/tiny-glm5-chat, see its
# PROVENANCE.md) (a spar-scheduler and 3
# pipeline-stage spar-workers on 127.0.0.1, one process each) serving it as
# "tiny-glm5" (the name README.md's examples send), streams a chat answer
# through the cluster's gRPC API, asks one through its OpenAI-compatible HTTP
# API, and stops the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
tools/build.sh -DCMAKE_BUILD_TYPE=Release
spar=build/services/cli/spar
model=models/tiny-glm5-chat/bf16

run=$(mktemp -d /tmp/spar-quickstart-XXXXXX)
"$spar" cluster --stages 3 --model "$model" --served-model-name tiny-glm5 --port 0 --port-file "$run/port" \
  --http-port 0 --http-port-file "$run/http.port" --log-dir "$run" >"$run/cluster.out" 2>&1 &
cluster=$!
# SIGTERM makes `spar cluster` stop its daemons; they also die with it.
trap 'kill "$cluster" 2>/dev/null || true; wait "$cluster" 2>/dev/null || true' EXIT
for _ in $(seq 1200); do
  [[ -s $run/port ]] && break
  if ! kill -0 "$cluster" 2>/dev/null; then
    cat "$run/cluster.out" >&2
    echo "quickstart: the cluster did not start (logs in $run)" >&2
    exit 1
  fi
  sleep 0.1
done
[[ -s $run/port ]] || { echo "quickstart: the cluster did not become ready (logs in $run)" >&2; exit 1; }
cat "$run/cluster.out"
# --chat: the prompt goes as a user message, rendered by the scheduler's
# chat template (the gRPC API's chat input).
"$spar" generate --server "127.0.0.1:$(cat "$run/port")" --chat --prompt "${1:-What is 12 plus 7?}" --max-tokens 16
for _ in $(seq 100); do [[ -s $run/http.port ]] && break; sleep 0.1; done
curl -sS "http://127.0.0.1:$(cat "$run/http.port")/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "tiny-glm5", "messages": [{"role": "user", "content": "What is 6 times 7?"}], "max_tokens": 16}'
echo
kill "$cluster"
wait "$cluster" || true
trap - EXIT
tail -n 1 "$run/cluster.out"
