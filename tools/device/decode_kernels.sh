#!/usr/bin/env bash
# Runs on a one-GPU host (device tool, kind nvidia-h200): the decode-step
# kernels under change, checked then timed, in one call (~5 min):
#   1. gemm_gpu_test (every W8A16 tile configuration against kernels/ref,
#      the decode candidates and their folded twins included) and
#      attention_sparse_mla_gpu_test (bf16 and FP8 latent rows);
#   2. gemm_bench --sweep at decode sizes (M = 1, 4, 8, 16, every shape and
#      every (configuration, split)) plus the 64-token MoE sweep;
#   3. attention_bench (sparse MLA decode bf16 vs FP8 in the same run);
#   4. with SPAR_K_AB=1 and .bundle-before (an older engine_bench): engine_bench
#      of both on the same GLM-5-geometry checkpoint, interleaved A B A B at
#      SPAR_K_BATCHES (1,8,64) x 8K context, then cuda_parity_gpu_test (new);
#   5. a table last: per shape and M the heuristic's plan against the best
#      plan of the sweep.
# Needs the bundle (SPAR_K_BUNDLE, default .bundle-k) built by
#   ../shared/scripts/bundle.sh .bundle-k build/tests/kernels/gemm/gemm_gpu_test \
#       build/bench/gemm/gemm_bench build/tests/kernels/attention/attention_sparse_mla_gpu_test \
#       build/bench/attention/attention_bench [build/bench/engine/engine_bench ...]
# (unpacked, or carried as .bundle-x/<name>.tar.xz). SPAR_K_MS overrides the
# sweep's M list; SPAR_K_SWEEP=0 times the heuristic's plans only.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
BUNDLE=${SPAR_K_BUNDLE:-.bundle-k}
source tools/device/bundle_setup.sh
timeout 200 $B/gemm_gpu_test --gtest_brief=1 > "$out/gemm_gpu_test.log" 2>&1
echo "gemm_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/gemm_gpu_test.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is" "$out/gemm_gpu_test.log" | head -20
timeout 120 $B/attention_sparse_mla_gpu_test --gtest_brief=1 > "$out/sparse_mla_gpu_test.log" 2>&1
echo "attention_sparse_mla_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/sparse_mla_gpu_test.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|lse\[|rel L2" "$out/sparse_mla_gpu_test.log" | head -20
sweep=--sweep; [[ ${SPAR_K_SWEEP:-1} == 1 ]] || sweep=
timeout 200 $B/gemm_bench --quick $sweep --ms ${SPAR_K_MS:-1,4,8,16} --csv "$out/gemm.csv" > "$out/gemm_bench.log" 2>&1
echo "gemm_bench rc=$?"
timeout 150 $B/attention_bench > "$out/attention_bench.log" 2>&1
echo "attention_bench rc=$?"
echo
echo "## attention summary"
sed -n '/^## summary/,$p' "$out/attention_bench.log" | grep -E "^\| (fmt|bf16|fp8) \| (64|1|16|128) \| (8|64) " | head -12
echo
if [[ ${SPAR_K_AB:-0} == 1 && -x .bundle-before/bin/engine_bench ]]; then
  timeout 150 $B/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 --batches 1 \
    --contexts 1024 --reps 3 > "$out/bench_make.log" 2>&1
  for round in 1 2; do
    for side in before new; do
      bin=$B/engine_bench; [[ $side == before ]] && bin=.bundle-before/bin/engine_bench
      ( [[ $side == before ]] && source .bundle-before/env.sh; timeout 150 $bin --model $m --layers 3:4 \
          --batches ${SPAR_K_BATCHES:-1,8,64} --contexts 8192 > "$out/bench_${side}_$round.log" 2>&1 )
      echo "engine_bench $side round $round rc=$?"
    done
  done
  timeout 150 $B/engine_bench --model $m --layers 3:4 --batches 1 --contexts 8192 --op-profile \
    > "$out/bench_op_profile.log" 2>&1
  for f in "$out"/bench_before_*.log "$out"/bench_new_*.log; do
    echo "== $(basename $f)"; grep -E "^\| *[0-9]|rror" "$f" | head -8
  done
fi
if [[ -x $B/cuda_parity_gpu_test ]]; then
  timeout 200 $B/cuda_parity_gpu_test > "$out/cuda_parity_gpu_test.log" 2>&1
  echo "cuda_parity_gpu_test rc=$? ok=$(grep -c '^\[       OK \]' "$out/cuda_parity_gpu_test.log") failed=$(grep -c '^\[  FAILED  \]' "$out/cuda_parity_gpu_test.log")"
  grep -E "^\[  FAILED|Failure" "$out/cuda_parity_gpu_test.log" | head -10
fi
echo
echo "## W8A16 decode: the heuristic's plan against the sweep's best (graph replay, us)"
python3 - "$out/gemm_bench.log" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r"\s+sweep (\S+)\s+M=(\d+)\s+best (\S+)\s+([\d.]+) us \(heuristic (\S+)\s+([\d.]+) us, ([\d.]+)x", line)
    if m:
        print(f"| {m[1]} | M={m[2]} | heuristic {m[5]} {m[6]} | best {m[3]} {m[4]} | {m[7]}x |")
    m = re.match(r"(\S+)\s+M=(\d+)\s+N=(\d+)\s+K=(\d+)\s+(\S+)\s+([\d.]+) us.*?([\d.]+)% roof", line)
    if m and "sweep" not in line:
        print(f"| {m[1]} | M={m[2]} | {m[5]} | {m[6]} us | {m[7]} % of copy |")
PY
