#!/usr/bin/env bash
# One device call for the wide sparse-MLA tile (sparse_mla.cu: 32-128 heads a
# GPU, the TP 1 prefill and decode of a GLM-5 layer; issue 21's prefill) of
# two builds, before / after a change to it:
#   1. the after build's attention_sparse_mla_gpu_test (every head count and
#      forced plan against kernels/ref), attention_sparse_mla_plan_test and
#      attention_absorb_gemm_gpu_test when bundled; for each EXTRA variant
#      v, every *_gpu_test_<v> bundled;
#   2. attention_bench of both builds (and attention_bench_<v> of the EXTRA
#      variants, "v1 v2 ...") interleaved over ROUNDS (2): prefill of 4096
#      tokens at PREFILL_HEADS (32,64,128), decode at BATCHES (1,64,128) x
#      HEADS (16,32,64,128), graph replays, and the MLA absorptions
#      (--absorb-only: each build's own choice, "engine", against its
#      64-row tile);
#   3. ncu of one bf16 64-head prefill launch of each build (NCU=0 skips):
#      duration, tensor-pipe and shared-memory activity, stall reasons;
#   4. prefill_ab.sh: the engine's 4096-token prefill chunk of one FP8 GLM-5
#      MoE layer, before / after (and the EXTRA variants with an
#      engine_bench_<v>) interleaved (PREFILL_ROUNDS, ROUNDS; 0 skips), with
#      batch 64 decode in the same runs.
# Build here (sm_90 machine code from compute_80): attention_bench and
# engine_bench of the base tree and of this tree, this tree's
# attention_sparse_mla_gpu_test and attention_sparse_mla_plan_test; copy them
# to DIR/{attention_bench,engine_bench}_{before,after} and DIR/<test>, then
#   ../shared/scripts/bundle.sh .bundle-mwa DIR/*
#   tar cJf .bundle-z/mwa.tar.xz .bundle-mwa
# On the GPU host (carry .bundle-z): OUT=$OUT bash tools/device/mla_wide_ab.sh
# Knobs: TESTS (1; 0 skips step 1), ROUNDS (2; 0 skips step 2), MLA and
# ABSORB (the variants whose sparse MLA / absorption tables step 2 runs;
# default every variant), NCU (1), PREFILL_ROUNDS (ROUNDS; 0 skips step 4).
# Each attention_bench run takes ~20-30 s: split long lists over two calls
# (e.g. ROUNDS=1 PREFILL_ROUNDS=0, then TESTS=0 ROUNDS=0 NCU=0 PREFILL_ROUNDS=2).
# Logs under $OUT/mwa; a table last.
set -uo pipefail
[[ -d .bundle-mwa ]] || python3 -c 'import tarfile; tarfile.open(".bundle-z/mwa.tar.xz").extractall(".")'
out=${OUT:-/tmp/out}/mwa
mkdir -p "$out"
B=.bundle-mwa/bin
read -ra extra <<<"${EXTRA:-}"
variants=(before after "${extra[@]}")
read -ra mla <<<"${MLA:-${variants[*]}}"
read -ra absorb <<<"${ABSORB:-${variants[*]}}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
(
  # shellcheck source=/dev/null
  source .bundle-mwa/env.sh
  tests=()
  [[ ${TESTS:-1} != 0 ]] && tests=(attention_sparse_mla_gpu_test attention_sparse_mla_plan_test attention_absorb_gemm_gpu_test)
  for v in "${extra[@]}"; do
    [[ ${TESTS:-1} != 0 ]] || break
    for t in "$B"/*_gpu_test_"$v"; do tests+=("${t##*/}"); done
  done
  for t in "${tests[@]}"; do
    [[ -x $B/$t ]] || continue
    timeout 240 "$B/$t" --gtest_brief=1 >"$out/$t.log" 2>&1
    echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED)' "$out/$t.log" | tr '\n' ' ')" | tee -a "$out/tests.txt"
    grep -E '^\[  FAILED|Failure|Which is|Expected' "$out/$t.log" | head -8
  done
  for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
    for v in "${mla[@]}"; do
      [[ -x $B/attention_bench_$v ]] || continue
      timeout 200 "$B/attention_bench_$v" --prefill-only --prefill-heads "${PREFILL_HEADS:-32,64,128}" \
        >"$out/prefill-$v-$r.log" 2>&1
      echo "prefill $v-$r rc $?"
      timeout 200 "$B/attention_bench_$v" --decode-only --batches "${BATCHES:-1,64,128}" --heads "${HEADS:-16,32,64,128}" \
        >"$out/decode-$v-$r.log" 2>&1
      echo "decode $v-$r rc $?"
    done
    for v in "${absorb[@]}"; do
      [[ -x $B/attention_bench_$v ]] || continue
      timeout 200 "$B/attention_bench_$v" --absorb-only >"$out/absorb-$v-$r.log" 2>&1
      echo "absorb $v-$r rc $?"
    done
  done
  if [[ ${NCU:-1} != 0 ]]; then
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    for v in "${mla[@]}"; do
      [[ -x $B/attention_bench_$v ]] || continue
      timeout 200 "$ncu" --kernel-name-base mangled -k regex:SparseMlaKernelILi64ELb0E --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --metrics smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio \
        "$B/attention_bench_$v" --prefill-only --prefill-heads 64 >"$out/ncu_$v.txt" 2>&1
      echo "ncu $v rc $?"
      grep -E "Duration|Issued Warp Per|No Eligible|inst_executed|hmma|wavefronts|stalled_[a-z_]*_per_issue" \
        "$out/ncu_$v.txt" | sed "s/^ */$v /" | head -16
    done
  fi
)
python3 - "$out" "${ROUNDS:-2}" "${variants[@]}" <<'PY'
import collections, statistics, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| attention_bench, µs (rounds) | " + " | ".join(variants) + " | " +
      " | ".join(f"{v}/before" for v in variants[1:]) + " |")
