#!/usr/bin/env bash
# A/B of W8A16 GEMM kernels across commits in one device call: gemm_bench of
# each variant, interleaved over ROUNDS rounds, then the median per shape.
# Build gemm_bench in each tree, copy it to DIR/gemm_bench_<variant> (and the
# newest tree's gemm_gpu_test to DIR/gemm_gpu_test_<last variant>), then
#   ../shared/scripts/bundle.sh .ab-gemm/b DIR/*
# and on the GPU host: VARIANTS="before fixed" bash tools/device/gemm_ab.sh
# Knobs: BUNDLE (.ab-gemm/b), VARIANTS (first = baseline), ROUNDS (3),
# MS (64,2048), SHAPES (o_proj,mlp_gate_up,exp_gate_up,q_b), MOE_TOKENS
# (unset: no MoE; e.g. 1,8,64). A variant may be a flag of another build's
# binary: BIN_<variant> (the build it runs, default the variant itself) and
# FLAGS_<variant> (e.g. VARIANTS='base tiled' BIN_tiled=base FLAGS_tiled=--tiled).
set -u
BUNDLE=${BUNDLE:-.ab-gemm/b}
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
OUT=${OUT:-/tmp/gemm_ab}
mkdir -p "$OUT"
read -r -a variants <<<"${VARIANTS:-before fixed}"
last=${variants[${#variants[@]}-1]}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader >"$OUT/gpu.txt" 2>&1
if [[ -x "$B/gemm_gpu_test_$last" ]]; then
  timeout 90 "$B/gemm_gpu_test_$last" --gtest_filter='Sm80_*' --gtest_brief=1 >"$OUT/test.log" 2>&1
  echo "gemm_gpu_test rc $?" >>"$OUT/test.log"
  tail -3 "$OUT/test.log"
fi
moe=(--no-moe)
[[ -n ${MOE_TOKENS:-} ]] && moe=(--moe-tokens "$MOE_TOKENS")
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for v in "${variants[@]}"; do
    bin_var=BIN_$v flags_var=FLAGS_$v
    read -r -a flags <<<"${!flags_var:-}"
    timeout 90 "$B/gemm_bench_${!bin_var:-$v}" "${flags[@]}" --ms "${MS:-64,2048}" \
      --shapes "${SHAPES:-o_proj,mlp_gate_up,exp_gate_up,q_b}" "${moe[@]}" \
      --csv "$OUT/$v-$r.csv" >"$OUT/$v-$r.log" 2>&1
    echo "$v-$r rc $?" >>"$OUT/rc.txt"
  done
done
python3 - "$OUT" "${variants[@]}" <<'PY'
import collections, csv, glob, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
us = collections.defaultdict(lambda: collections.defaultdict(list))
for v in variants:
    for f in glob.glob(f"{out}/{v}-*.csv"):
        for row in csv.DictReader(open(f)):
            us[(row["name"], row["m"], row["n"], row["k"])][v].append(float(row["us"]))
base = variants[0]
print("| shape | m | " + " | ".join(f"{v} us" for v in variants) + " | " +
      " | ".join(f"{v}/{base}" for v in variants[1:]) + " |")
for (name, m, n, k), d in us.items():
    med = {v: statistics.median(d[v]) if d[v] else float("nan") for v in variants}
    print(f"| {name} {n}x{k} | {m} | " + " | ".join(f"{med[v]:.1f}" for v in variants) + " | " +
          " | ".join(f"{med[v] / med[base]:.3f}" for v in variants[1:]) + " |")
PY
