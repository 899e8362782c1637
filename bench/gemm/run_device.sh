#!/usr/bin/env bash
# One device call for the gemm family: GPU tests, benchmark (+ heuristic
# sweep), PyTorch peers, joined table last. Run from the repo root on the GPU
# host after bundling:
#   /work/shared/scripts/bundle.sh .bundle-gemm build-gemm/tests/kernels/gemm/gemm_gpu_test \
#       build-gemm/bench/gemm/gemm_bench
#   OUT=/tmp/out bash bench/gemm/run_device.sh [--quick]
set -uo pipefail
source .bundle-gemm/env.sh
export PYTHONUNBUFFERED=1
B=.bundle-gemm/bin
OUT=${OUT:-/tmp/gemm_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
timeout 50 "$B/gemm_gpu_test" --gtest_brief=1 >"$OUT/tests.log" 2>&1
echo "gemm_gpu_test exit $?" >>"$OUT/tests.log"
timeout 70 "$B/gemm_bench" --csv "$OUT/ours.csv" ${1:+$1} ${SWEEP:---sweep} >"$OUT/bench.log" 2>&1
echo "gemm_bench exit $?" >>"$OUT/bench.log"
timeout 45 python3 bench/gemm/peer_gemm.py --csv "$OUT/peer.csv" ${1:+$1} >"$OUT/peer.log" 2>&1
echo "peer exit $?" >>"$OUT/peer.log"
python3 bench/gemm/report.py "$OUT/ours.csv" "$OUT/peer.csv" >"$OUT/table.md" 2>&1
echo "=== tests"; grep -E "FAILED|Failure|PASSED|exit|error" "$OUT/tests.log" | head -60
echo "=== sweep: see bench.log (sweepall lines)"
echo "=== bench tail"; grep -vE "sweep" "$OUT/bench.log" | tail -4; tail -2 "$OUT/peer.log"
cat "$OUT/gpu.txt"
echo "=== table"; cat "$OUT/table.md"
