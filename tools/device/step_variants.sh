#!/usr/bin/env bash
# One device call comparing several builds of the decode step (one GPU):
# engine_bench of the FP8 GLM-5 MoE layer from every build, interleaved on one
# checkpoint, then each build's GPU timeline of a replayed step (engine_bench
# --timeline: where the step's time goes between kernels), then the bundle's
# test binaries. Build each tree (sm_90 from compute_80) and copy its
# engine_bench to /tmp/engine_bench_<variant> (the first named is the base),
# test binaries as /tmp/<name>_gpu_test[_<variant>], then
#   ../shared/scripts/bundle.sh .bundle-sv /tmp/engine_bench_base /tmp/engine_bench_<v>... /tmp/*_gpu_test*
#   mkdir -p .bundle-z && tar cJf .bundle-z/sv.tar.xz .bundle-sv
# On the GPU host (carry .bundle-z):
#   python3 -c 'import tarfile; tarfile.open(".bundle-z/sv.tar.xz").extractall(".")'
#   OUT=$OUT VARIANTS='base v1 v2' bash tools/device/step_variants.sh
# A variant may be a flag of one build instead (two_build_common.sh's bench:
# BIN_<variant>, FLAGS_<variant>), e.g. VARIANTS='base calm' BIN_calm=base
# FLAGS_calm=--no-urgent-branch.
# Knobs: VARIANTS (required, base first), BATCHES (1,8), CONTEXTS (8192),
# ROUNDS (2), QUANT (unset: the FP8 layer; awq, gptq, int4-ct or nvfp4: the
# layer with those 4-bit weights, engine_bench --make-quant), TESTS (1; 0
# skips the bundle's tests, e.g. for a second call on another layer),
# FILTER_<test name> (a gtest filter for that binary, e.g.
# FILTER_cuda_parity_gpu_test). Tests run first (fast ones) and last (SLOW:
# cuda_parity, speculative), so a call cut short still brings the timings
# back. Logs archived to $OUT/sv.tgz; a table last.
set -uo pipefail
NAME=sv
source tools/device/two_build_common.sh
read -r -a variants <<<"${VARIANTS:?name the builds, base first}"
tests=${TESTS:-1}
[[ $tests != 0 ]] && run_tests 0
m=/tmp/glm5sv
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && m=/dev/shm/glm5sv
args=(--model "$m" --layers 3:4 --batches "${BATCHES:-1,8}" --contexts "${CONTEXTS:-8192}")
engine_rounds "${variants[0]}" --make-geometry glm5-full --make-layers 4 ${QUANT:+--make-quant "$QUANT"}
for v in "${variants[@]}"; do
  bench 150 "$v" "${args[@]}" --reps 5 --timeline >"$OUT/timeline_$v.log" 2>&1
  echo "timeline $v rc $?" >>"$OUT/rc.txt"
done
rm -rf "$m"
[[ $tests != 0 ]] && run_tests 1
cat "$OUT/gpu.txt" "$OUT/rc.txt"
echo "| variant | round | context | batch | step ms (graph) |"
for v in "${variants[@]}"; do
  for f in "$OUT"/engine_"$v"-*.log; do
    round=${f##*-}
    grep -E "^\| *[0-9]+ \| *[0-9]+ \| [0-9.]+ \|" "$f" | awk -F'|' -v v="$v" -v r="${round%.log}" \
      '{printf "| %s | %s | %s | %s | %s |\n", v, r, $2, $3, $4}'
  done
done
for v in "${variants[@]}"; do
  echo "== timeline $v"
  { grep -E "timeline of|^span|^  idle" "$OUT/timeline_$v.log" || echo "(no timeline in $OUT/timeline_$v.log)"; } |
    head -n 14
done
