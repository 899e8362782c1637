#!/usr/bin/env bash
# One device call for new W8A16 tile configurations: the GEMM tests of every
# configuration (gemm_gpu_test W8A16* and Moe*: each loops over
# kTileConfigs), then gemm_bench's sweep of every (configuration, split) over
# the GLM-5 projections at MS (64,128,256) and the grouped MoE at
# MOE_TOKENS (512,4096), weights tiled across rows as the engine holds them;
# last, per shape and M, each configuration's best time against the
# heuristic's plan; with w4a16_bench in the bundle, the W4A16 GEMMs at the
# same sizes as planned and with each configuration of W4_FORCE (W4T64R4)
# forced. Bundle gemm_bench, gemm_gpu_test and w4a16_bench (sm_90 from
# compute_80) into .bundle-ts, tar it into an ignored folder and carry it:
#   ../shared/scripts/bundle.sh .bundle-ts build-cuda/bench/gemm/gemm_bench \
#       build-cuda/tests/kernels/gemm/gemm_gpu_test build-cuda/bench/gemm/w4a16_bench
#   mkdir -p .bundle-y && tar cJf .bundle-y/ts.tar.xz .bundle-ts
# On the GPU host: python3 -c 'import tarfile; tarfile.open(".bundle-y/ts.tar.xz").extractall(".")'
#                  OUT=$OUT bash tools/device/tile_sweep.sh
# Knobs: MS, MOE_TOKENS, SHAPES, TESTS (1). Logs in $OUT/ts.
set -uo pipefail
BUNDLE=${BUNDLE:-.bundle-ts}
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
out=${OUT:-/tmp/out}/ts
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader >"$out/gpu.txt" 2>&1
if [[ ${TESTS:-1} != 0 ]]; then
  timeout 180 "$B/gemm_gpu_test" --gtest_filter='W8A16*:Moe*:W4*' --gtest_brief=1 >"$out/tests.log" 2>&1
  echo "gemm_gpu_test W8A16*:Moe*:W4* rc $? at ${SECONDS}s" >>"$out/rc.txt"
fi
timeout 200 "$B/gemm_bench" --tiled across-rows --no-moe --sweep \
  --shapes "${SHAPES:-mlp_gate_up,o_proj,q_b,exp_gate_up,fused_a}" --ms "${MS:-64,128,256}" >"$out/dense.log" 2>&1
echo "gemm_bench dense sweep rc $? at ${SECONDS}s" >>"$out/rc.txt"
timeout 100 "$B/gemm_bench" --tiled across-rows --shapes none --sweep --moe-tokens "${MOE_TOKENS:-512,4096}" \
  >"$out/moe.log" 2>&1
echo "gemm_bench moe sweep rc $? at ${SECONDS}s" >>"$out/rc.txt"
if [[ -x $B/w4a16_bench ]]; then
  for force in "" ${W4_FORCE:-W4T64R4}; do
    # shellcheck disable=SC2086  # the --force pair splits on purpose
    timeout 90 "$B/w4a16_bench" --shapes "${W4_SHAPES:-dense_gate_tp1,expert_gate_up}" --ms "${MS:-64,128,256}" \
      --moe-tokens "${MOE_TOKENS:-512,4096}" ${force:+--force $force} --csv "$out/w4_${force:-plan}.csv" \
      >"$out/w4_${force:-plan}.log" 2>&1
    echo "w4a16_bench ${force:-plan} rc $? at ${SECONDS}s" >>"$out/rc.txt"
  done
fi
tar czf "${OUT:-/tmp/out}/ts.tgz" -C "$out" .
cat "$out/gpu.txt" "$out/rc.txt"
tail -3 "$out/tests.log" 2>/dev/null
grep -E "^  sweep " "$out/dense.log"
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
for name in ("dense.log", "moe.log"):
    try:
        lines = open(f"{out}/{name}").read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = re.match(r"\s*sweepall (\S+) M=(\d+)(.*)", line)
        if not m:
            continue
        best = {}
        for item in m.group(3).split():
            parts = item.split(":")
            key, t = ":".join(parts[:-1]), float(parts[-1])
            # dense "T64R4F/s2", grouped "gu:T64R4F/s1": the configuration, per GEMM
            cfg = re.sub(r"/s\d+$", "", key)
            if cfg not in best or t < best[cfg][0]:
                best[cfg] = (t, key)
        ranked = sorted(best.items(), key=lambda kv: kv[1][0])
        print(f"{m.group(1)} M={m.group(2)}: " + ", ".join(f"{v[1]} {v[0]:.1f}" for _, v in ranked[:8]))
PY
python3 - "$out" <<'PY'
import csv, glob, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{out}/w4_*.csv")):
    tag = os.path.basename(f)[3:-4]
    for r in csv.DictReader(open(f)):
        rows.setdefault((r["kind"], r["format"], r["shape"], r["m"]), {})[tag] = float(r["us"])
for k, d in sorted(rows.items()):
    print(" ".join(k), " ".join(f"{t}={v:.1f}" for t, v in sorted(d.items())))
PY
