#!/bin/bash
# A model the daemons cannot serve is refused at start-up with one clear
# line and a non-zero exit (real processes), before anything listens:
# a tokenizer whose ids exceed the model's vocabulary, a chat template that
# does not load or fails to render a one-message conversation, a config the
# engine cannot serve (spar-scheduler, spar-worker, and `spar cluster`
# passing the worker's line on). Then a good model still starts.
# usage: startup_checks_test.sh SPAR SPAR_WORKER SPAR_SCHEDULER
set -u
spar=$1 worker=$2 scheduler=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$spar" make-tiny --out "$dir/good" >/dev/null || { echo "make-tiny failed"; exit 1; }
failures=0

# A copy of the good model, changed by the python statement $2 (j: the
# parsed file $3 of the copy, written back).
variant() {
  local name=$1 code=$2 file=$3
  rm -rf "${dir:?}/$name"
  cp -r "$dir/good" "$dir/$name"
  python3 - "$dir/$name/$file" "$code" <<'EOF' || { echo "cannot make variant $name"; exit 1; }
import json, sys
path, code = sys.argv[1], sys.argv[2]
j = json.load(open(path))
exec(code)
json.dump(j, open(path, "w"), indent=2)
EOF
}

# expect CODE PATTERN CMD...: the command exits with CODE, and its stderr,
# apart from log lines ("I 1700000000.123 file.cc:12] ..."), is one line
# matching PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 2
  local err rc said lines
  err=$(timeout 60 "$@" 2>&1 >/dev/null)
  rc=$?
  said=$(grep -vE '^[DIWE] [0-9]+\.[0-9]{3} ' <<<"$err")
  lines=$(grep -c . <<<"$said")
  if [[ $rc -ne $code ]] || ! grep -qE -- "$pattern" <<<"$said" || [[ $lines -ne 1 ]]; then
    echo "FAIL: $* -> exit $rc (want $code), $lines line(s): $err (want one matching /$pattern/)"
    failures=$((failures + 1))
  else
    echo "ok: ${*:2} -> $rc: $said"
  fi
}
sched() { expect "$1" "$2" "$scheduler" --model "$3" --workers 127.0.0.1:1 --port 0 --http-port 0 --metrics-port -1 "${@:4}"; }

variant big_tokenizer 'j["added_tokens"].append({"id": 5000, "content": "<|beyond|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True})' tokenizer.json
sched 2 "^scheduler: .*/big_tokenizer/tokenizer.json has token ids up to 5000, beyond the model's vocabulary \(config.json vocab_size 320\)" "$dir/big_tokenizer"

variant raising_template 'j["chat_template"] = "{{ raise_exception(\"this template needs a system message\") }}"' tokenizer_config.json
sched 2 "^scheduler: chat template \(.*/raising_template/tokenizer_config.json\) fails to render a one-message conversation: .*this template needs a system message" "$dir/raising_template"

variant dropping_template 'j["chat_template"] = "{% for m in messages %}<turn>{% endfor %}"' tokenizer_config.json
sched 2 "^scheduler: chat template \(.*\) fails to render a one-message conversation: its prompt leaves the message out" "$dir/dropping_template"

variant broken_jinja 'pass' config.json
printf '{%% for m in messages %%}{{ m.content }' >"$dir/broken_jinja/chat_template.jinja"
sched 2 "^scheduler: chat template \(.*/broken_jinja/chat_template.jinja\): chat template line 1: unclosed" "$dir/broken_jinja"
sched 2 "^scheduler: chat template \(--chat-template $dir/missing.jinja\): cannot open" "$dir/good" --chat-template "$dir/missing.jinja"

variant latent_256 'j["kv_lora_rank"] = 256' config.json
sched 2 "^scheduler: .*/latent_256/config.json: spar needs kv_lora_rank 512, qk_rope_head_dim 64 and index_head_dim 128 \(the DSA cache layouts\); got 256, 64, 128$" "$dir/latent_256"
expect 2 "^worker: .*/latent_256/config.json: spar needs kv_lora_rank 512" "$worker" --model "$dir/latent_256" --layers 0:3 --port 0 --metrics-port -1
expect 1 "^cluster: the stage 0 worker exited with status 2: worker: .*/latent_256/config.json: spar needs kv_lora_rank 512.*\(log: " \
  "$spar" cluster --model "$dir/latent_256" --port 0 --http-port -1 --metrics-port -1 --log-dir "$dir/logs"

# The good model passes every check: the scheduler starts and serves until
# SIGTERM (no workers needed for that).
"$scheduler" --model "$dir/good" --workers 127.0.0.1:1 --port 0 --port-file "$dir/sched.port" --http-port 0 \
  --metrics-port -1 >/dev/null 2>"$dir/sched.err" &
pid=$!
for _ in $(seq 100); do [[ -s $dir/sched.port ]] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if [[ -s $dir/sched.port ]]; then
  echo "ok: the good model starts"
else
  echo "FAIL: the good model did not start: $(cat "$dir/sched.err")"
  failures=$((failures + 1))
fi
kill $pid 2>/dev/null
wait $pid 2>/dev/null

[[ $failures -eq 0 ]] || { echo "$failures failed"; exit 1; }
echo "every unservable model refused at start-up"