print("|---" * (2 * len(variants)) + "|")
us = collections.defaultdict(lambda: collections.defaultdict(list))
for kind in ("prefill", "decode", "absorb"):
    for v in variants:
        for r in range(1, rounds + 1):
            try:
                lines = open(f"{out}/{kind}-{v}-{r}.log").read().splitlines()
            except OSError:
                continue
            for line in lines:
                c = [x.strip() for x in line.strip().strip("|").split("|")]
                if kind == "absorb" and len(c) >= 5 and c[0] in ("q absorption", "un-absorption"):
                    # | op | heads | tokens | engine us | 64-row tile us | ...: the build's own choice
                    us[(kind, c[0], int(c[2]), int(c[1]))][v].append(float(c[3]))
                    continue
                if len(c) < 5 or not (c[0].startswith("bf16") or c[0].startswith("fp8")):
                    continue
                # decode: the graph replay column (11th); prefill: per launch (5th)
                val = c[10] if kind == "decode" and len(c) >= 11 else c[4]
                us[(kind, c[0], int(c[1]), int(c[2]))][v].append(float(val))
fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs) or "-"
for key in sorted(us):
    d = us[key]
    base = statistics.median(d["before"]) if d["before"] else None
    ratios = [f"{statistics.median(d[v]) / base:.3f}" if d[v] and base else "-" for v in variants[1:]]
    print(f"| {key[0]} {key[1]} {key[2]} x {key[3]} heads | " + " | ".join(fmt(d[v]) for v in variants) + " | " +
          " | ".join(ratios) + " |")
PY
# The device returns only a few files of $OUT: every log in one archive, and
# the tests' lines again after the table (the reply keeps the output's tail).
tar czf "$OUT/mwa.tgz" -C "$out" .
[[ -f $out/tests.txt ]] && cat "$out/tests.txt"
[[ ${PREFILL_ROUNDS:-${ROUNDS:-2}} == 0 ]] && exit 0
engines=()
for v in "${variants[@]}"; do [[ -x $B/engine_bench_$v ]] && engines+=("$v"); done
# prefill_ab.sh prints each run's rc and one line per engine log (its prefill chunk); the batch-64 rows are
# added here. Four engines x two rounds take ~5 minutes.
BUNDLE=.bundle-mwa VARIANTS="${engines[*]}" CHUNKS=4096 ROUNDS=${PREFILL_ROUNDS:-${ROUNDS:-2}} EXTRA_ARGS="--batches 64" OUT=$OUT \
  timeout 480 bash tools/device/prefill_ab.sh 2>&1
grep -HE "^\| 8192 \| 64 \|" "$OUT"/pab/eng_*.log | sed 's#.*/pab/##' | cut -c1-140
