#!/usr/bin/env bash
# One device call: the grouped (MoE) GEMMs of two builds, before / after a
# change to their kernels, at decode and prefill sizes, with the engine's
# prefill chunk as the end-to-end check (issues 21 and 24):
#   1. gemm_gpu_test (the after tree's) on the MoE layer's grouped,
#      tail-split and split-K cases and the W4A16 dense and grouped cases,
#      against the reference;
#   2. gemm_bench's FP8 MoE GEMMs, weights tiled across rows (the engine's
#      layout), at MOE_TOKENS (64,512,2048,4096), ROUNDS (2) interleaved;
#   3. w4a16_bench's int4 / NVFP4 grouped MoE at W4_TOKENS (1,64,2048,4096),
#      the same rounds;
#   4. prefill_ab.sh: engine_bench's 4096-token prefill chunk of one FP8
#      GLM-5 MoE layer, before / after interleaved.
# Build (sm_90 from compute_80) gemm_bench, w4a16_bench, engine_bench of both
# trees and gemm_gpu_test of the after tree, copy them to
# DIR/{gemm_bench,w4a16_bench,engine_bench}_{before,after} and
# DIR/gemm_gpu_test, then
#   ../shared/scripts/bundle.sh .bundle-pab DIR/*
#   tar cJf .bundle-z/pab.tar.xz .bundle-pab
# On the GPU host (carry .bundle-z): OUT=$OUT bash tools/device/grouped_order_ab.sh
# Knobs: ROUNDS (2: gemm_bench, w4a16_bench), PREFILL_ROUNDS (ROUNDS; 0 skips the engine),
# MOE_TOKENS, W4_TOKENS.
set -uo pipefail
[[ -d .bundle-pab ]] || python3 -c 'import tarfile; tarfile.open(".bundle-z/pab.tar.xz").extractall(".")'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p "$OUT"
(
  source .bundle-pab/env.sh
  timeout 150 .bundle-pab/bin/gemm_gpu_test --gtest_brief=1 \
    --gtest_filter='Sm80_MoeLayer.*:W4MoeGroupedGemmTest.*:W4A16GemmTest.*' >"$OUT/tests.log" 2>&1
  echo "gemm_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED' "$OUT/tests.log" | head -8
)
BUNDLE=.bundle-pab VARIANTS="before after" FLAGS_before="--tiled across-rows" FLAGS_after="--tiled across-rows" \
  ROUNDS=${ROUNDS:-2} SHAPES=none MOE_TOKENS=${MOE_TOKENS:-64,512,2048,4096} OUT=$OUT/gab \
  timeout 220 bash tools/device/gemm_ab.sh 2>&1 | tail -12
(
  source .bundle-pab/env.sh
  for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
    for v in before after; do
      timeout 120 ".bundle-pab/bin/w4a16_bench_$v" --shapes none --moe-tokens "${W4_TOKENS:-1,64,2048,4096}" \
        >"$OUT/w4_$v-$r.log" 2>&1
      echo "w4a16_bench $v-$r rc $?"
    done
  done
)
echo "| w4 grouped | before (rounds) | after (rounds) |"
echo "|---|---|---|"
python3 - "$OUT" "${ROUNDS:-2}" <<'PY'
import collections, re, sys
out, rounds = sys.argv[1], int(sys.argv[2])
us = collections.defaultdict(lambda: collections.defaultdict(list))
for v in ("before", "after"):
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{out}/w4_{v}-{r}.log").read().splitlines()
        except OSError:
            continue
        for line in lines:
            m = re.match(r"grouped\s+(\S+)\s+(\S+)\s+M=(\d+)\s+([\d.]+) us", line)
            if m:
                us[(m.group(1), int(m.group(3)))][v].append(float(m.group(4)))
for key in sorted(us):
    d = us[key]
    print(f"| {key[0]} {key[1]} tokens | " + " | ".join(" / ".join(f"{x:.1f}" for x in d[v]) for v in ("before", "after")) + " |")
PY
[[ ${PREFILL_ROUNDS:-${ROUNDS:-2}} == 0 ]] && exit 0
# prefill_ab.sh prints each run's rc, then one line per engine log (its prefill chunk and batch-1 row).
CHUNKS=4096 ROUNDS=${PREFILL_ROUNDS:-${ROUNDS:-2}} OUT=$OUT timeout 300 bash tools/device/prefill_ab.sh 2>&1
