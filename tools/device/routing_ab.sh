#!/usr/bin/env bash
# The leaner permutation block (each pair placed by its counting atomic, 32-bit
# indices, counts cleared before the arrival) and the block scan with one
# barrier fewer (every warp scans the warp totals), against the base tree, in
# one device call (one GPU): the kernels' GPU tests, route_probe of both trees
# (tools/device/probes: the launch's parts and the permutation block step by
# step), gemm_bench's routing and grouped GEMMs of both builds interleaved,
# indexer_bench's top-k (its scans) of both builds, engine_bench of the FP8
# GLM-5 MoE layer of both builds interleaved on one checkpoint plus this
# build with the FP8 latent cache (issue 22: batch 64 with FP8 rows against
# bf16's), on an H200 the long contexts of issue 21, then the decode-graph
# parity and speculative tests.
# Build (sm_90 from compute_80) gemm_bench, indexer_bench and engine_bench of
# the base tree and of this one as /tmp/bXX/<bench>_{base,lean}, the probe of
# each tree as route_probe_{base,lean} (build command in the probe's header;
# the base tree's own probe), this tree's gemm_gpu_test, indexer_gpu_test,
# cuda_parity_gpu_test and speculative_gpu_test beside them, then
#   ../shared/scripts/bundle.sh .bundle-ra /tmp/bXX/*
#   mkdir -p .bundle-z && tar cJf .bundle-z/ra.tar.xz .bundle-ra
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/ra.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/routing_ab.sh
# Knobs: VARIANTS (builds, first = baseline; default 'base lean': binaries
# <bench>_<variant>, route_probe_<variant>), TESTS, GEMM, TOPK, ENGINE,
# SLOW_TESTS (1 each; 0 skips), ROUNDS
# (engine, 2), GEMM_ROUNDS (2), TOPK_ROUNDS (2), PROBE_ROUNDS (2), BATCHES
# (1,8,64), LONG (H200 only, 32768,131072; empty skips), ENGINE_BEFORE_S (300).
# Logs archived to $OUT/ra.tgz; tables last.
set -uo pipefail
NAME=ra
source tools/device/two_build_common.sh
FILTER_indexer_gpu_test=${FILTER_indexer_gpu_test:-'*TopK*'}
FILTER_cuda_parity_gpu_test=${FILTER_cuda_parity_gpu_test:-'*DecodeGraphsReplayLikeEagerSteps*:*SparseSelectionsAgreeWithCpu*:*OverlappedBranches*'}
FILTER_speculative_gpu_test=${FILTER_speculative_gpu_test:-'*GreedyEqualsPlainGreedy*'}
read -r -a builds <<<"${VARIANTS:-base lean}"
first=${builds[0]} last=${builds[${#builds[@]}-1]}
[[ ${TESTS:-1} != 0 ]] && run_tests 0
for ((r = 1; r <= ${PROBE_ROUNDS:-2}; ++r)); do
  for v in "${builds[@]}"; do
    timeout 60 "$B/route_probe_$v" >"$OUT/probe_$v-$r.log" 2>&1
    echo "route_probe $v-$r rc $?" >>"$OUT/rc.txt"
  done
done
if [[ ${GEMM:-1} != 0 ]]; then
  BUNDLE=$BUNDLE OUT=$OUT/gab VARIANTS="${builds[*]}" MS=64 SHAPES=fused_a \
    MOE_TOKENS=1,8,64 ROUNDS=${GEMM_ROUNDS:-2} bash tools/device/gemm_ab.sh >"$OUT/gemm_ab.txt" 2>&1
  echo "gemm_ab rc $?" >>"$OUT/rc.txt"
fi
if [[ ${TOPK:-1} != 0 ]]; then
  for ((r = 1; r <= ${TOPK_ROUNDS:-2}; ++r)); do
    for v in "${builds[@]}"; do
      timeout 120 "$B/indexer_bench_$v" topk >"$OUT/topk_$v-$r.log" 2>&1
      echo "indexer_bench topk $v-$r rc $?" >>"$OUT/rc.txt"
    done
  done
fi
# The engine rounds only where the call has time left for them (SECONDS:
# this script's elapsed time).
if [[ ${ENGINE:-1} != 0 && $SECONDS -lt ${ENGINE_BEFORE_S:-300} ]]; then
  variants=("$first" "$last" fp8)
  BIN_fp8=$last
  FLAGS_fp8='--latent fp8'
  glm5_grid "$last" glm5ra
  grep -q H200 "$OUT/gpu.txt" && long_contexts "$last"
  rm -rf "$GLM5_MODEL"
fi
[[ ${SLOW_TESTS:-1} != 0 ]] && run_tests 1
cat "$OUT/gpu.txt" "$OUT/rc.txt"
grep -h "FAILED" "$OUT"/*_gpu_test*.log 2>/dev/null | head -20
for f in "$OUT"/probe_*.log; do
  echo "== $(basename "$f" .log)"
  grep -E "^\| [0-9]" "$f"
done
grep -E "^\|" "$OUT/gemm_ab.txt" 2>/dev/null | grep -vE "\| (cublas|torch)" | head -30
for f in "$OUT"/topk_*.log; do
  [[ -f $f ]] && echo "== $(basename "$f" .log)" && grep -E "^topk" "$f" | head -12
done
engine_table "$OUT"/engine_*-[0-9].log "$OUT/engine_long.log"
