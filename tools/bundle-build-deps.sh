#!/usr/bin/env bash
# For a GPU host that has CUDA, PyTorch, cmake and a compiler but none of cumemtrace's other
# build dependencies and no package access: downloads, on a Debian 12 machine, the packages
# the GPU build needs (protoc 3.21.12 and its libraries, RE2, nlohmann-json, zlib for the
# trace file's checksums, and elfutils' libdw, which names native stack frames, with the
# static libraries it needs: libelf, zlib, liblzma, bzip2) into DIR, and the protobuf source
# the tracer builds (tools/fetch-protobuf-source.sh). Copy DIR and third_party/ to the host,
# then there: `. integration_tests/gpu/use-bundled-deps.sh DIR` before
# integration_tests/gpu/run_gpu_suite.sh.
#   tools/bundle-build-deps.sh DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: tools/bundle-build-deps.sh DIR" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)
# As tools/setup.sh runs it: it may add Debian's source list, which needs root.
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo "$top/tools/fetch-protobuf-source.sh"
# apt-get download writes into the current folder; as root it warns that _apt cannot.
(cd "$dir" && apt-get download -q protobuf-compiler libprotoc32 libprotobuf32 libre2-dev libre2-9 \
  nlohmann-json3-dev libdw-dev libelf-dev zlib1g-dev zlib1g liblzma-dev libbz2-dev \
  2> >(grep -v "unsandboxed" >&2))
ls "$dir"/*.deb
