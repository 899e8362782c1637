#!/usr/bin/env bash
# One device call for a change of the GEMM planners (which tile a shape
# gets), two builds: before = the base tree, after = this tree.
#   1. the after build's GPU tests (every *_gpu_test of the bundle but the
#      slow ones), then engine_bench of the FP8 GLM-5 MoE layer from both
#      builds interleaved on one checkpoint (BATCHES, default 1,8,64, and the
#      4096-token prefill chunk engine_bench always times), via
#      decode_kernel_ab.sh;
#   2. gemm_bench of both builds (and of a third, gemm_bench_mid, if the
#      bundle has one: a tree between the two) as planned, weights tiled
#      across rows, at MS over SHAPES and the grouped MoE at MOE_TOKENS,
#      interleaved ROUNDS times (gemm_ab.sh), then the after build's sweep of
#      every grouped configuration at SWEEP_MOE_TOKENS, and its planned
#      grouped GEMMs at TAIL_MOE_TOKENS (4096) with each tail split of
#      MOE_TAILS forced (gemm_bench --moe-tail ROWS,CONFIG; default none);
#   3. w4a16_bench of both builds as planned at W4_MS, and the after build
#      with each of W4_FORCE forced at W4_FORCE_MS (and the grouped GEMMs at
#      W4_FORCE_MOE tokens, default none);
#   4. the slow GPU tests (cuda_parity), last, each under SLOW_TIMEOUT (200 s).
# PARTS (default "engine gemm sweep w4 slow") picks steps: engine = 1, gemm and
# sweep = 2's two halves, w4 = 3, slow = 4.
# Build both trees (sm_90 from compute_80); copy engine_bench, gemm_bench and
# w4a16_bench of each to DIR/<name>_before and DIR/<name>_after, then
#   ../shared/scripts/bundle.sh .bundle-pab DIR/* build-cuda/tests/kernels/gemm/gemm_gpu_test \
#       build-cuda/tests/kernels/cuda_parity_gpu_test
#   tar cJf .bundle-z/pab.tar.xz .bundle-pab
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/pab.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/tile_plan_ab.sh
# Logs in /tmp/pab (gab/, w4/, the engine's in dk.tgz), archived on exit (a
# timeout's TERM included) into $OUT/pab.tgz, the one file under $OUT: the
# device tool brings back a limited number of files (session 43 got 8 of
# 28). Tables last.
set -uo pipefail
export BUNDLE=${BUNDLE:-.bundle-pab} SPAR_SOURCE_DIR=$PWD
ARCHIVE=${OUT:-/tmp/pab_out}/pab.tgz
FINAL=/tmp/pab
rm -rf "$FINAL"
mkdir -p "$FINAL/gab" "$FINAL/w4" "$(dirname "$ARCHIVE")"
# shellcheck disable=SC2064  # the paths are fixed now, on purpose
trap "tar czf '$ARCHIVE' -C '$FINAL' ." EXIT
trap 'exit 143' TERM
B=$BUNDLE/bin
PARTS=" ${PARTS:-engine gemm sweep w4 slow} "
part() { [[ $PARTS == *" $1 "* ]]; }

# 1: tests and the engine A/B (the slow tests, which decode_kernel_ab.sh
# would run after its benchmarks, are held back: they run at the end).
slow_tests=${SLOW:-cuda_parity_gpu_test speculative_gpu_test}
part engine && (SLOW="$slow_tests" SLOW_TESTS=0 BATCHES=${BATCHES:-1,8,64} KERNELS='' OUT=$FINAL \
  timeout 300 bash tools/device/decode_kernel_ab.sh) >"$FINAL/engine_ab.txt" 2>&1
part engine && grep -H "prefill chunk" /tmp/dk/engine_*.log >>"$FINAL/engine_ab.txt"

