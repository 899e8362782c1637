#!/usr/bin/env bash
# Runs on the GPU host (device tool, one H200): a change's GPU check in one
# call, its binaries against the binaries of the commit before it.
#   1. every *_gpu_test of the new bundle (tools/device/gpu_suite.sh's table);
#   2. cuda_parity_gpu_test of both bundles (the numbers both print must agree);
#   3. engine_bench of both bundles on the same GLM-5-geometry checkpoint,
#      interleaved A B A B (batches and contexts from SPAR_AB_BATCHES /
#      SPAR_AB_CONTEXTS), then the new one with --op-profile at batch 1 and,
#      with SPAR_AB_LONG_CONTEXTS, at batch 1 and those contexts.
# The benchmarks run first (their time is known), then the tests.
# SPAR_AB_PARITY_BEFORE=0 skips the old bundle's cuda_parity_gpu_test (a
# change that moves rounding on purpose makes the comparison moot).
# 4. optional: SPAR_AB_INDEXER=1 indexer_bench's top-k section, SPAR_AB_HOP=1
#    tools/device/stage_hop_gpu.sh, SPAR_AB_EXTRA: more commands, one a line
#    (SPAR_AB_EXTRA_FIRST=1: before the tests).
# Bundles: .bundle-gpu (new; built with ../shared/scripts/bundle.sh from
# build/ with -DSPAR_CUDA_CODE=sm90) and .bundle-before (old: engine_bench and
# cuda_parity_gpu_test), each carried as a .tar.xz in .bundle-z/.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
# python3's tarfile reads .tar.xz whether or not the host has xz.
for z in .bundle-z/*.tar.xz; do
  d=.${z##*/}; d=${d%.tar.xz}; mkdir -p "$d"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$z" "$d"
done
export SPAR_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
summary=()
# Sections marked late are skipped once the call has run this long, so the
# logs still come back inside the device's per-call limit.
late() { (( SECONDS > ${SPAR_AB_LATE_S:-450} )) && { summary+=("skipped (late, ${SECONDS} s): $1"); return 0; }; return 1; }
# Extra commands, one a line of SPAR_AB_EXTRA (output in extra_N.log, files
# under $OUT/extra_N); after the tests, or with SPAR_AB_EXTRA_FIRST=1 right
# after the benchmarks.
run_extras() {
  local n=0 cmd
  while IFS= read -r cmd; do
    [[ -z $cmd ]] && continue
    n=$((n + 1))
    late "extra $n ($cmd)" && continue
    ( source .bundle-gpu/env.sh; OUT=$out/extra_$n; mkdir -p "$OUT"; export OUT; timeout ${SPAR_AB_EXTRA_TIMEOUT:-300} bash -c "$cmd" ) \
      > "$out/extra_$n.log" 2>&1
    summary+=("extra $n ($cmd): rc=$?")
  done <<< "${SPAR_AB_EXTRA:-}"
}
if [[ ${SPAR_AB_BENCH:-1} == 1 ]]; then
  m=/tmp/glm5full
  [[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 60 ]] && m=/dev/shm/glm5full
  b=${SPAR_AB_BATCHES:-1,64}; c=${SPAR_AB_CONTEXTS:-8192}
  ( source .bundle-gpu/env.sh; timeout 120 .bundle-gpu/bin/engine_bench --make-geometry glm5-full --make-layers 4 \
      --model $m --layers 3:4 --batches 1 --contexts 1024 --reps 3 > "$out/bench_make.log" 2>&1 )
  for round in $(seq 1 ${SPAR_AB_ROUNDS:-2}); do
    for side in before gpu; do
      ( source .bundle-$side/env.sh; timeout 200 .bundle-$side/bin/engine_bench --model $m --layers 3:4 \
          --batches $b --contexts $c ${SPAR_AB_BENCH_ARGS:-} > "$out/bench_${side}_$round.log" 2>&1 )
      summary+=("engine_bench $side round $round: rc=$?")
    done
  done
  ( source .bundle-gpu/env.sh; timeout 200 .bundle-gpu/bin/engine_bench --model $m --layers 3:4 --batches 1 \
      --contexts 8192 --op-profile > "$out/bench_op_profile.log" 2>&1 )
  # Long contexts at batch 1 (the new binary only).
  if [[ -n ${SPAR_AB_LONG_CONTEXTS:-} ]]; then
    ( source .bundle-gpu/env.sh; timeout 200 .bundle-gpu/bin/engine_bench --model $m --layers 3:4 --batches 1 \
        --contexts $SPAR_AB_LONG_CONTEXTS > "$out/bench_long.log" 2>&1 )
    summary+=("engine_bench long contexts: rc=$?")
  fi
