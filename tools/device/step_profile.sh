#!/usr/bin/env bash
# Runs on a one-GPU host (device tool, kind nvidia-h200): where the time of
# one decode step goes, kernel by kernel, in one call (~5 min):
#   1. engine_bench of the bundle on a GLM-5-geometry MoE layer at
#      SPAR_P_BATCHES (default 1) x SPAR_P_CONTEXT (default 8192): the
#      graph-replay time per layer;
#   2. the same under ncu (node-level graph profiling, clocks and caches left
#      alone, one metric: each kernel's duration), then the last decode step's
#      kernels as a table: name, duration, and their sum against the step's
#      graph time (the rest is launch gaps and dependency ramps);
#   3. (SPAR_P_MOE=0 skips it) gemm_bench's grouped MoE sweep at
#      SPAR_P_MOE_TOKENS (every decode tile forced, gate_up + down per stream
#      launch), for the grouped heuristic.
# Needs the bundle SPAR_P_BUNDLE (default .bundle-p: engine_bench, gemm_bench),
# unpacked or carried as .bundle-x/<name>.tar.xz.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
BUNDLE=${SPAR_P_BUNDLE:-.bundle-p}
source tools/device/bundle_setup.sh
# The checkpoint of an earlier script in the same call is reused.
if [[ ! -f $m/config.json ]]; then
  timeout 150 $B/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 --batches 1 \
    --contexts 1024 --reps 3 > "$out/bench_make.log" 2>&1
  echo "make rc=$?"
fi
batches=${SPAR_P_BATCHES:-1}
timeout 150 $B/engine_bench --model $m --layers 3:4 --batches $batches --contexts ${SPAR_P_CONTEXT:-8192} ${SPAR_P_BENCH_ARGS:-} \
  > "$out/bench.log" 2>&1
echo "engine_bench rc=$?"; grep -E "^\| *[0-9]|rror" "$out/bench.log" | head -6
for b in ${batches//,/ }; do
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 240 $ncu --graph-profiling node --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $B/engine_bench --model $m --layers 3:4 --batches $b --contexts ${SPAR_P_CONTEXT:-8192} --reps 2 ${SPAR_P_BENCH_ARGS:-} \
    > "$out/ncu_b$b.csv" 2> "$out/ncu_b$b.err"
  echo "ncu batch $b rc=$?"
  python3 - "$out/ncu_b$b.csv" "$b" <<'PY' | tee "$out/step_kernels_b$b.txt"
import csv, sys
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1000.0))
names = [n for n, _ in rows]
period = 0
for p in range(8, min(400, len(names) // 2 + 1)):
    if names[-p:] == names[-2 * p:-p]:
        period = p
        break
if not period:
    print("no repeating decode step found in", len(rows), "kernels"); sys.exit(0)
step = rows[-period:]
total = sum(t for _, t in step)
print(f"batch {sys.argv[2]}: {period} kernels in the last decode step, {total:.1f} us of kernel time")
for n, t in step:
    print(f"  {t:8.2f}  {n[:110]}")
PY
done
if [[ ${SPAR_P_MOE:-1} == 1 ]]; then
  timeout 200 $B/gemm_bench --quick --moe-tokens ${SPAR_P_MOE_TOKENS:-1,2,4,8,16,32,64} \
    --shapes none > "$out/gemm_moe.log" 2>&1
  echo "gemm_bench moe rc=$?"
  grep -E "sweepall|moe_gemms|moe_layer" "$out/gemm_moe.log" | head -30
fi
for b in ${batches//,/ }; do head -1 "$out/step_kernels_b$b.txt"; done
tgz=$(mktemp /tmp/prof.XXXXXX.tgz)
( cd "$out" && tar czf "$tgz" . ; find . -mindepth 1 -delete )
mv "$tgz" "$out/logs.tgz"
