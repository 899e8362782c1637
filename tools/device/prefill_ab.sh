#!/usr/bin/env bash
# Prefill A/B of two engine_bench builds (engine_bench_before / _after in
# .bundle-pab, carried as .bundle-x/pab.tar.xz, a tar of the folder:
# tools/device/bundle_setup.sh), interleaved over ROUNDS (2), at the
# prefill chunks CHUNKS (2048,4096) of one GLM-5 MoE layer (batch 1, context
# CONTEXT, decode timed too), with the tests TESTS names (gtest binaries in
# the bundle, each "binary:filter") first; VARIANTS ("before after") names
# the engine_bench_<v> builds to interleave. Logs under $OUT/pab.
set -uo pipefail
out=${OUT:-/tmp/out}/pab
mkdir -p "$out"
BUNDLE=${BUNDLE:-.bundle-pab}
source tools/device/bundle_setup.sh
export NCCL_NVLS_ENABLE=0
for t in ${TESTS:-}; do
  bin=${t%%:*}; filt=${t#*:}; [[ $filt == "$t" ]] && filt='*'
  timeout 240 $B/$bin --gtest_filter="$filt" > $out/$bin.log 2>&1
  echo "$bin rc=$? ok=$(grep -c '^\[       OK \]' $out/$bin.log) failed=$(grep -c '^\[  FAILED  \]' $out/$bin.log) skipped=$(grep -c '^\[  SKIPPED \]' $out/$bin.log) at ${SECONDS}s"
  grep -E '^\[  FAILED|Failure' $out/$bin.log | head -6
done
timeout 120 $B/engine_bench_after --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 --batches 1 \
  --contexts 1024 --reps 3 > $out/make.log 2>&1; echo "make rc=$? at ${SECONDS}s"
for r in $(seq 1 ${ROUNDS:-2}); do
  for c in ${CHUNKS:-2048 4096}; do
    for v in ${VARIANTS:-before after}; do
      timeout 120 $B/engine_bench_$v --model $m --layers 3:4 --batches 1 --contexts ${CONTEXT:-8192} --prefill-chunk $c \
        ${EXTRA_ARGS:-} > $out/eng_${v}_${c}_$r.log 2>&1; echo "engine $v chunk $c round $r rc=$? at ${SECONDS}s"
    done
  done
done
tar czf ${OUT:-/tmp/out}/pab.tgz -C $out .
for f in $out/eng_*.log; do echo "${f##*/}: $(grep -E '^prefill' $f | cut -c1-100) | $(grep -E '^\| [0-9]+ \| 1 \|' $f | cut -d'|' -f2-5)"; done