fi
[[ ${SPAR_AB_EXTRA_FIRST:-0} == 1 ]] && run_extras
if [[ ${SPAR_AB_SUITE:-1} == 1 ]]; then
  for t in .bundle-gpu/bin/*_gpu_test; do
    name=$(basename "$t")
    [[ -n ${SPAR_AB_SKIP:-} && $name =~ ${SPAR_AB_SKIP} ]] && continue
    late "$name" && continue
    ( source .bundle-gpu/env.sh; timeout ${SPAR_AB_TEST_TIMEOUT:-240} "$t" > "$out/$name.log" 2>&1 )
    rc=$?
    pass=$(grep -c "^\[       OK \]" "$out/$name.log"); fail=$(grep -c "^\[  FAILED  \]" "$out/$name.log")
    skip=$(grep -c "^\[  SKIPPED \]" "$out/$name.log")
    summary+=("$(printf '%-34s rc=%-3s ok=%-4s failed=%-3s skipped=%s' "$name" "$rc" "$pass" "$fail" "$skip")")
    grep -E "^\[  FAILED|Failure" "$out/$name.log" | head -10
  done
  if [[ ${SPAR_AB_PARITY_BEFORE:-1} == 1 ]]; then
    ( source .bundle-before/env.sh; timeout 240 .bundle-before/bin/cuda_parity_gpu_test > "$out/parity_before.log" 2>&1 )
    summary+=("parity before: ok=$(grep -c '^\[       OK \]' "$out/parity_before.log") failed=$(grep -c '^\[  FAILED  \]' "$out/parity_before.log")")
    # The numbers both print (errors, agreements, graph-vs-eager counts) must match.
    grep -vE "^\[|ms\)|ms total|after [0-9.]+s|^rank 0 of 2" "$out/parity_before.log" | sort > "$out/parity_before.txt"
    grep -vE "^\[|ms\)|ms total|after [0-9.]+s|^rank 0 of 2" "$out/cuda_parity_gpu_test.log" | sort > "$out/parity_after.txt"
    if diff "$out/parity_before.txt" "$out/parity_after.txt" > "$out/parity_diff.txt"; then
      summary+=("parity printed numbers: identical before/after")
    else
      summary+=("parity printed numbers: DIFFER ($(wc -l < "$out/parity_diff.txt") lines, parity_diff.txt)")
    fi
  fi
fi
# Optional sections (late): the indexer benchmark's top-k table, two cuda
# stages on one GPU, and the extra commands.
if [[ ${SPAR_AB_INDEXER:-0} == 1 ]] && ! late "indexer_bench topk"; then
  ( source .bundle-gpu/env.sh; timeout 200 .bundle-gpu/bin/indexer_bench topk > "$out/indexer_topk.log" 2>&1 )
  summary+=("indexer_bench topk: rc=$?")
fi
if [[ ${SPAR_AB_HOP:-0} == 1 ]] && ! late "stage_hop_gpu"; then
  OUT=$out timeout 200 bash tools/device/stage_hop_gpu.sh > "$out/stage_hop.log" 2>&1
  summary+=("stage_hop_gpu: rc=$? $(tail -1 "$out/stage_hop.log")")
fi
[[ ${SPAR_AB_EXTRA_FIRST:-0} == 1 ]] || run_extras
for f in "$out"/bench_before_*.log "$out"/bench_gpu_*.log "$out"/bench_long.log; do
  [[ -f $f ]] && { echo "== $(basename $f)"; grep -E "^\| *[0-9]|rror" "$f" | head -8; }
done
[[ -f $out/indexer_topk.log ]] && { echo "== top-k"; grep -E "^(topk|[0-9]+ x)" "$out/indexer_topk.log" | head -40; }
echo "== summary =="
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
# At most 8 files come back from the device: the logs travel as one archive.
# (written outside $out first: tar refuses a directory that changes under it)
tgz=$(mktemp /tmp/ab_logs.XXXXXX.tgz)
( cd "$out" && tar czf "$tgz" --exclude summary.txt . ; find . -mindepth 1 ! -name summary.txt -delete )
mv "$tgz" "$out/logs.tgz"
