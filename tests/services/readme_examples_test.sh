#!/bin/bash
# The OpenAI examples of README.md and services/README.md run as written
# (real processes): README.md's `spar cluster` line (moved to free ports:
# 8000 may be taken on a test machine), its curl command, and
# services/README.md's curl command and JavaScript client, each with the
# port put in for 8000. So a newcomer's copy-paste sends the model name the
# cluster serves.
# usage: readme_examples_test.sh SPAR SOURCE_DIR NODE NODE_MODULES
set -u
spar=$1 src=$2 node=$3 node_modules=$4
dir=$(mktemp -d)
cluster=
cleanup() {
  [[ -n $cluster ]] && { kill "$cluster" 2>/dev/null; wait "$cluster" 2>/dev/null; }
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$dir/cluster.out" 2>/dev/null; exit 1; }

# The first code block of `lang` after the line matching `marker` in `file`.
block() {
  awk -v marker="$2" -v fence="\`\`\`$3" '
    index($0, marker) { seen = 1 }
    seen && !on && $0 == fence { on = 1; next }
    on && $0 == "```" { exit }
    on { print }' "$1"
}

readme=$(block "$src/README.md" "The scheduler also serves the OpenAI API" sh)
start=$(grep '^spar cluster ' <<<"$readme" | sed 's/ &$//')
curl1=$(grep -A1 '^curl ' <<<"$readme")
services=$(block "$src/services/README.md" "Against the embedded tiny GLM-5" sh)
curl2=$(grep -A1 '^curl ' <<<"$services")
js=$(block "$src/services/README.md" "Against the embedded tiny GLM-5" js)
[[ -n $start && -n $curl1 && -n $curl2 && -n $js ]] || fail "an example is missing: cluster '$start', curl '$curl1', '$curl2', js '$js'"
grep -q -- '--served-model-name tiny-glm5' <<<"$start" || fail "README's cluster line does not serve tiny-glm5: $start"

# The README's own line, then free ports (later flags win).
cd "$src" || fail "no $src"
# exec: $! is then the cluster itself, which the cleanup stops (with its daemons).
eval "exec \"$spar\" ${start#spar } --port 0 --http-port 0 --http-port-file \"$dir/http.port\" --metrics-port -1 \
  --log-dir \"$dir/logs\"" >"$dir/cluster.out" 2>&1 &
cluster=$!
for _ in $(seq 600); do
  [[ -s $dir/http.port ]] && break
  kill -0 "$cluster" 2>/dev/null || fail "the cluster did not start"
  sleep 0.1
done
port=$(cat "$dir/http.port") || fail "no HTTP port"

run() {  # the example $1 with its port, through bash as a user's shell would run it
  bash -c "${1//127.0.0.1:8000/127.0.0.1:$port}" 2>/dev/null
}
out=$(run "$curl1")
grep -q '^data: \[DONE\]' <<<"$out" || fail "README's curl: no [DONE]: $out"
grep -q '"model":"tiny-glm5"' <<<"$out" || fail "README's curl: $out"
[[ $(grep -o '"content":"[^"]*"' <<<"$out" | sed 's/"content":"\(.*\)"/\1/' | tr -d '\n') == 42 ]] ||
  fail "README's curl did not stream 42: $out"
echo "ok: README.md's curl streams 42"
out=$(run "$curl2")
grep -q '"content":"42"' <<<"$out" || fail "services/README's curl: $out"
echo "ok: services/README.md's curl answers 42"

mkdir -p "$dir/js"
ln -s "$node_modules" "$dir/js/node_modules"
echo "${js//127.0.0.1:8000/127.0.0.1:$port}" >"$dir/js/chat.mjs"
out=$("$node" "$dir/js/chat.mjs" 2>&1) || fail "services/README's JavaScript failed: $out"
[[ $out == 42 ]] || fail "services/README's JavaScript printed '$out'"
echo "ok: services/README.md's JavaScript client streams 42"
echo "the examples run as written"
