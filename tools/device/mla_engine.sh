#!/usr/bin/env bash
# One device call for the FP8 latent cache in the engine (issue 22): the cuda
# engine's parity tests (FP8 latent rows against the cpu's FP8 reference,
# exact-mode selections, graphs against eager steps), then engine_bench on a
# GLM-5-geometry layer with the bf16 and the FP8 latent cache interleaved
# (ROUNDS rounds, batches BATCHES at 8K context, graph replays), a table last.
# Build here: ninja -C build-cuda cuda_parity_gpu_test engine_bench
#   ../shared/scripts/bundle.sh .bundle-mle build-cuda/tests/kernels/cuda_parity_gpu_test \
#       build-cuda/bench/engine/engine_bench
#   tar cJf .bundle-x/mle.tar.xz .bundle-mle
# On the GPU host: OUT=$OUT bash tools/device/mla_engine.sh   (carry .bundle-x)
set -uo pipefail
BUNDLE=${BUNDLE:-.bundle-mle}
out=/tmp/mle
rm -rf "$out"
mkdir -p "$out" "${OUT:-/tmp/mle_out}"
trap 'tar czf "${OUT:-/tmp/mle_out}/mle.tgz" -C /tmp mle' EXIT
source tools/device/bundle_setup.sh
if [[ "${TESTS:-1}" != 0 ]]; then
  timeout 240 "$B/cuda_parity_gpu_test" ${PARITY_FILTER:+--gtest_filter=$PARITY_FILTER} >"$out/parity.log" 2>&1
  echo "cuda_parity_gpu_test rc=$? ok=$(grep -c '^\[       OK \]' "$out/parity.log") failed=$(grep -c '^\[  FAILED  \]' "$out/parity.log") skipped=$(grep -c '^\[  SKIPPED \]' "$out/parity.log")"
  grep -E "^\[  FAILED|Failure" "$out/parity.log" | head -10
fi
timeout 200 "$B/engine_bench" --make-geometry glm5-full --make-layers 4 --model "$m" --layers 3:4 --batches 1 \
  --contexts 1024 --reps 3 >"$out/bench_make.log" 2>&1
echo "make rc=$?"
for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
  for lat in bf16 fp8; do
    timeout 150 "$B/engine_bench" --model "$m" --layers 3:4 --batches "${BATCHES:-1,8,64}" --contexts 8192 \
      --latent $lat >"$out/bench_${lat}_$r.log" 2>&1
    echo "engine_bench $lat round $r rc=$?"
  done
done
grep -hE "^\|" "$out/bench_bf16_1.log" | head -3
for f in "$out"/bench_*_[0-9].log; do
  grep -E "^\| *(decode|[0-9])" "$f" | sed "s|^|$(basename "$f" .log) |"
done