# 2: the GEMMs as planned, then the grouped sweep.
gemm_variants="before"
[[ -x $B/gemm_bench_mid ]] && gemm_variants+=" mid"
(source "$BUNDLE/env.sh"
 tiled="--tiled across-rows"
 part gemm && VARIANTS="$gemm_variants after" FLAGS_before=$tiled FLAGS_mid=$tiled FLAGS_after=$tiled ROUNDS=${ROUNDS:-2} \
   MS=${MS:-1,16,64,128,256,2048} SHAPES=${SHAPES:-mlp_gate_up,o_proj,q_b,exp_gate_up,fused_a,kv_b} \
   MOE_TOKENS=${MOE_TOKENS:-1,64,2048,4096} OUT=$FINAL/gab timeout 240 bash tools/device/gemm_ab.sh \
   >"$FINAL/gab/table.txt" 2>&1
 part sweep || exit 0
 timeout "${SWEEP_TIMEOUT:-90}" "$B/gemm_bench_after" --tiled across-rows --shapes none --sweep \
   --moe-tokens "${SWEEP_MOE_TOKENS:-2048}" >"$FINAL/gab/moe_sweep.log" 2>&1
 echo "moe sweep rc $?" >>"$FINAL/gab/rc.txt"
 for tail in ${MOE_TAILS:-}; do
   timeout 60 "$B/gemm_bench_after" --tiled across-rows --shapes none --moe-tokens "${TAIL_MOE_TOKENS:-4096}" \
     --moe-tail "$tail" >"$FINAL/gab/moe_tail_$tail.log" 2>&1
   echo "moe tail $tail rc $?" >>"$FINAL/gab/rc.txt"
 done)

# 3: the W4A16 GEMMs as planned by both builds, then forced.
part w4 && (source "$BUNDLE/env.sh"
 for v in before after; do
   timeout 60 "$B/w4a16_bench_$v" --shapes "${W4_SHAPES:-dense_gate_tp1,expert_gate_up,o_proj_tp8}" \
     --ms "${W4_MS:-64,96,128,192,256,384,512}" --moe-tokens 0 --csv "$FINAL/w4/$v.csv" >"$FINAL/w4/$v.log" 2>&1
   echo "w4a16_bench $v rc $?" >>"$FINAL/w4/rc.txt"
 done
 for f in ${W4_FORCE:-W4T64R4 W4P128T}; do
   timeout 60 "$B/w4a16_bench_after" --shapes "${W4_SHAPES:-dense_gate_tp1,expert_gate_up,o_proj_tp8}" \
     --ms "${W4_FORCE_MS:-384,512,1024}" --moe-tokens "${W4_FORCE_MOE:-0}" --force "$f" --csv "$FINAL/w4/$f.csv" >"$FINAL/w4/$f.log" 2>&1
   echo "w4a16_bench force $f rc $?" >>"$FINAL/w4/rc.txt"
 done)

# 4: the slow tests.
part slow && (source "$BUNDLE/env.sh"
 for t in $slow_tests; do
   [[ -x $B/$t ]] || continue
   timeout "${SLOW_TIMEOUT:-200}" "$B/$t" --gtest_brief=1 >"$FINAL/$t.log" 2>&1
   echo "$t rc $? failed $(grep -c '^\[  FAILED  \]' "$FINAL/$t.log")" >>"$FINAL/slow_rc.txt"
 done)

tail -40 "$FINAL/engine_ab.txt"
cat "$FINAL/gab/rc.txt" "$FINAL/gab/table.txt" 2>/dev/null | tail -40
grep -E "^\s*sweepall" "$FINAL/gab/moe_sweep.log"
grep -H "^moe_gemms" "$FINAL"/gab/moe_tail_*.log 2>/dev/null
cat "$FINAL/w4/rc.txt"
python3 - "$FINAL/w4" <<'PY'
import csv, glob, os, sys
rows = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/*.csv")):
    tag = os.path.basename(f)[:-4]
    for r in csv.DictReader(open(f)):
        rows.setdefault((r["format"], r["shape"], int(r["m"])), {})[tag] = float(r["us"])
for k, d in sorted(rows.items()):
    print(*k, " ".join(f"{t}={v:.1f}" for t, v in sorted(d.items())),
          f"after/before={d['after'] / d['before']:.3f}" if "after" in d and "before" in d else "")
PY
cat "$FINAL/slow_rc.txt" 2>/dev/null
