#!/usr/bin/env bash
# Installs what spar needs on Debian 12 (idempotent; as root or through sudo).
# The CUDA toolkit is not a Debian package: the CUDA part builds when nvcc is
# found at /usr/local/cuda, and is skipped otherwise.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git python3
  libabsl-dev libgtest-dev libgmock-dev nlohmann-json3-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libpcre2-dev libicu-dev curl
  # The HTTP server (services/http): Boost.Beast over Boost.Asio (header-only)
  # and zlib for gzip/deflate request bodies; cpp-httplib is the tests' client.
  libboost-dev zlib1g-dev libcpp-httplib-dev
  # Observability and deployment checks (tests/deploy): promtool and a
  # Prometheus server scrape a local cluster; kubectl renders the Kustomize
  # overlays (Debian's kubernetes-client, see below).
  prometheus
  # libssl-dev: API-key hashing and TLS file checks (services/security);
  # openssl: the TLS tests make their certificates with it.
  libssl-dev openssl
  # The fuzzing and sanitizer pass (tools/sanitize.sh): clang-14 with its
  # runtime libraries (libFuzzer, ASan, UBSan) and llvm-14 (the symbolizer
  # that turns sanitizer reports into file:line).
  clang-14 libclang-rt-14-dev llvm-14
)
# The text layer's parity tests run Hugging Face's tokenizers and jinja
# through Node (npm packages pinned in tests/npm).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# kubectl: Debian's kubernetes-client (1.20; `kubectl kustomize`). Where
# another package already owns /usr/bin/kubectl (e.g. the Google Cloud SDK's
# kubectl), installing it would clash, so Debian's package is unpacked
# into $SPAR_DEPS_DIR/kubernetes-client instead and the tests use that copy.
deps_dir="${SPAR_DEPS_DIR:-/opt/spar-deps}"
kubectl_owner="$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | cut -d: -f1 || true)"
unpack_kubectl=0
if ! installed kubernetes-client; then
  if [[ -n "$kubectl_owner" && "$kubectl_owner" != kubernetes-client ]]; then
    [[ -x "$deps_dir/kubernetes-client/usr/bin/kubectl" ]] || unpack_kubectl=1
  else
    packages+=(kubernetes-client)
  fi
fi

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 && $unpack_kubectl -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]} kubernetes-client" >&2; exit 1; }
  sudo="sudo"
fi
$sudo apt-get update -qq
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install_deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ $unpack_kubectl -eq 1 ]]; then
  echo "install_deps: /usr/bin/kubectl belongs to package $kubectl_owner: unpacking Debian's kubernetes-client into $deps_dir/kubernetes-client"
  tmp="$(mktemp -d)"
  chmod 755 "$tmp"  # apt downloads as the _apt user
  (cd "$tmp" && apt-get download -qq kubernetes-client)
  $sudo mkdir -p "$deps_dir/kubernetes-client"
  $sudo dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$deps_dir/kubernetes-client"
  rm -rf "$tmp"
fi
