#!/usr/bin/env bash
# Issue 21's engine targets for the FP8 GLM-5 MoE layer in one device call
# (one GPU, one build): batch 1 / 8 / 64 at 8K with the default weight layout
# (tiled across rows) and row-major interleaved (ROUNDS rounds), batch 1 at
# the long contexts (LONG, default 32768,131072), the batch-1 step's GPU
# timeline, then capacity_plan_gpu_test (it makes a GLM-5-geometry checkpoint
# of its own, so it runs with a longer limit than two_build_common's tests).
# Build (sm_90 from compute_80), copy engine_bench to /tmp/bXX/engine_bench_base
# and the test binary beside it, then
#   ../shared/scripts/bundle.sh .bundle-te /tmp/bXX/*
#   mkdir -p .bundle-z && tar cJf .bundle-z/te.tar.xz .bundle-te
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/te.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/targets_engine.sh
# Knobs: ROUNDS (2), BATCHES (1,8,64), LONG (32768,131072; empty: skip),
# CAPACITY (1; 0 skips the test), CAPACITY_S (300). Logs archived to
# $OUT/te.tgz; a table last.
set -uo pipefail
NAME=te
source tools/device/two_build_common.sh
variants=(base rm)
BIN_rm=base
FLAGS_rm='--weight-tiling row-major'
glm5_grid base glm5te
long_contexts base
bench 150 base --model "$GLM5_MODEL" --layers 3:4 --batches 1 --contexts 8192 --reps 5 --timeline >"$OUT/timeline.log" 2>&1
echo "timeline rc $?" >>"$OUT/rc.txt"
rm -rf "$GLM5_MODEL"
if [[ ${CAPACITY:-1} != 0 && -x $B/capacity_plan_gpu_test ]]; then
  timeout "${CAPACITY_S:-300}" "$B/capacity_plan_gpu_test" >"$OUT/capacity_plan_gpu_test.log" 2>&1
  echo "capacity_plan_gpu_test rc $? ok $(grep -c '^\[       OK \]' "$OUT/capacity_plan_gpu_test.log")" \
    "failed $(grep -c '^\[  FAILED  \]' "$OUT/capacity_plan_gpu_test.log")" >>"$OUT/rc.txt"
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
grep -hE "^prefill chunk" "$OUT"/engine_*-[0-9].log "$OUT/engine_long.log" 2>/dev/null
engine_table "$OUT"/engine_*-[0-9].log "$OUT/engine_long.log"
{ grep -E "timeline of|^span|^  idle" "$OUT/timeline.log" || echo "(no timeline)"; } | head -n 6
