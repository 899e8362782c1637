#!/usr/bin/env bash
# The W8A16 streaming kernel's 16-token tiles (two B fragments a tile, dense
# GEMMs of 9-16 tokens) against the tile kernel they replace, in one device
# call (one GPU): gemm_gpu_test's W8A16 and MoE tests, gemm_bench of both
# builds interleaved (tools/device/gemm_ab.sh; at 9-16 tokens the base build
# runs the tile kernel), engine_bench of the FP8 GLM-5 MoE layer of both
# builds interleaved on one checkpoint; the decode-graph parity and the
# speculative-decoding equality tests of the new build right after the
# kernel tests (a call cut short keeps the correctness results).
# Build (sm_90 from compute_80) engine_bench and gemm_bench of the base tree
# and of this one, copy them to /tmp/bXX/{engine_bench,gemm_bench}_{base,s16},
# this tree's gemm_gpu_test, cuda_parity_gpu_test and speculative_gpu_test
# beside them, then
#   ../shared/scripts/bundle.sh .bundle-s16 /tmp/bXX/*
#   mkdir -p .bundle-z && tar cJf .bundle-z/s16.tar.xz .bundle-s16
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/s16.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/w8_stream16.sh
# Knobs: TESTS, GEMM, ENGINE, PARITY (1 each; 0 skips), VARIANTS (the engine
# builds, "base s16"), ROUNDS (engine rounds, 1; the make run is a third
# sample of the last variant), GEMM_ROUNDS (2), BATCHES
# (1,4,16; with --verify-tokens 4: batch 4 verifies 16 tokens a step). Logs archived to $OUT/s16.tgz; tables last.
set -uo pipefail
NAME=s16
source tools/device/two_build_common.sh
if [[ ${TESTS:-1} != 0 ]]; then
  filter='Sm80_W8A16Gemm.*:Sm80_MoeLayer.*:W4MoeGroupedGemmTest.*:MoeParams.*'
  timeout 200 "$B/gemm_gpu_test" --gtest_filter="$filter" --gtest_brief=1 >"$OUT/gemm_tests.log" 2>&1
  echo "gemm_gpu_test $filter rc $? $(grep -E '^\[  PASSED  \]|FAILED TEST' "$OUT/gemm_tests.log" | tr '\n' ' ')" >>"$OUT/rc.txt"
fi
if [[ ${PARITY:-1} != 0 ]]; then
  timeout 100 "$B/cuda_parity_gpu_test" --gtest_filter='*DecodeGraphsReplayLikeEagerSteps*' >"$OUT/parity.log" 2>&1
  echo "cuda_parity DecodeGraphsReplayLikeEagerSteps rc $? ok $(grep -c '^\[       OK \]' "$OUT/parity.log") failed $(grep -c '^\[  FAILED  \]' "$OUT/parity.log")" >>"$OUT/rc.txt"
  timeout 100 "$B/speculative_gpu_test" --gtest_filter='*GreedyEqualsPlainGreedy*' >"$OUT/speculative.log" 2>&1
  echo "speculative GreedyEqualsPlainGreedy rc $? ok $(grep -c '^\[       OK \]' "$OUT/speculative.log") failed $(grep -c '^\[  FAILED  \]' "$OUT/speculative.log")" >>"$OUT/rc.txt"
fi
if [[ ${GEMM:-1} != 0 ]]; then
  BUNDLE=$BUNDLE OUT=$OUT/gab VARIANTS='base s16' FLAGS_base='--tiled across-rows' FLAGS_s16='--tiled across-rows' \
    MS=1,8,9,12,16 SHAPES=mlp_gate_up,q_b,kv_b,o_proj,exp_gate_up,exp_down,fused_a ROUNDS=${GEMM_ROUNDS:-2} \
    bash tools/device/gemm_ab.sh >"$OUT/gemm_ab.txt" 2>&1
  echo "gemm_ab rc $?" >>"$OUT/rc.txt"
fi
if [[ ${ENGINE:-1} != 0 ]]; then
  read -r -a variants <<<"${VARIANTS:-base s16}"
  m=/tmp/glm5s16
  [[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && m=/dev/shm/glm5s16
  args=(--model "$m" --layers 3:4 --batches "${BATCHES:-1,4,16}" --contexts 8192 --verify-tokens 4)
  ROUNDS=${ROUNDS:-1} engine_rounds "${variants[-1]}" --make-geometry glm5-full --make-layers 4
  rm -rf "$m"
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
grep -h "FAILED" "$OUT/gemm_tests.log" "$OUT/parity.log" "$OUT/speculative.log" 2>/dev/null | head -20
grep -E "^\|" "$OUT/gemm_ab.txt" 2>/dev/null | grep -vE "\| (cublas|torch)" | head -60
echo "| engine run | per-layer ms (graph) by batch | prefill |"
for f in "$OUT"/engine_*-[0-9].log; do
  echo "| $(basename "$f" .log) | $(grep -hE "^\| *[0-9]" "$f" | awk -F'|' '{printf "b%s:%s; ", $3, $5}') | $(grep -hE "^prefill chunk" "$f" | head -1 | grep -oE "[0-9]+ tokens/s") |"
done
