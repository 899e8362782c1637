#!/usr/bin/env bash
# One device call for the gemm family: GPU tests, benchmark (+ heuristic
# sweep and the read-only / launch-cost probes), PyTorch peers, joined table
# last. Run from the repo root on the GPU host after bundling:
#   /work/shared/scripts/bundle.sh .bundle-gemm build-gemm/tests/kernels/gemm/gemm_gpu_test \
#       build-gemm/bench/gemm/gemm_bench
#   OUT=/tmp/out bash bench/gemm/run_device.sh
# Knobs (environment): BENCH_ARGS (default --sweep), PEER_ARGS (e.g. --ms 1,16),
# PEERS=0 to skip the peers, NCU=1 to also profile decode plans of 12288x6144
# at M = 1 with Nsight Compute (--clock-control none; NCU_PLANS, default
# "t8w4:5,2" = name:config,splits), SASS=REGEX to dump the machine code of the
# kernels whose names match, BUNDLE (default .bundle-gemm).
set -uo pipefail
BUNDLE=${BUNDLE:-.bundle-gemm}
source "$BUNDLE/env.sh"
export PYTHONUNBUFFERED=1
B=$BUNDLE/bin
OUT=${OUT:-/tmp/gemm_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >"$OUT/tests.log" 2>&1
timeout "${TEST_TIMEOUT:-120}" "$B/gemm_gpu_test" --gtest_brief=1 >>"$OUT/tests.log" 2>&1
echo "gemm_gpu_test exit $?" >>"$OUT/tests.log"
timeout "${BENCH_TIMEOUT:-150}" "$B/gemm_bench" --csv "$OUT/ours.csv" --probe ${BENCH_ARGS:---sweep} >"$OUT/bench.log" 2>&1
echo "gemm_bench exit $?" >>"$OUT/bench.log"
if [[ "${PEERS:-1}" != 0 ]]; then
  timeout "${PEER_TIMEOUT:-90}" python3 bench/gemm/peer_gemm.py --csv "$OUT/peer.csv" ${PEER_ARGS:-} >"$OUT/peer.log" 2>&1
  echo "peer exit $?" >>"$OUT/peer.log"
fi
python3 bench/gemm/report.py "$OUT/ours.csv" $([[ -f "$OUT/peer.csv" ]] && echo "$OUT/peer.csv") >"$OUT/table.md" 2>&1
if [[ -n "${NCU:-}" ]]; then
  NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  # One launch per plan (default: T8W4 with 2 splits, the M = 1 plan), with
  # the stall reasons per issued instruction.
  for plan in ${NCU_PLANS:-t8w4:5,2}; do
    name=${plan%%:*} force=${plan#*:}
    echo "##### ncu $name (--force $force)" >>"$OUT/ncu.txt"
    timeout "${NCU_TIMEOUT:-60}" "$NCU_BIN" --clock-control none --kernel-name regex:W8A16 --launch-skip 30 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_active.avg" \
      "$B/gemm_bench" --shapes mlp_gate_up --ms 1 --no-moe --force "$force" >>"$OUT/ncu.txt" 2>&1
    echo "ncu $name exit $?" >>"$OUT/ncu.txt"
  done
fi
if [[ -n "${SASS:-}" ]]; then  # machine code of the kernels matching SASS (a regex), for offline study
  CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  "$CUOBJDUMP" -sass "$B/gemm_bench" 2>&1 | awk -v re="$SASS" '/Function : /{f = ($0 ~ re)} f' >"$OUT/sass.txt"
fi
echo "=== tests"; grep -E "FAILED|Failure|PASSED|exit|error" "$OUT/tests.log" | head -40
echo "=== probes"; grep -E "^probe|^device" "$OUT/bench.log"
echo "=== sweep: see bench.log (sweepall lines)"; grep -E "^  sweep " "$OUT/bench.log" | head -40
echo "=== bench tail"; grep -vE "sweep" "$OUT/bench.log" | tail -4; tail -2 "$OUT/peer.log" 2>/dev/null
head -2 "$OUT/tests.log"
if [[ -n "${NCU:-}" ]]; then
  echo "=== ncu"
  grep -hE "^#####|exit|Duration|DRAM Throughput|Achieved Active Warps|Issued Warp|Warp Cycles Per Issued|stalled_(long_scoreboard|short_scoreboard|wait|mio_throttle|lg_throttle|math_pipe|not_selected|no_instruction|barrier|membar|dispatch|branch)|inst_executed.sum|cycles_active.avg" "$OUT/ncu.txt" | head -60
fi
echo "=== table"; cat "$OUT/table.md"
