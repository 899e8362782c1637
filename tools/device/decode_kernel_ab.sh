#!/usr/bin/env bash
# One device call for a decode-step kernel swap (one GPU): the GPU tests that
# cover it, engine_bench of the FP8 GLM-5 MoE layer from two builds (before =
# the base tree, after = this tree) interleaved on one checkpoint, and each
# build's step under ncu with only the kernels named by KERNELS timed.
# Build both trees (sm_90 from compute_80), copy each engine_bench to
# /tmp/engine_bench_{before,after}, then
#   ../shared/scripts/bundle.sh .bundle-dk /tmp/engine_bench_before /tmp/engine_bench_after \
#       build-cuda/tests/kernels/cuda_parity_gpu_test <the kernel's *_gpu_test>...
#   tar cJf .bundle-z/dk.tar.xz .bundle-dk
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/dk.tar.xz").extractall(".")'
#   OUT=$OUT KERNELS='regex' bash tools/device/decode_kernel_ab.sh
# Knobs: BATCHES (1,8), CONTEXTS (8192), ROUNDS (2), VARIANTS ("before after":
# the bundle's engine_bench_<variant>s, interleaved; after makes the
# checkpoint), KERNELS (an ncu --kernel-name regex; empty: no ncu),
# PARITY_FILTER (a gtest filter for cuda_parity_gpu_test; empty: all of it),
# SLOW (test binaries run after the benchmarks; default cuda_parity and
# speculative; SLOW_TESTS=0 skips them). Every other *_gpu_test of the bundle
# runs whole, first. Logs archived to $OUT/dk.tgz; a table last.
set -uo pipefail
NAME=dk
source tools/device/two_build_common.sh
# PARITY_FILTER: cuda_parity_gpu_test's gtest filter (run_tests' FILTER_ knob).
FILTER_cuda_parity_gpu_test=${FILTER_cuda_parity_gpu_test:-${PARITY_FILTER:-}}
run_tests 0
m=/tmp/glm5dk
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && m=/dev/shm/glm5dk
args=(--model "$m" --layers 3:4 --batches "${BATCHES:-1,8}" --contexts "${CONTEXTS:-8192}")
read -r -a variants <<<"${VARIANTS:-before after}"
engine_rounds after --make-geometry glm5-full --make-layers 4
if [[ -n ${KERNELS:-} ]]; then
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for v in before after; do
    timeout 150 "$ncu" --graph-profiling node --clock-control none --cache-control none \
      --kernel-name "regex:$KERNELS" --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      --csv --print-units base "$B/engine_bench_$v" --model "$m" --layers 3:4 --batches 1 --contexts "${CONTEXTS:-8192}" \
      --reps 2 >"$OUT/ncu_$v.csv" 2>"$OUT/ncu_$v.err"
    echo "ncu $v rc $?" >>"$OUT/rc.txt"
  done
fi
rm -rf "$m"
[[ ${SLOW_TESTS:-1} != 0 ]] && run_tests 1
cat "$OUT/gpu.txt" "$OUT/rc.txt"
for f in "$OUT"/engine_*.log; do
  echo "== $(basename "$f")"
  grep -E "^\| *[0-9]" "$f" | head -8
done
if [[ -n ${KERNELS:-} ]]; then
  python3 tools/device/ncu_kernel_table.py before="$OUT/ncu_before.csv" after="$OUT/ncu_after.csv"
fi
