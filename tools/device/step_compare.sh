#!/usr/bin/env bash
# One device call (one GPU): where a decode step's time went between an older
# build and this tree, op by op, for a step that got slower on one GPU kind
# (the H200's batch 64: 2.207 ms in session 22, 2.62 in session 43).
#   1. engine_bench of the FP8 GLM-5 MoE layer, interleaved ROUNDS times at
#      BATCHES (default 1,64) x 8K: old (the older build), main (this tree),
#      rowmajor (this tree with --weight-tiling row-major);
#   2. each variant's eager op profile (--op-profile) at the same shapes,
#      joined into one table by op label (ops renamed between the builds show
#      on one side only);
#   3. this tree's graph timeline (--timeline): the branches as they ran.
# Build both trees (sm_90 from compute_80), copy each engine_bench to
# DIR/engine_bench_{old,main}, then
#   ../shared/scripts/bundle.sh .bundle-sc DIR/engine_bench_old DIR/engine_bench_main
#   tar cJf .bundle-z/sc.tar.xz .bundle-sc
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/sc.tar.xz").extractall(".")'
#   OUT=$OUT bash tools/device/step_compare.sh
# Logs archived into $OUT/sc.tgz (two_build_common.sh); tables last.
set -uo pipefail
NAME=sc
source tools/device/two_build_common.sh
BATCHES=${BATCHES:-1,64}
# shellcheck disable=SC2034  # read by two_build_common.sh's bench (BIN_ / FLAGS_<variant>)
BIN_rowmajor=main FLAGS_rowmajor="--weight-tiling row-major"
variants=(old main rowmajor)
glm5_grid main sc
for v in "${variants[@]}"; do
  bench 200 "$v" "${args[@]}" --op-profile >"$OUT/op_$v.log" 2>&1
  echo "op profile $v rc $?" >>"$OUT/rc.txt"
done
bench 150 main "${args[@]}" --timeline >"$OUT/timeline_main.log" 2>&1
echo "timeline main rc $?" >>"$OUT/rc.txt"
rm -rf "$GLM5_MODEL"

cat "$OUT/gpu.txt" "$OUT/rc.txt"
engine_table "$OUT"/engine_*-[0-9].log
python3 tools/device/op_profile_join.py old="$OUT/op_old.log" main="$OUT/op_main.log" rowmajor="$OUT/op_rowmajor.log"
