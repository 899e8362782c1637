#!/usr/bin/env bash
# One device call for the 4-bit weights (issue 24): the W4A16 kernel tests,
# the cuda-vs-cpu parity on the 4-bit tiny checkpoints, the W4A16 benchmark
# (decode vs copy roofline, grouped MoE at 64 tokens, M = 2048 vs cuBLAS),
# and the goldens of the 4-bit variants if transformers is there. Run from
# the repo root on the GPU host after building with CUDA and bundling:
#   cmake --build build-cuda --target gemm_gpu_test cuda_parity_gpu_test capacity_plan_gpu_test \
#       w4a16_bench engine_bench spar
#   /work/shared/scripts/bundle.sh .bundle-w4 build-cuda/tests/kernels/gemm/gemm_gpu_test \
#       build-cuda/tests/kernels/cuda_parity_gpu_test build-cuda/tests/kernels/capacity_plan_gpu_test \
#       build-cuda/bench/gemm/w4a16_bench build-cuda/bench/engine/engine_bench build-cuda/services/cli/spar
#   OUT=/tmp/out bash bench/gemm/run_w4_device.sh
# Knobs: BUNDLE (default .bundle-w4), GOLDENS=0 to skip the goldens, ENGINE=0 to skip engine_bench.
set -uo pipefail
BUNDLE=${BUNDLE:-.bundle-w4}
source "$BUNDLE/env.sh"
export PYTHONUNBUFFERED=1
B=$BUNDLE/bin
OUT=${OUT:-/tmp/w4_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv >"$OUT/tests.log" 2>&1
git rev-parse HEAD >>"$OUT/tests.log" 2>/dev/null
timeout "${TEST_TIMEOUT:-240}" "$B/gemm_gpu_test" --gtest_filter='W4*' --gtest_brief=1 >>"$OUT/tests.log" 2>&1
echo "gemm_gpu_test W4 exit $?" >>"$OUT/tests.log"
timeout "${PARITY_TIMEOUT:-300}" "$B/cuda_parity_gpu_test" --gtest_filter='QuantVariants/*' >"$OUT/parity.log" 2>&1
echo "cuda_parity_gpu_test QuantVariants exit $?" >>"$OUT/parity.log"
timeout "${BENCH_TIMEOUT:-240}" "$B/w4a16_bench" --csv "$OUT/w4a16.csv" >"$OUT/bench.log" 2>&1
echo "w4a16_bench exit $?" >>"$OUT/bench.log"
# spar plan's 4-bit bytes against what the cuda backend allocates (GLM-5 geometry, 4 layers).
timeout "${PLAN_TIMEOUT:-600}" "$B/capacity_plan_gpu_test" >"$OUT/plan.log" 2>&1
echo "capacity_plan_gpu_test exit $?" >>"$OUT/plan.log"
# The GLM-5 MoE layer with int4 experts, batch 1 and 8, 8K context, vs its roofline.
if [[ "${ENGINE:-1}" != 0 ]]; then
  m=$(mktemp -d /dev/shm/w4_engine.XXXX 2>/dev/null || mktemp -d)
  timeout "${ENGINE_TIMEOUT:-600}" "$B/engine_bench" --make-geometry glm5-full --make-layers 4 --make-quant awq \
    --model "$m" --layers 3:4 --batches 1,8 --contexts 8192 >"$OUT/engine.log" 2>&1
  echo "engine_bench int4 exit $?" >>"$OUT/engine.log"
  rm -rf "$m"
fi
if [[ "${GOLDENS:-1}" != 0 ]] && python3 -c 'import torch, transformers' 2>/dev/null; then
  mkdir -p "$OUT/goldens"
  models=$(mktemp -d)
  for q in awq gptq int4-ct nvfp4; do
    "$B/spar" make-tiny --arch glm5 --quant $q --out "$models/glm5-$q" >/dev/null
    timeout 600 python3 tools/golden/make_goldens.py --model "$models/glm5-$q" --variant "glm5-$q" \
      --out "$OUT/goldens/glm5-$q.json" >>"$OUT/goldens.log" 2>&1
    echo "goldens glm5-$q exit $?" >>"$OUT/goldens.log"
  done
fi
echo "=== tests"; grep -E "FAILED|Failure|PASSED|exit" "$OUT/tests.log" | head -40
echo "=== parity"; grep -E "relative logit|greedy|FAILED|OK \]|exit" "$OUT/parity.log" | head -60
echo "=== bench"; cat "$OUT/bench.log"
echo "=== plan"; grep -E "planned|OK \]|FAILED|exit" "$OUT/plan.log"
[[ -f "$OUT/engine.log" ]] && { echo "=== engine"; tail -20 "$OUT/engine.log"; }
[[ -f "$OUT/goldens.log" ]] && { echo "=== goldens"; tail -12 "$OUT/goldens.log"; }
