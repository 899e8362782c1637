#!/usr/bin/env bash
# The SASS of a kernel, on this machine, without a GPU: compiles one .cu file
# of spar as sm_80 machine code (from compute_80, as the build does) and
# disassembles the functions whose mangled names match a pattern, so a
# kernel's instruction count and shape can be checked before spending device
# time (the short-row top-k's branchy digit counting and 64-bit index math
# were found and fixed this way, 2026-12-04).
#
#   tools/sass_local.sh kernels/cuda/indexer/topk_short.cu 'ILi8E'        # the SASS
#   tools/sass_local.sh kernels/cuda/indexer/topk_short.cu 'ILi8E' --count
#
# The CUDA 13 toolkit on the development machines has nvcc and ptxas but no
# disassembler. Debian's nvidia-cuda-toolkit (non-free, CUDA 11.8) has
# nvdisasm: its package is fetched once with apt-get download into
# $SPAR_SASS_CACHE (default ~/.cache/spar-sass, nothing is installed). CUDA
# 12.8+ writes cubins whose ELF header (ABI version 8, a new e_flags layout)
# the 11.8 disassembler refuses; the copy handed to it gets the old header
# (ABI version 7, EF_CUDA_SM80 | texmode unified | 64-bit | virtual SM80).
#
# SPAR_SASS_SM=90: the sm_90 machine code ptxas makes from the same
# compute_80 PTX, which is what the H200 runs (the build's
# -gencode arch=compute_80,code=sm_90). Same instructions, other
# scheduling: in the W4A16 streaming kernel ptxas for sm_90 moved 12 of a
# round's 39 loads behind its first mma (2026-12-04), so check load order
# on the code the device runs.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: [SPAR_SASS_SM=80|90] $0 FILE.cu NAME_REGEX [--count]" >&2; exit 2; }
src=$(realpath "$1")
pattern=$2
sm=${SPAR_SASS_SM:-80}
[[ $sm == 80 || $sm == 90 ]] || { echo "SPAR_SASS_SM must be 80 or 90" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SPAR_SASS_CACHE:-$HOME/.cache/spar-sass}
nvdisasm=$cache/usr/bin/nvdisasm
if [[ ! -x $nvdisasm ]]; then
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial"
  printf 'deb http://deb.debian.org/debian bookworm non-free\n' > "$cache/apt/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o "Dir::Etc::SourceParts=-"
            -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache::Archives=$cache/apt/archives"
            -o "APT::Sandbox::User=root")
  apt-get "${apt_opts[@]}" update -qq >&2
  (cd "$cache" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit) >&2
  dpkg-deb -x "$cache"/nvidia-cuda-toolkit_*.deb "$cache"
fi
build=${SPAR_BUILD_DIR:-$root/build-cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/local/cuda/bin/nvcc -I"$root" -I"$build" -gencode arch=compute_80,code=sm_"$sm" --expt-relaxed-constexpr -O3 \
  -DNDEBUG -std=c++17 -x cu -cubin "$src" -o "$tmp/k.cubin"
python3 - "$tmp/k.cubin" "$tmp/old.cubin" "$sm" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
sm = int(sys.argv[3])
b[8] = 7                                        # EI_ABIVERSION
# e_flags: SM, texmode unified, 64-bit, virtual SM (0x00500550 for SM80)
struct.pack_into("<I", b, 0x30, (sm << 16) | 0x0500 | sm)
open(sys.argv[2], "wb").write(b)
PY
"$nvdisasm" -c "$tmp/old.cubin" | awk -v re="$pattern" '/^\.text\./ { p = ($0 ~ re) } p' > "$tmp/k.sass"
if [[ ${3:-} == --count ]]; then
  grep -cE '^\s*/\*[0-9a-f]{4}\*/' "$tmp/k.sass" | sed 's/$/ instructions (static)/'
else
  cat "$tmp/k.sass"
fi
