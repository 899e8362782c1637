#!/usr/bin/env bash
# The test command (README "Quick start", and .ci/run): installs what is
# missing, builds, and runs every test. GPU tests report SKIPPED without a
# GPU. CUDA code is emitted for sm_80 only here to keep the compile short;
# the default build emits sm_80, sm_86, sm_90 and compute_80 PTX. Then the
# sanitizer and fuzzing pass (tools/sanitize.sh; SPAR_SKIP_SANITIZE=1 skips it
# for a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
tools/build.sh -DCMAKE_BUILD_TYPE=Release -DSPAR_CUDA_CODE=sm80
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
# The same cpu suite under ASan + UBSan, then the fuzzers (a second build).
[[ "${SPAR_SKIP_SANITIZE:-0}" == 1 ]] || tools/sanitize.sh
