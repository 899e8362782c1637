#!/usr/bin/env bash
# Runs on the GPU host: every GPU test binary of the bundle, then a short
# table. Build here first:
#   cmake -S . -B build-cuda -G Ninja -DSPAR_CUDA_CODE=sm90 -DCMAKE_BUILD_TYPE=Release
#   ninja -C build-cuda <gpu tests>; ../shared/scripts/bundle.sh .bundle-gpu build-cuda/tests/kernels/.../*_gpu_test
set -uo pipefail
source .bundle-gpu/env.sh
export SPAR_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
summary=()
for t in .bundle-gpu/bin/*_gpu_test; do
  name=$(basename "$t")
  "$t" > "$OUT/$name.log" 2>&1
  rc=$?
  pass=$(grep -c "^\[       OK \]" "$OUT/$name.log")
  fail=$(grep -c "^\[  FAILED  \]" "$OUT/$name.log")
  summary+=("$(printf '%-36s rc=%-3s ok=%-4s failed=%s' "$name" "$rc" "$pass" "$fail")")
  grep -E "Failure|FAILED|worst|identical" "$OUT/$name.log" | head -20
done
echo "== GPU suite =="
printf '%s\n' "${summary[@]}"
