#!/usr/bin/env bash
# FP8 latent rows widened once per prefill step (issue 22, latent_widen.h):
# its kernel tests, the sparse MLA tests, the engine's FP8 parity tests (the
# forced widening against the FP8 kernel and the cpu's FP8 reference), the
# prefill attention at 8-128 heads (bf16 / FP8 kernel / FP8 widened: where
# the policy's head cut lies), then one GLM-5 MoE layer with the FP8 latent
# cache, the widening off and on (same binary, --latent-widening never /
# auto, two rounds interleaved) and with bf16 rows: prefill tokens/s and the
# decode steps (which must not change: decode never widens).
# Bundle .bundle-fw (attention_latent_widen_gpu_test, attention_sparse_mla_gpu_test,
# cuda_parity_gpu_test, attention_bench, engine_bench), carried as
# .bundle-x/fw.tar.xz (a tar of the folder; tools/device/bundle_setup.sh).
set -uo pipefail
out=${OUT:-/tmp/out}/fw
mkdir -p "$out"
BUNDLE=.bundle-fw
source tools/device/bundle_setup.sh
export NCCL_NVLS_ENABLE=0
t() { echo "$1 rc=$2 ok=$(grep -c '^\[       OK \]' $3) failed=$(grep -c '^\[  FAILED  \]' $3) skipped=$(grep -c '^\[  SKIPPED \]' $3) at ${SECONDS}s"; grep -E '^\[  FAILED|Failure' $3 | head -8; }
timeout 60 $B/attention_latent_widen_gpu_test > $out/widen_test.log 2>&1; t widen $? $out/widen_test.log
timeout 200 $B/attention_sparse_mla_gpu_test > $out/mla_test.log 2>&1; t sparse_mla $? $out/mla_test.log
grep -B3 -A10 Failure $out/mla_test.log | head -40
timeout 200 $B/cuda_parity_gpu_test --gtest_filter='AllVariants/*Fp8*' > $out/parity.log 2>&1; t parity_fp8 $? $out/parity.log
grep -E 'widened vs read|FP8 caches' $out/parity.log | head -20
timeout 150 $B/attention_bench --prefill-only --prefill-heads ${HEADS:-8,16,32,64,128} > $out/attn.log 2>&1; echo "attention_bench rc=$? at ${SECONDS}s"
timeout 120 $B/engine_bench --make-geometry glm5-full --make-layers 4 --model $m --layers 3:4 --batches 1 \
  --contexts 1024 --reps 3 > $out/make.log 2>&1; echo "make rc=$? at ${SECONDS}s"
eb() {  # name, args...
  local n=$1; shift
  timeout 150 $B/engine_bench --model $m --layers 3:4 --batches ${BATCHES:-1,64} --contexts ${CONTEXTS:-8192} "$@" \
    > $out/eng_$n.log 2>&1; echo "engine $n rc=$? at ${SECONDS}s"
}
for r in 1 2; do
  eb never_$r --latent fp8 --latent-widening never
  eb auto_$r --latent fp8
done
eb bf16 --latent bf16
[[ ${PROFILE:-1} == 1 ]] && eb auto_prof --latent fp8 --batches 1 --op-profile
tar czf ${OUT:-/tmp/out}/fw.tgz -C $out .
echo "== prefill attention (us)"; grep -E '^\| (bf16|fp8)' $out/attn.log | awk -F'|' '$3 ~ /4096/' | cut -d'|' -f2-6
for f in $out/eng_*.log; do echo "== ${f##*/}"; grep -E '^prefill|^\| [0-9]+ \| [0-9]+ \|' $f | cut -c1-150 | head -6; done
grep -E 'sparse_mla' $out/eng_auto_prof.log | head -8
