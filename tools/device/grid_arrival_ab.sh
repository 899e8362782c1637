#!/usr/bin/env bash
# The grid arrivals (kernels/cuda/common/grid_arrival.cuh: one thread's
# acquire-release atomic after a block barrier, where every thread issued a
# sequentially consistent fence) and the fused block scans, against the base
# tree, in one device call (one GPU): the kernels' GPU tests, gemm_bench of
# both builds interleaved (tools/device/gemm_ab.sh: routing + permutation at
# 1 / 8 / 64 tokens, the grouped and split-K GEMMs), indexer_bench's top-k
# (the row-group path's barriers) of both builds interleaved, the
# decode-graph parity and speculative tests, then engine_bench of the FP8
# GLM-5 MoE layer of both builds interleaved on one checkpoint.
# Build (sm_90 from compute_80) gemm_bench, indexer_bench and engine_bench of
# the base tree and of this one as /tmp/bXX/<bench>_{base,acq}, this tree's
# gemm_gpu_test, indexer_gpu_test, cuda_parity_gpu_test and
# speculative_gpu_test beside them, then
#   ../shared/scripts/bundle.sh .bundle-ga /tmp/bXX/*
#   mkdir -p .bundle-z && tar cJf .bundle-z/ga.tar.xz .bundle-ga
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/ga.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/grid_arrival_ab.sh
# gemm_gpu_test runs whole. Knobs: TESTS, GEMM, TOPK, SLOW_TESTS, ENGINE (1
# each; 0 skips), ROUNDS (engine, 2), GEMM_ROUNDS (3), TOPK_ROUNDS (2),
# BATCHES (1,8,64).
# Logs archived to $OUT/ga.tgz; tables last.
set -uo pipefail
NAME=ga
source tools/device/two_build_common.sh
FILTER_indexer_gpu_test=${FILTER_indexer_gpu_test:-'*TopK*'}
FILTER_cuda_parity_gpu_test=${FILTER_cuda_parity_gpu_test:-'*DecodeGraphsReplayLikeEagerSteps*:*SparseSelectionsAgreeWithCpu*:*OverlappedBranches*'}
FILTER_speculative_gpu_test=${FILTER_speculative_gpu_test:-'*GreedyEqualsPlainGreedy*'}
[[ ${TESTS:-1} != 0 ]] && run_tests 0
if [[ ${GEMM:-1} != 0 ]]; then
  BUNDLE=$BUNDLE OUT=$OUT/gab VARIANTS='base acq' MS=24,64 SHAPES=o_proj,q_b,kv_b,exp_gate_up,fused_a \
    MOE_TOKENS=1,8,64 ROUNDS=${GEMM_ROUNDS:-3} bash tools/device/gemm_ab.sh >"$OUT/gemm_ab.txt" 2>&1
  echo "gemm_ab rc $?" >>"$OUT/rc.txt"
fi
if [[ ${TOPK:-1} != 0 ]]; then
  for ((r = 1; r <= ${TOPK_ROUNDS:-2}; ++r)); do
    for v in base acq; do
      timeout 120 "$B/indexer_bench_$v" topk >"$OUT/topk_$v-$r.log" 2>&1
      echo "indexer_bench topk $v-$r rc $?" >>"$OUT/rc.txt"
    done
  done
fi
[[ ${SLOW_TESTS:-1} != 0 ]] && run_tests 1
# The engine rounds only where the call has time left for them (SECONDS:
# this script's elapsed time; ENGINE_BEFORE_S, default 330).
if [[ ${ENGINE:-1} != 0 && $SECONDS -lt ${ENGINE_BEFORE_S:-330} ]]; then
  variants=(base acq)
  glm5_grid acq glm5ga
  rm -rf "$GLM5_MODEL"
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
grep -h "FAILED" "$OUT"/*_gpu_test*.log 2>/dev/null | head -20
grep -E "^\|" "$OUT/gemm_ab.txt" 2>/dev/null | grep -vE "\| (cublas|torch)" | head -40
for f in "$OUT"/topk_*.log; do
  [[ -f $f ]] && echo "== $(basename "$f" .log)" && grep -E "^topk" "$f" | head -12
done
for f in "$OUT"/engine_*.log; do
  [[ -f $f ]] && echo "== $(basename "$f" .log)" && grep -E "^\| *[0-9]" "$f" | head -6
done
