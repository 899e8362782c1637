#!/usr/bin/env bash
# The grouped MoE GEMMs' tail split (kernels/cuda/gemm/moe.h) in one device
# call (one GPU): gemm_gpu_test's MoE layer tests, gemm_bench's MoE at
# prefill sizes with the split off, automatic and at the bounds and tail
# tiles of TAILS, then engine_bench's prefill of the FP8 GLM-5 MoE layer with
# and without it, interleaved on one checkpoint.
# Build (sm_90 from compute_80); copy engine_bench built with
# kMoeTailAutoRows = 0 to /tmp/bXX/engine_bench_base and the tree's to
# /tmp/bXX/engine_bench_tail, gemm_bench and gemm_gpu_test beside them, then
#   ../shared/scripts/bundle.sh .bundle-mt /tmp/bXX/*
#   mkdir -p .bundle-z && tar cJf .bundle-z/mt.tar.xz .bundle-mt
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/mt.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/moe_tail.sh
# Knobs: TOKENS (4096: every tail variant), MORE_TOKENS (2048,8192: off and
# automatic only), TAILS (bound,tile list), ROUNDS (2), GEMM (1; 0 skips the
# W8A16 gemm_bench runs), TESTS (1; 0 skips gemm_gpu_test's MoE tests), W4 (0; 1: w4a16_bench's int4 and NVFP4 MoE with
# W4TAILS the same way, when the bundle has it), ENGINE (1; 0 skips the
# engine rounds), QUANT (unset: the FP8 layer; awq, nvfp4, ...: engine_bench
# --make-quant), OP_PROFILE (0; 1: one --op-profile run of each build after
# the rounds). Logs archived to $OUT/mt.tgz; a table last.
set -uo pipefail
NAME=mt
source tools/device/two_build_common.sh
IFS=, read -r -a more <<<"${MORE_TOKENS-2048,8192}"
if [[ ${TESTS:-1} != 0 ]]; then
  timeout 300 "$B/gemm_gpu_test" --gtest_filter='Sm80_MoeLayer.*:W4MoeGroupedGemmTest.*' >"$OUT/gemm_gpu_test.log" 2>&1
  echo "gemm_gpu_test MoeLayer + W4MoeGroupedGemmTest rc $? ok $(grep -c '^\[       OK \]' "$OUT/gemm_gpu_test.log")" \
    "failed $(grep -c '^\[  FAILED  \]' "$OUT/gemm_gpu_test.log")" >>"$OUT/rc.txt"
fi
# sweep PREFIX TAIL...: the bench `run` (a function: LOG TOKENS TAIL) with the
# split off and automatic (two rounds) and each TAIL at TOKENS, then off and
# automatic at MORE_TOKENS; logs PREFIX_<tokens>_<variant>.log.
sweep() {
  local prefix=$1 tokens=${TOKENS:-4096} t n round
  for round in 1 2; do
    run "${prefix}_${tokens}_off_$round.log" "$tokens" 0
    run "${prefix}_${tokens}_auto_$round.log" "$tokens" -1
  done
  for t in "${@:2}"; do run "${prefix}_${tokens}_${t/,/_}.log" "$tokens" "$t"; done
  for n in "${more[@]}"; do
    run "${prefix}_${n}_off.log" "$n" 0
    run "${prefix}_${n}_auto.log" "$n" -1
  done
}
if [[ ${GEMM:-1} != 0 ]]; then
  run() {
    timeout 200 "$B/gemm_bench" --shapes none --tiled across-rows --moe-tokens "$2" --moe-tail "$3" >"$OUT/$1" 2>&1
    echo "gemm_bench $1 rc $?" >>"$OUT/rc.txt"
  }
  read -r -a tails <<<"${TAILS:-32,T16W4F 16,T16W4F 48,T16W4F 32,T32 64,T32 32,T8R128M2F 64,T64W2 100,T64W2}"
  sweep moe "${tails[@]}"
fi
if [[ ${W4:-0} != 0 && -x $B/w4a16_bench ]]; then
  run() {
    timeout 200 "$B/w4a16_bench" --shapes none --moe-tokens "$2" --moe-tail "$3" >"$OUT/$1" 2>&1
    echo "w4a16_bench $1 rc $?" >>"$OUT/rc.txt"
  }
  read -r -a w4tails <<<"${W4TAILS:-32,W4D16M2S4 16,W4D16M2S4 48,W4D16M2S4 32,W4SM2D3W2 32,W4T16 48,W4T32}"
  sweep w4 "${w4tails[@]}"
fi
if [[ ${ENGINE:-1} != 0 ]]; then
  variants=(base tail)
  m=/tmp/glm5mt
  [[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && m=/dev/shm/glm5mt
  args=(--model "$m" --layers 3:4 --batches 1 --contexts 8192)
  engine_rounds base --make-geometry glm5-full --make-layers 4 ${QUANT:+--make-quant "$QUANT"}
  if [[ ${OP_PROFILE:-0} != 0 ]]; then
    for v in "${variants[@]}"; do
      bench 150 "$v" "${args[@]}" --op-profile >"$OUT/op_$v.log" 2>&1
      echo "op profile $v rc $?" >>"$OUT/rc.txt"
    done
  fi
  rm -rf "$m"
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
grep -h "^\[  FAILED  \]" "$OUT/gemm_gpu_test.log" 2>/dev/null
echo "| run | plan (gate/up;down) | grouped GEMMs us |"
for f in "$OUT"/moe_*.log; do
  awk -v f="$(basename "$f" .log)" '$1 == "moe_gemms" {printf "| %s | %s | %s |\n", f, $5, $6}' "$f"
done
for f in "$OUT"/w4_*.log; do
  [[ -f $f ]] || continue
  awk -v f="$(basename "$f" .log)" '/moe_[0-9]+x8/ {printf "| %s | %s |\n", f, $0}' "$f"
done
echo "| engine run | prefill |"
for f in "$OUT"/engine_*-[0-9].log; do
  echo "| $(basename "$f" .log) | $(grep -hE "^prefill chunk" "$f" | head -1) |"
done
grep -H "moe.experts" "$OUT"/op_*.log 2>/dev/null
