#!/usr/bin/env bash
# One device call for the W4A16 decode-size kernels (issue 24): the W4
# kernel tests, then w4a16_bench of two or more builds interleaved (before =
# the tree before the change, after = this tree, or VARIANTS; same bench
# source), then the last build's sweep of every configuration at M <= 16,
# and a table.
# Build here (sm_90 machine code from compute_80):
#   cmake --build build-cuda --target gemm_gpu_test w4a16_bench   (and the same in a worktree of the base)
#   cp <base>/build/bench/gemm/w4a16_bench /tmp/w4a16_bench_before
#   cp build-cuda/bench/gemm/w4a16_bench /tmp/w4a16_bench_after
#   ../shared/scripts/bundle.sh .bundle-w4d /tmp/w4a16_bench_before /tmp/w4a16_bench_after \
#       build-cuda/tests/kernels/gemm/gemm_gpu_test
# On the GPU host: OUT=$OUT bash tools/device/w4_decode.sh   (carry .bundle-w4d)
# Knobs: BUNDLE, VARIANTS ("before after": bins w4a16_bench_<variant>, the first the
# baseline, the last the one swept and profiled), ROUNDS (2), MS (the bench's default M
# list), MOE_TOKENS (1,8,64), SWEEP (1), SWEEP_MOE (1,8,64), TESTS (1),
# NCU="CFG ..." (profile the int4 dense_gate_tp1 M = 1 launch of each named
# configuration under ncu, and dump the first one's SASS with cuobjdump).
# Everything lands in /tmp/w4d, archived to $OUT/w4d.tgz (the device tool
# returns at most 8 files).
set -uo pipefail
BUNDLE=${BUNDLE:-.bundle-w4d}
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
read -r -a variants <<<"${VARIANTS:-before after}"
last=${variants[${#variants[@]}-1]}
ms=()
[[ -n "${MS:-}" ]] && ms=(--ms "$MS")
FINAL_OUT=${OUT:-/tmp/w4d_out}
OUT=/tmp/w4d
rm -rf "$OUT"
mkdir -p "$OUT" "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/w4d.tgz" -C /tmp w4d' EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu --format=csv,noheader >"$OUT/gpu.txt" 2>&1
if [[ "${TESTS:-1}" != 0 ]]; then
  timeout 240 "$B/gemm_gpu_test" --gtest_filter='W4*' --gtest_brief=1 >"$OUT/tests.log" 2>&1
  echo "gemm_gpu_test W4* rc $?" >>"$OUT/tests.log"
fi
for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
  for v in "${variants[@]}"; do
    [[ -x "$B/w4a16_bench_$v" ]] || continue
    timeout 150 "$B/w4a16_bench_$v" "${ms[@]}" --moe-tokens "${MOE_TOKENS:-1,8,64}" --csv "$OUT/$v-$r.csv" >"$OUT/$v-$r.log" 2>&1
    echo "$v-$r rc $?" >>"$OUT/rc.txt"
  done
done
if [[ "${SWEEP:-1}" != 0 ]]; then
  timeout 300 "$B/w4a16_bench_$last" --sweep "${ms[@]}" --moe-tokens "${SWEEP_MOE:-1,8,64}" --csv "$OUT/sweep.csv" >"$OUT/sweep.log" 2>&1
  echo "sweep rc $?" >>"$OUT/rc.txt"
fi
for cfg in ${NCU:-}; do
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 120 "$ncu" -k 'regex:W4A16(Decode|Stream)Kernel' --launch-skip 4 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum \
    "$B/w4a16_bench_$last" --shapes dense_gate_tp1 --ms 1 --formats int4 --force "$cfg" --moe-tokens 0 \
    >"$OUT/ncu_$cfg.txt" 2>&1
  echo "ncu $cfg rc $?" >>"$OUT/rc.txt"
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Issued Warp Per|No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|inst_executed|stalled_(long|short|wait|barrier|math|mio|lg|no_inst|not_sel|selected|dispatch|branch|drain|membar|sleep|tex)[a-z_]*_per" \
    "$OUT/ncu_$cfg.txt" | sed "s/^/$cfg /" | head -40
done
if [[ -n "${NCU:-}" ]]; then
  cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  "$cuobjdump" -sass "$B/w4a16_bench_$last" 2>/dev/null | awk '/Function : .*W4A16(Decode|Stream)Kernel/{p=1} p' >"$OUT/decode_sass.txt"
  echo "sass lines $(wc -l <"$OUT/decode_sass.txt")" >>"$OUT/rc.txt"
fi
cat "$OUT/gpu.txt" "$OUT/rc.txt"
tail -4 "$OUT/tests.log" 2>/dev/null
python3 - "$OUT" "${variants[@]}" <<'PY'
import collections, csv, glob, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
base, last = variants[0], variants[-1]
us = collections.defaultdict(lambda: collections.defaultdict(list))
pct = {}
for v in variants:
    for f in glob.glob(f"{out}/{v}-*.csv"):
        for row in csv.DictReader(open(f)):
            key = (row["format"], row["shape"], int(row["m"]))
            us[key][v].append(float(row["us"]))
            if v == last:
                pct.setdefault(key, []).append(float(row["pct_copy"]))
print("| format | shape | M | " + " | ".join(f"{v} us" for v in variants) + " | " +
      " | ".join(f"{v}/{base}" for v in variants[1:]) + f" | {last} % of copy |")
print("|---|---|---|" + "---|" * (2 * len(variants)))
for key in sorted(us):
    med = {v: statistics.median(us[key][v]) if us[key][v] else float("nan") for v in variants}
    p = statistics.median(pct.get(key, [float("nan")]))
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(f"{med[v]:.2f}" for v in variants) + " | " +
          " | ".join(f"{med[v] / med[base]:.3f}" for v in variants[1:]) + f" | {p:.1f} |")
sweep = f"{out}/sweep.csv"
try:
    rows = list(csv.DictReader(open(sweep)))
except OSError:
    rows = []
best = {}
for row in rows:
    if row["kind"] != "forced":
        continue
    shape, cfg = row["shape"].split("/")
    key = (row["format"], shape, int(row["m"]))
    best.setdefault(key, []).append((float(row["us"]), cfg, float(row["pct_copy"])))
if best:
    print("\n| format | shape | M | best config us (% copy) | next two |")
    print("|---|---|---|---|---|")
    for key in sorted(best):
        r = sorted(best[key])
        print(f"| {key[0]} | {key[1]} | {key[2]} | {r[0][1]} {r[0][0]:.2f} ({r[0][2]:.0f} %) | " +
              ", ".join(f"{c} {u:.2f}" for u, c, _ in r[1:3]) + " |")
PY
