#!/usr/bin/env bash
# One device call for the FP8 sparse-MLA decode kernels (issue 22): the
# sparse MLA tests, attention_bench of two builds interleaved at decode
# sizes (before = the base tree, after = this tree; same bench source),
# optionally ncu of the FP8 8-head decode launch of both, and a table last.
# Build here (sm_90 machine code from compute_80):
#   ninja -C build-cuda attention_sparse_mla_gpu_test attention_sparse_mla_plan_test attention_bench
#   (and attention_bench in a worktree of the base, with this tree's bench source)
#   cp <base>/build/bench/attention/attention_bench /tmp/attention_bench_before
#   cp build-cuda/bench/attention/attention_bench /tmp/attention_bench_after
#   ../shared/scripts/bundle.sh .bundle-mla /tmp/attention_bench_before /tmp/attention_bench_after \
#       build-cuda/tests/kernels/attention/attention_sparse_mla_gpu_test \
#       build-cuda/tests/kernels/attention/attention_sparse_mla_plan_test
#   tar cJf .bundle-x/mla.tar.xz .bundle-mla
# On the GPU host: OUT=$OUT bash tools/device/mla_fp8.sh   (carry .bundle-x)
# Knobs: ROUNDS (2), BATCHES (1,16,64,128), HEADS (8,16,64), TESTS (1: also
# indexer_gpu_test, gemm_gpu_test and cuda_parity_gpu_test when bundled),
# NCU (1: profile the FP8 batch-64 x 8-head launch of every build; NCU_SOURCE=0
# skips the after build's per-instruction samples),
# EXTRA="name ..." (more bench binaries in the bundle, timed like "after").
# Logs land in /tmp/mla, archived to $OUT/mla.tgz (the device tool returns
# at most 8 files).
set -uo pipefail
BUNDLE=${BUNDLE:-.bundle-mla}
out=/tmp/mla
rm -rf "$out"
mkdir -p "$out" "${OUT:-/tmp/mla_out}"
trap 'tar czf "${OUT:-/tmp/mla_out}/mla.tgz" -C /tmp mla' EXIT
source tools/device/bundle_setup.sh
if [[ "${TESTS:-1}" != 0 ]]; then
  timeout 200 "$B/attention_sparse_mla_gpu_test" --gtest_brief=1 >"$out/sparse_mla_gpu_test.log" 2>&1
  echo "attention_sparse_mla_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/sparse_mla_gpu_test.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|lse\[|rel L2|Which is|Expected" "$out/sparse_mla_gpu_test.log" | head -20
  timeout 60 "$B/attention_sparse_mla_plan_test" --gtest_brief=1 >"$out/plan_test.log" 2>&1
  echo "attention_sparse_mla_plan_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/plan_test.log" | tr '\n' ' ')"
  if [[ -x "$B/indexer_gpu_test" ]]; then  # the shared e4m3 widening
    timeout 200 "$B/indexer_gpu_test" --gtest_brief=1 >"$out/indexer_gpu_test.log" 2>&1
    echo "indexer_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/indexer_gpu_test.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED" "$out/indexer_gpu_test.log" | head -10
  fi
  if [[ -x "$B/gemm_gpu_test" ]]; then  # the MoE permutation's block scan
    timeout 200 "$B/gemm_gpu_test" --gtest_brief=1 --gtest_filter=-*GroupedSplitK* >"$out/gemm_gpu_test.log" 2>&1
    echo "gemm_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/gemm_gpu_test.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED" "$out/gemm_gpu_test.log" | head -10
  fi
  if [[ -x "$B/cuda_parity_gpu_test" ]]; then  # the engine's MoE and FP8 latent paths
    timeout 240 "$B/cuda_parity_gpu_test" >"$out/parity.log" 2>&1
    echo "cuda_parity_gpu_test rc=$? ok=$(grep -c '^\[       OK \]' "$out/parity.log") failed=$(grep -c '^\[  FAILED  \]' "$out/parity.log") skipped=$(grep -c '^\[  SKIPPED \]' "$out/parity.log")"
    grep -E "^\[  FAILED" "$out/parity.log" | head -10
  fi
