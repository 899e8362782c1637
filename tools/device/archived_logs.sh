# Sourced by the two-build device scripts (w4_engine.sh, decode_kernel_ab.sh)
# after they set NAME: the bundle's env (BUNDLE, default .bundle-$NAME) and B
# (its bin/), the logs folder OUT=/tmp/$NAME, archived on exit (a timeout's
# TERM included) to the caller's $OUT/$NAME.tgz, and the GPU and its clocks in
# $OUT/gpu.txt.
BUNDLE=${BUNDLE:-.bundle-$NAME}
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
export SPAR_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
FINAL_OUT=${OUT:-/tmp/${NAME}_out}
OUT=/tmp/$NAME
rm -rf "$OUT"
mkdir -p "$OUT" "$FINAL_OUT"
# shellcheck disable=SC2064  # the paths are fixed now, on purpose
trap "tar czf '$FINAL_OUT/$NAME.tgz' -C /tmp '$NAME'" EXIT
trap 'exit 143' TERM
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader >"$OUT/gpu.txt" 2>&1
