#!/usr/bin/env bash
# The split merge + un-absorption kernel at the kernel level, in a short
# device call (one GPU): attention_merge_unabsorb_gpu_test whole (the merged
# launch bit for bit against merge-then-GEMM), then the same test under ncu on
# the engine's batch-1 cases (GLM-5, 64 heads, 32 splits, bf16 and FP8 rows:
# test cases 0 and 1, five repeats): the merged kernel's and the plain
# un-absorption GEMM's durations and DRAM throughput, caches and clocks left
# alone (the partials are in L2, as in a decode step). Build and bundle:
#   ninja -C build-cuda attention_merge_unabsorb_gpu_test
#   ../shared/scripts/bundle.sh .bundle-mt build-cuda/tests/kernels/attention/attention_merge_unabsorb_gpu_test
#   mkdir -p .bundle-y && tar cJf .bundle-y/mt.tar.xz .bundle-mt
# On the GPU host (carry .bundle-y): OUT=$OUT bash tools/device/merge_unabsorb_ncu.sh
set -uo pipefail
# BUNDLE: another bundle that holds the test (decode_kernel_ab.sh's .bundle-dk,
# when one call runs both scripts); unset, .bundle-y/mt.tar.xz is unpacked.
BUNDLE=${BUNDLE:-.bundle-mt}
[[ -d $BUNDLE ]] || python3 -c 'import tarfile; tarfile.open(".bundle-y/mt.tar.xz").extractall(".")'
source "$BUNDLE/env.sh"
T=$BUNDLE/bin/attention_merge_unabsorb_gpu_test
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
