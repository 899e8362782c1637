#!/usr/bin/env bash
# The split merge + un-absorption kernels side by side, at the kernel level,
# in a short device call (one GPU): attention_merge_unabsorb_gpu_test whole
# (every kernel bit for bit against merge-then-GEMM), then the same test under
# ncu on the engine's batch-1 cases (GLM-5, 64 heads, 32 splits, bf16 and FP8
# rows: test cases 0 and 1, five repeats), where each case launches the
# merge-first kernel (twice: kAuto and kMergeFirst) and the streamed one:
# every launch's duration and DRAM throughput, caches and clocks left alone
# (the partials are in L2, as in a decode step). Build and bundle:
#   ninja -C build-cuda attention_merge_unabsorb_gpu_test
#   ../shared/scripts/bundle.sh .bundle-mt build-cuda/tests/kernels/attention/attention_merge_unabsorb_gpu_test
#   mkdir -p .bundle-y && tar cJf .bundle-y/mt.tar.xz .bundle-mt
# On the GPU host (carry .bundle-y): OUT=$OUT bash tools/device/merge_unabsorb_ncu.sh
set -uo pipefail
python3 -c 'import tarfile; tarfile.open(".bundle-y/mt.tar.xz").extractall(".")'
source .bundle-mt/env.sh
T=.bundle-mt/bin/attention_merge_unabsorb_gpu_test
export SPAR_SOURCE_DIR=$PWD
out=${OUT:-/tmp/mt_out}
mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader
"$T" >"$out/test.log" 2>&1
echo "test rc=$?"
grep -E "^\[  (PASSED|FAILED)" "$out/test.log"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 120 "$ncu" --cache-control none --clock-control none --kernel-name regex:"MergeUnabsorb|BatchedGemmKernel" \
  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv --print-units base \
  "$T" --gtest_filter='*BitForBit/0:*BitForBit/1' --gtest_repeat=5 >"$out/ncu.csv" 2>&1
echo "ncu rc=$?"
python3 tools/device/ncu_kernel_table.py test="$out/ncu.csv"
