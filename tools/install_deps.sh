#!/usr/bin/env bash
# Installs what spar needs on Debian 12 (idempotent; as root or through sudo).
# The CUDA toolkit is not a Debian package: the CUDA part builds when nvcc is
# found at /usr/local/cuda, and is skipped otherwise.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git python3
  libabsl-dev libgtest-dev libgmock-dev nlohmann-json3-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libpcre2-dev libicu-dev
)
# The text layer's parity tests run Hugging Face's tokenizers and jinja
# through Node (npm packages pinned in tests/npm).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install_deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
