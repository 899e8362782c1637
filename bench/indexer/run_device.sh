#!/usr/bin/env bash
# One device call: GPU tests, the benchmark, the PyTorch peer baseline, and
# optionally a memcheck pass over small test cases (SANITIZE=gtest filter) and
# ncu kernel timings of one bench section (PROFILE=section). Logs go to $OUT; a short table last.
# Usage (repo root, on the GPU host): bash bench/indexer/run_device.sh
source .bundle-indexer/env.sh
B=.bundle-indexer/bin
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/indexer_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
timeout ${T_TESTS:-75} $B/indexer_gpu_test > "$OUT/tests.log" 2>&1; echo "tests rc=$?" >> "$OUT/rc.txt"
# One process per section: a sticky CUDA error in one cannot hide the others.
: > "$OUT/bench.log"
for section in ${BENCH_SECTIONS:-decode prefill topk keywrite}; do
  timeout ${T_BENCH:-40} $B/indexer_bench $section >> "$OUT/bench.log" 2>&1; echo "bench $section rc=$?" >> "$OUT/rc.txt"
done
timeout ${T_PEER:-60} python3 bench/indexer/peer_indexer.py ${PEER_ARGS:-} > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/rc.txt"
if [[ -n "${PROFILE:-}" ]]; then
  # Per-kernel durations (ncu flushes the caches before each kernel: DRAM-cold numbers).
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout ${T_PROF:-60} $NCU --clock-control none --section SpeedOfLight $B/indexer_bench $PROFILE \
    > "$OUT/ncu.log" 2>&1; echo "ncu rc=$?" >> "$OUT/rc.txt"
fi
if [[ -n "${SANITIZE:-}" ]]; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  timeout ${T_SAN:-30} $CS --tool memcheck --error-exitcode 9 $B/indexer_gpu_test --gtest_filter="$SANITIZE" \
    > "$OUT/sanitizer.log" 2>&1; echo "sanitizer rc=$?" >> "$OUT/rc.txt"
  grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/sanitizer.log" | head -20
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
echo "--- tests"
grep -E "^\[  FAILED|^\[  PASSED|tests ran|Failure|error" "$OUT/tests.log" | head -40
grep -B2 -A6 "Failure" "$OUT/tests.log" | head -80
if [[ -n "${PROFILE:-}" ]]; then
  echo "--- ncu"
  grep -E "^  [A-Za-z_0-9:<>, ()]+\(|^profiled|Duration|DRAM Throughput|Memory Throughput" "$OUT/ncu.log" | head -60
fi
echo "--- peer"
cat "$OUT/peer.log"
echo "--- bench"
cat "$OUT/bench.log"
