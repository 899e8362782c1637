#!/usr/bin/env bash
# One device call for the 4-bit weights in the engine (issue 24): the W4 and
# MoE kernel tests, the cuda-vs-cpu parity of the 4-bit tiny checkpoints,
# engine_bench of a GLM-5 MoE layer with int4 (AWQ) experts from two builds
# (before = the base tree, after = this tree) on one checkpoint, interleaved,
# and one more w4a16_bench round of each build. Build both trees (sm_90 from
# compute_80), copy each engine_bench / w4a16_bench to /tmp/<name>_{before,after}, then
#   ../shared/scripts/bundle.sh .bundle-w4e /tmp/engine_bench_before /tmp/engine_bench_after \
#       /tmp/w4a16_bench_before /tmp/w4a16_bench_after build-cuda/tests/kernels/gemm/gemm_gpu_test \
#       build-cuda/tests/kernels/cuda_parity_gpu_test
# On the GPU host: OUT=$OUT bash tools/device/w4_engine.sh   (carry .bundle-w4e)
# Knobs: QUANT (awq), BATCHES (1,8,64), ROUNDS (2), TESTS (1), PARITY (1), GEMM (1), PROFILE (0; 1: an eager
# per-op profile of the after build at batch 1, 8K, --op-profile), W4A16_ARGS (the
# benchmark's arguments; default "--moe-tokens 1,8,64": every shape at M = 1, 4, 8, 16 and 2048
# with its cuBLAS peer; "--ms 1,4,8,16 --moe-tokens 1,8,64" skips the slow M = 2048 rows).
# Logs in /tmp/w4e, archived to $OUT/w4e.tgz.
set -uo pipefail
NAME=w4e
source tools/device/two_build_common.sh
if [[ "${TESTS:-1}" != 0 ]]; then
  timeout 300 "$B/gemm_gpu_test" --gtest_filter='W4*:Moe*' --gtest_brief=1 >"$OUT/gemm_tests.log" 2>&1
  echo "gemm_gpu_test W4*:Moe* rc $?" >>"$OUT/rc.txt"
fi
if [[ "${PARITY:-1}" != 0 ]]; then
  timeout 300 "$B/cuda_parity_gpu_test" --gtest_filter='QuantVariants/*' >"$OUT/parity.log" 2>&1
  echo "cuda_parity_gpu_test QuantVariants rc $?" >>"$OUT/rc.txt"
fi
m=/tmp/glm5w4
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && m=/dev/shm/glm5w4
args=(--model "$m" --layers 3:4 --batches "${BATCHES:-1,8,64}" --contexts 8192)
variants=(before after)
engine_rounds after --make-geometry glm5-full --make-layers 4 --make-quant "${QUANT:-awq}"
if [[ "${PROFILE:-0}" != 0 ]]; then
  # Where an eager batch-1 step of the after build goes, op by op.
  timeout 150 "$B/engine_bench_after" --model "$m" --layers 3:4 --batches 1 --contexts 8192 --op-profile \
    >"$OUT/op_profile_after.log" 2>&1
  echo "op profile after rc $?" >>"$OUT/rc.txt"
fi
rm -rf "$m"
if [[ "${GEMM:-1}" != 0 ]]; then
  for v in before after; do
    # shellcheck disable=SC2086  # word splitting of the argument list is intended
    timeout 150 "$B/w4a16_bench_$v" ${W4A16_ARGS:---moe-tokens 1,8,64} --csv "$OUT/w4a16_$v.csv" >"$OUT/w4a16_$v.log" 2>&1
    echo "w4a16 $v rc $?" >>"$OUT/rc.txt"
  done
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
[[ -f $OUT/gemm_tests.log ]] && tail -3 "$OUT/gemm_tests.log"
grep -E "relative logit|greedy|FAILED|PASSED|OK \]" "$OUT/parity.log" 2>/dev/null | tail -30
for f in "$OUT"/engine_*.log; do
  echo "== $(basename "$f")"
  grep -E "^\| *[0-9]" "$f" | head -8
done
python3 - "$OUT" <<'PY'
import csv, sys
out = sys.argv[1]
rows = {}
for v in ("before", "after"):
    try:
        for r in csv.DictReader(open(f"{out}/w4a16_{v}.csv")):
            # A grouped shape's name carries its tail split ("+tail<32:..."): the plans may differ.
            shape = r["shape"].split("+")[0]
            rows.setdefault((r["format"], shape, r["m"]), {})[v] = (float(r["us"]), float(r["pct_copy"]))
    except OSError:
        pass
print("| format | shape | M | before us | after us | after/before | after % of copy |")
for k, d in sorted(rows.items()):
    if "before" in d and "after" in d:
        print(f"| {k[0]} | {k[1]} | {k[2]} | {d['before'][0]:.2f} | {d['after'][0]:.2f} | "
              f"{d['after'][0] / d['before'][0]:.3f} | {d['after'][1]:.1f} |")
PY
