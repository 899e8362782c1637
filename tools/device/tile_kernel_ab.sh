#!/usr/bin/env bash
# A W8A16 tile-kernel change against main, in one or two device calls (one
# GPU). Bundle .bundle-pp (carried as .bundle-x/pp.tar.xz,
# tools/device/bundle_setup.sh): engine_bench_before / gemm_bench_before
# (main), engine_bench_after / gemm_bench_after and the GPU tests TESTS
# names (the change's tree).
#   PART=tests: the tests (gtest binaries, "binary[:filter]");
#   PART=gemm: gemm_bench, weights tiled across rows, the shapes SHAPES at
#     MS tokens and the grouped MoE at MOE tokens, before / after
#     interleaved GROUNDS (2) times, then (SWEEP=1) after's sweep of every
#     configuration;
#   PART=engine: engine_bench before / after interleaved ROUNDS (2) times on
#     one GLM-5-geometry checkpoint: the prefill of CHUNK-token chunks and
#     the decode step at BATCHES (8K context).
# PART=all runs the three in that order. Logs under $OUT/pp, archived to
# $OUT/pp.tgz; the table last.
set -uo pipefail
out=${OUT:-/tmp/out}/pp
mkdir -p "$out"
BUNDLE=.bundle-pp
source tools/device/bundle_setup.sh
export NCCL_NVLS_ENABLE=0
part=${PART:-all}
shapes=${SHAPES:-q_b,o_proj,exp_down,exp_gate_up}
ms=${MS:-2048,4096}
moe=${MOE:-4096}

if [[ $part == all || $part == tests ]]; then
  for t in ${TESTS:-gemm_gpu_test}; do
    bin=${t%%:*}; filt=${t#*:}; [[ $filt == "$t" ]] && filt='*'
    timeout 300 "$B/$bin" --gtest_filter="$filt" >"$out/$bin.log" 2>&1
    echo "$bin rc=$? ok=$(grep -c '^\[       OK \]' "$out/$bin.log") failed=$(grep -c '^\[  FAILED  \]' "$out/$bin.log") skipped=$(grep -c '^\[  SKIPPED \]' "$out/$bin.log") at ${SECONDS}s" | tee -a "$out/summary.txt"
    grep -E '^\[  FAILED|Failure' "$out/$bin.log" | head -6
  done
fi

if [[ $part == all || $part == gemm ]]; then
  common=(--tiled across-rows --shapes "$shapes" --ms "$ms" --moe-tokens "$moe")
  for r in $(seq 1 "${GROUNDS:-2}"); do
    for v in before after; do
      timeout 150 "$B/gemm_bench_$v" "${common[@]}" >"$out/gemm_${v}_$r.log" 2>&1
      echo "gemm $v round $r rc=$? at ${SECONDS}s" | tee -a "$out/summary.txt"
      grep -E "^[a-z_]+ +M=" "$out/gemm_${v}_$r.log" | cut -c1-100
    done
  done
  if [[ ${SWEEP:-0} == 1 ]]; then
    timeout 240 "$B/gemm_bench_after" "${common[@]}" --sweep >"$out/gemm_sweep.log" 2>&1
    echo "gemm sweep rc=$? at ${SECONDS}s" | tee -a "$out/summary.txt"
  fi
fi

if [[ $part == all || $part == engine ]]; then
  timeout 150 "$B/engine_bench_after" --make-geometry glm5-full --make-layers 4 --model "$m" --layers 3:4 --batches 1 \
    --contexts 1024 --reps 3 >"$out/make.log" 2>&1
  echo "make rc=$? at ${SECONDS}s" | tee -a "$out/summary.txt"
  for r in $(seq 1 "${ROUNDS:-2}"); do
    for v in before after; do
      f=$out/eng_${v}_$r.log
      timeout 150 "$B/engine_bench_$v" --model "$m" --layers 3:4 --batches "${BATCHES:-1,64}" --contexts 8192 \
        --prefill-chunk "${CHUNK:-4096}" >"$f" 2>&1
      echo "engine $v round $r rc=$? at ${SECONDS}s: $(grep -E '^prefill' "$f" | cut -c1-100) | $(grep -E '^\| [0-9]+ \| (1|64) \|' "$f" | cut -d'|' -f2-5 | tr '\n' ' ')" | tee -a "$out/summary.txt"
    done
  done
fi

tar czf "${OUT:-/tmp/out}/pp.tgz" -C "$out" .
echo "== table"
[[ -f $out/gemm_sweep.log ]] && grep -E "sweepall moe|^  sweep " "$out/gemm_sweep.log" | cut -c1-900
cat "$out/summary.txt"
