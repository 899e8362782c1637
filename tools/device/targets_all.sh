#!/usr/bin/env bash
# Every open issue's performance target in one device call (one GPU, one
# build), for sessions whose device time is short and whose GPU kind is not
# known in advance: the measurements most worth having run first, so a call
# cut short still brings them back.
#   1. engine_bench, FP8 GLM-5 MoE layer, TP 1, 8K (issue 21: batch 1 / 8 /
#      64 against the roofline; issue 22: batch 64 with the FP8 latent cache
#      against bf16 rows, interleaved ROUNDS times on one checkpoint), batch 1
#      at LONG contexts, prefill of 4096-token chunks;
#   2. gemm_bench, weights tiled across rows (W8A16 12288x6144 and o_proj at
#      M = 1, 8, 16, 64, 2048 against cuBLAS; routing + permutation and the
#      MoE at 1, 8, 64 tokens);
#   3. indexer_bench topk (top-k of one 8K / 32K row, 64 x 128K);
#   4. attention_bench --decode-only (FP8 sparse MLA at 64 x 8 heads against
#      bf16 rows);
#   5. w4a16_bench (issue 24: int4 / NVFP4 at M = 1, 16, 2048, grouped MoE);
#   6. an AWQ layer (issue 24: batch 1, 8K) if AWQ=1 (default) and time is left.
# Build (sm_90 from compute_80) engine_bench, gemm_bench, indexer_bench,
# attention_bench and w4a16_bench of one tree, copy engine_bench to
# /tmp/bXX/engine_bench_base and the others beside it, then
#   ../shared/scripts/bundle.sh .bundle-ta /tmp/bXX/*
#   mkdir -p .bundle-z && tar cJf .bundle-z/ta.tar.xz .bundle-ta
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/ta.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/targets_all.sh
# Knobs: ROUNDS (engine, 2), BATCHES (1,8,64), LONG (32768,131072; empty
# skips), AWQ (1), AWQ_BEFORE_S (420: the AWQ layer only if the call has run
# less than this). Logs archived to $OUT/ta.tgz; tables last.
set -uo pipefail
NAME=ta
source tools/device/two_build_common.sh
variants=(base fp8)
# shellcheck disable=SC2034  # read by two_build_common.sh's bench (BIN_ / FLAGS_<variant>)
BIN_fp8=base FLAGS_fp8='--latent fp8'
glm5_grid base glm5ta
long_contexts base
rm -rf "$GLM5_MODEL"
timeout 120 "$B/gemm_bench" --tiled across-rows --shapes mlp_gate_up,o_proj --ms 1,8,16,64,2048 \
  --moe-tokens 1,8,64 >"$OUT/gemm.log" 2>&1
echo "gemm_bench rc $?" >>"$OUT/rc.txt"
timeout 120 "$B/indexer_bench" topk >"$OUT/topk.log" 2>&1
echo "indexer_bench topk rc $?" >>"$OUT/rc.txt"
timeout 120 "$B/attention_bench" --decode-only --batches 64,128 --heads 8,64 >"$OUT/mla.log" 2>&1
echo "attention_bench rc $?" >>"$OUT/rc.txt"
timeout 150 "$B/w4a16_bench" --shapes dense_gate_tp1 --ms 1,16,2048 >"$OUT/w4.log" 2>&1
echo "w4a16_bench rc $?" >>"$OUT/rc.txt"
if [[ ${AWQ:-1} != 0 && $SECONDS -lt ${AWQ_BEFORE_S:-420} ]]; then
  a=${GLM5_MODEL}_awq
  bench 200 base --model "$a" --make-geometry glm5-full --make-layers 4 --make-quant awq --layers 3:4 --batches 1 \
    --contexts 8192 >"$OUT/engine_awq.log" 2>&1
  echo "engine awq rc $?" >>"$OUT/rc.txt"
  rm -rf "$a"
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
grep -E "^prefill chunk" "$OUT"/engine_*.log 2>/dev/null | sed "s|^$OUT/||"
engine_table "$OUT"/engine_*-[0-9].log "$OUT/engine_long.log" "$OUT/engine_awq.log"
grep -E "^(mlp_gate_up|o_proj) .*M=(1|8|16|64|2048) |cublas bf16|moe_route|moe_router" "$OUT/gemm.log" | cut -c1-120
grep -E "^1 x (8192|32768)|^64 x 131072" "$OUT/topk.log" | head -8
grep -E "^\| (fp8|bf16) \| (64|128) \| (8|64) \|" "$OUT/mla.log"
grep -E "^(dense|grouped)|cublas|M=2048" "$OUT/w4.log" | head -12
