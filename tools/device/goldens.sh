#!/usr/bin/env bash
# Runs on the GPU host (device tool): writes the transformers goldens of the
# four make-tiny variants into $OUT. Needs the bundle built by
#   cmake --build build && ../shared/scripts/bundle.sh .bundle build/services/cli/spar
#
# QUANT_ONLY=1: only the 4-bit variants (glm5-awq, glm5-gptq, glm5-int4-ct,
# glm5-nvfp4; tests/engine/golden_test.cc picks up each file present).
set -euo pipefail
source .bundle/env.sh
export PYTHONUNBUFFERED=1
models=$(mktemp -d)
for q in awq gptq int4-ct nvfp4; do
  .bundle/bin/spar make-tiny --arch glm5 --quant $q --out "$models/glm5-$q"
  python3 tools/golden/make_goldens.py --model "$models/glm5-$q" --variant "glm5-$q" --out "$OUT/glm5-$q.json"
done
if [[ "${QUANT_ONLY:-0}" == 1 ]]; then
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)' | tee "$OUT/versions.txt"
  exit 0
fi
for arch in glm5 dsv32; do
  for q in bf16 fp8; do
    flag=""; [[ $q == fp8 ]] && flag="--fp8"
    .bundle/bin/spar make-tiny --arch $arch $flag --out "$models/$arch-$q"
    python3 tools/golden/make_goldens.py --model "$models/$arch-$q" --variant "$arch-$q" --out "$OUT/$arch-$q.json"
  done
done
# GLM-5.2-style cross-layer top-k sharing (layers 1 and 3 reuse 0 and 2).
.bundle/bin/spar make-tiny --arch glm5 --layers 4 --indexer-pattern FSFS --out "$models/glm5-shared"
python3 tools/golden/make_goldens.py --model "$models/glm5-shared" --variant glm5-shared --out "$OUT/glm5-shared.json"
python3 -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)' | tee "$OUT/versions.txt"
