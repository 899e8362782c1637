#!/usr/bin/env bash
# What the test GPU's extra shared memory buys, in one device call (one GPU):
# the same binaries with and without SPAR_SMEM_PER_SM_KB=164 (an A100's
# shared memory an SM, kernels/cuda/common/smem_residency.h).
#   1. smem_residency_gpu_test (the padded launches' residency);
#   2. gemm_bench, weights tiled across rows, SHAPES at MS tokens and the
#      grouped MoE at MOE tokens, each with its sweep (every configuration
#      forced): which tiles win when an SM holds an A100's blocks;
#   3. engine_bench, one FP8 GLM-5 MoE layer, prefill of 4096-token chunks
#      and decode at BATCHES (8K), interleaved ROUNDS (1) times.
# Bundle .bundle-ar (carried as .bundle-x/ar.tar.xz, bundle_setup.sh):
# gemm_bench, engine_bench, smem_residency_gpu_test of one tree. Logs under
# $OUT/ar, archived to $OUT/ar.tgz.
set -uo pipefail
out=${OUT:-/tmp/out}/ar
mkdir -p "$out"
BUNDLE=.bundle-ar
source tools/device/bundle_setup.sh
export NCCL_NVLS_ENABLE=0
timeout 60 "$B/smem_residency_gpu_test" >"$out/test.log" 2>&1
echo "smem_residency_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/test.log" | tr '\n' ' ')"
common=(--tiled across-rows --shapes "${SHAPES:-q_b,o_proj,exp_down,exp_gate_up}" --ms "${MS:-64,2048}"
        --moe-tokens "${MOE:-64,4096}" --sweep)
for v in hopper a100; do
  kb=; [[ $v == a100 ]] && kb=164
  SPAR_SMEM_PER_SM_KB=$kb timeout 240 "$B/gemm_bench" "${common[@]}" >"$out/gemm_$v.log" 2>&1
  echo "gemm $v rc=$? at ${SECONDS}s"
  grep -E "^device|^[a-z_]+ +M=|^  sweep " "$out/gemm_$v.log" | cut -c1-160
done
if [[ ${ENGINE:-1} == 1 ]]; then
  timeout 150 "$B/engine_bench" --make-geometry glm5-full --make-layers 4 --model "$m" --layers 3:4 --batches 1 \
    --contexts 1024 --reps 3 >"$out/make.log" 2>&1
  echo "make rc=$? at ${SECONDS}s"
  for r in $(seq 1 "${ROUNDS:-1}"); do
    for v in hopper a100; do
      kb=; [[ $v == a100 ]] && kb=164
      f=$out/eng_${v}_$r.log
      SPAR_SMEM_PER_SM_KB=$kb timeout 150 "$B/engine_bench" --model "$m" --layers 3:4 --batches "${BATCHES:-1,64}" \
        --contexts 8192 --prefill-chunk 4096 >"$f" 2>&1
      echo "engine $v round $r rc=$? at ${SECONDS}s: $(grep -E '^prefill' "$f" | cut -c1-100) | $(grep -E '^\| [0-9]+ \| (1|64) \|' "$f" | cut -d'|' -f2-5 | tr '\n' ' ')"
    done
  done
fi
tar czf "${OUT:-/tmp/out}/ar.tgz" -C "$out" .
grep -hE "sweepall moe" "$out"/gemm_*.log | cut -c1-1200
