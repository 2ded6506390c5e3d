#!/usr/bin/env bash
# Installs what building and testing cumemtrace needs on Debian 12 (the CUDA 13 toolkit is
# expected in /usr/local/cuda already), and fetches Debian's protobuf source (see
# tools/fetch-protobuf-source.sh for why).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
packages=(cmake ninja-build g++ protobuf-compiler libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libre2-dev pkg-config clang-14 libclang-rt-14-dev chromium
          libdw-dev python3-dev python3-pytest zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (the viewer's browser tests): by command, not by package, because a
# Node.js from another source (nodesource's bundles npm) conflicts with Debian's npm package.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -d /usr/local/cuda/include ] || [ ! -f /usr/local/cuda/include/cupti.h ]; then
  echo "setup: the CUDA 13 toolkit (with CUPTI) is expected in /usr/local/cuda" >&2
  exit 1
fi
$sudo tools/fetch-protobuf-source.sh
echo "setup: done"