fi
args=(--decode-only --batches "${BATCHES:-1,16,64,128}" --heads "${HEADS:-8,16,64}")
for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
  for v in before after ${EXTRA:-}; do
    [[ -x "$B/attention_bench_$v" ]] || continue
    timeout 200 "$B/attention_bench_$v" "${args[@]}" >"$out/bench-$v-$r.log" 2>&1
    echo "bench $v round $r rc=$?"
  done
done
if [[ "${NCU:-1}" != 0 ]]; then
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  k=NarrowFp8KernelILi8E  # the FP8 8-head decode launch of every build since session 12
  for v in before after ${EXTRA:-}; do
    timeout 150 "$ncu" --kernel-name-base mangled -k "regex:$k" --launch-skip 5 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
      --section LaunchStats --section MemoryWorkloadAnalysis \
      --metrics smsp__inst_executed.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio \
      "$B/attention_bench_$v" --decode-only --batches 64 --heads 8 >"$out/ncu_$v.txt" 2>&1
    echo "ncu $v rc=$?"
    grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Issued Warp Per|No Eligible|Warp Cycles Per Issued|inst_executed|stalled_[a-z_]*_per_issue" \
      "$out/ncu_$v.txt" | sed "s/^ */$v /" | head -24
  done
  # Per-instruction stall samples of the after build's 8-head kernel (NCU_SOURCE=0 skips).
  if [[ "${NCU_SOURCE:-1}" != 0 ]]; then
    timeout 150 "$ncu" --kernel-name-base mangled -k regex:NarrowFp8KernelILi8E --launch-skip 5 --launch-count 1 \
      --section SourceCounters --section WarpStateStats -o "$out/narrow8" -f \
      "$B/attention_bench_after" --decode-only --batches 64 --heads 8 >"$out/ncu_src.log" 2>&1
    echo "ncu source rc=$?"
    timeout 60 "$ncu" --import "$out/narrow8.ncu-rep" --page source --csv --print-source sass >"$out/narrow8_source.csv" 2>&1
    echo "ncu source page rc=$? lines $(wc -l <"$out/narrow8_source.csv")"
    cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    $cuobjdump -sass "$B/attention_bench_after" 2>/dev/null | awk '/Function : .*NarrowFp8KernelILi8E/{p=1} /Function : .*NarrowFp8KernelILi16E/{p=0} p' >"$out/narrow8_sass.txt"
    echo "narrow8 sass lines $(wc -l <"$out/narrow8_sass.txt"), MOVM $(grep -c MOVM "$out/narrow8_sass.txt"), HMMA $(grep -c HMMA "$out/narrow8_sass.txt"), BAR $(grep -c 'BAR.SYNC' "$out/narrow8_sass.txt")"
  fi
fi
echo
echo "| fmt | batch | heads | build | tile x splits | graph-replay us (per round) | per-launch us |"
echo "|---|---|---|---|---|---|---|"
# shellcheck disable=SC2086  # EXTRA is a list of names
python3 - "$out" ${EXTRA:-} <<'PY'
import collections, glob, re, statistics, sys
out = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(lambda: {"graph": [], "us": [], "plan": ""}))
for f in sorted(glob.glob(f"{out}/bench-*-*.log")):
    v = re.match(r".*/bench-(.+)-\d+\.log", f).group(1)
    for line in open(f):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 12 or c[0] not in ("bf16", "fp8"):
            continue
        key = (c[0], int(c[1]), int(c[2]))
        d = rows[key][v]
        d["plan"] = c[3]
        d["us"].append(float(c[4]))
        d["graph"].append(float(c[10]))
order = ["before", "after"] + sys.argv[2:]
for key in sorted(rows):
    for v in order:
        d = rows[key].get(v)
        if not d or not d["graph"]:
            continue
        print(f"| {key[0]} | {key[1]} | {key[2]} | {v} | {d['plan']} | {' / '.join(f'{x:.1f}' for x in d['graph'])} | {statistics.median(d['us']):.1f} |")
PY
