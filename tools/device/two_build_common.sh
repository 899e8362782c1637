# What the two-build device scripts (w4_engine.sh, decode_kernel_ab.sh) share,
# sourced after they set NAME: the bundle's env (BUNDLE, default
# .bundle-$NAME) and B (its bin/), the logs folder OUT=/tmp/$NAME, archived on
# exit (a timeout's TERM included) to the caller's $OUT/$NAME.tgz, the GPU and
# its clocks in $OUT/gpu.txt, engine_rounds, glm5_grid, long_contexts,
# run_tests and engine_table.
BUNDLE=${BUNDLE:-.bundle-$NAME}
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
export SPAR_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
FINAL_OUT=${OUT:-/tmp/${NAME}_out}
OUT=/tmp/$NAME
rm -rf "$OUT"
mkdir -p "$OUT" "$FINAL_OUT"
# shellcheck disable=SC2064  # the paths are fixed now, on purpose
trap "tar czf '$FINAL_OUT/$NAME.tgz' -C /tmp '$NAME'" EXIT
trap 'exit 143' TERM
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader >"$OUT/gpu.txt" 2>&1

# bench SECONDS VARIANT ARGS...: the variant's engine_bench under a timeout:
# engine_bench_<BIN_<variant>, default the variant> with FLAGS_<variant>
# first, so a variant may be a flag of another build's binary.
bench() {
  local bin_var=BIN_$2 flags_var=FLAGS_$2
  local -a flags
  read -r -a flags <<<"${!flags_var:-}"
  timeout "$1" "$B/engine_bench_${!bin_var:-$2}" "${flags[@]}" "${@:3}"
}

# engine_rounds MAKER MAKE_FLAGS...: variant MAKER makes the checkpoint
# (MAKE_FLAGS: the --make-* flags) and runs once, then ROUNDS (2) rounds of
# the caller's array `variants` on it, interleaved; the common flags in the
# caller's array `args` (--model first). Logs engine_MAKER-0.log and
# engine_<variant>-R.log, rc lines in rc.txt.
engine_rounds() {
  bench 300 "$1" "${@:2}" "${args[@]}" >"$OUT/engine_$1-0.log" 2>&1
  echo "engine $1-0 (made the checkpoint) rc $?" >>"$OUT/rc.txt"
  for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
    for v in "${variants[@]}"; do
      bench 150 "$v" "${args[@]}" >"$OUT/engine_$v-$r.log" 2>&1
      echo "engine $v-$r rc $?" >>"$OUT/rc.txt"
    done
  done
}

# glm5_grid MAKER NAME: a GLM-5-geometry checkpoint of four layers at
# GLM5_MODEL (/dev/shm/NAME where /dev/shm has over 40 GB free, else
# /tmp/NAME), made by variant MAKER, then engine_rounds of the caller's
# `variants` on its layer 3 at 8K (BATCHES, default 1,8,64; the common flags
# left in `args`). The caller removes the checkpoint.
glm5_grid() {
  GLM5_MODEL=/tmp/$2
  [[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && GLM5_MODEL=/dev/shm/$2
  args=(--model "$GLM5_MODEL" --layers 3:4 --batches "${BATCHES:-1,8,64}" --contexts 8192)
  engine_rounds "$1" --make-geometry glm5-full --make-layers 4
}

# long_contexts VARIANT: VARIANT at batch 1 over the contexts LONG (default
# 32768,131072; empty skips) on GLM5_MODEL's layer 3, into engine_long.log.
long_contexts() {
  local long=${LONG-32768,131072}
  [[ -n $long ]] || return 0
  bench 240 "$1" --model "$GLM5_MODEL" --layers 3:4 --batches 1 --contexts "$long" >"$OUT/engine_long.log" 2>&1
  echo "engine long rc $?" >>"$OUT/rc.txt"
}

# run_tests 0|1: the bundle's test binaries (*_gpu_test, or *_gpu_test_<build>
# for one build's copy) that are not / are SLOW (default cuda_parity and
# speculative: run after the benchmarks, so a call cut short still brings the
# measurements back), each with the gtest filter FILTER_<name>_gpu_test if
# set; a line each in rc.txt.
slow=" ${SLOW:-cuda_parity_gpu_test speculative_gpu_test} "
run_tests() {
  for t in "$B"/*_gpu_test*; do
    name=$(basename "$t")
    base_name=${name%%_gpu_test*}_gpu_test
    [[ $slow == *" $base_name "* ]] && is_slow=1 || is_slow=0
    [[ $is_slow == "$1" ]] || continue
    filter_var=FILTER_${base_name}
    filter=()
    [[ -n ${!filter_var:-} ]] && filter=(--gtest_filter="${!filter_var}")
    timeout 240 "$t" "${filter[@]}" >"$OUT/$name.log" 2>&1
    echo "$name rc $? ok $(grep -c '^\[       OK \]' "$OUT/$name.log") failed $(grep -c '^\[  FAILED  \]' "$OUT/$name.log")" \
      >>"$OUT/rc.txt"
  done
}

# engine_table LOGS...: one row per grid point of each engine_bench log (the
# log's name as the run, context, batch, per-layer ms, roofline ms, % of
# roofline); missing logs are skipped.
engine_table() {
  echo "| run | context | batch | per-layer ms (graph) | roofline ms | % of roofline |"
  local f v
  for f in "$@"; do
    [[ -f $f ]] || continue
    v=$(basename "$f" .log)
    grep -E "^\| *[0-9]+ \| *[0-9]+ \| [0-9.]+ \|" "$f" |
      awk -F'|' -v v="$v" '{printf "| %s | %s | %s | %s | %s | %s |\n", v, $2, $3, $5, $10, $11}'
  done
}
