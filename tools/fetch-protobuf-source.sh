#!/usr/bin/env bash
# Fetches Debian's protobuf source package into third_party/protobuf/.
#
# Why: Debian ships libprotobuf(-lite).a built without -fPIC, which cannot be linked into the
# injected shared library (its TLS relocations fail). The tracer therefore builds
# protobuf-lite from Debian's own source of the same version as Debian's protoc (3.21.12),
# with position-independent code, and links it statically with hidden symbols.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dest="$top/third_party/protobuf"
tarball="$dest/protobuf_3.21.12.orig.tar.gz"
if [ -s "$tarball" ]; then
  echo "protobuf source already present: third_party/protobuf/$(basename "$tarball")"
  exit 0
fi
if ! apt-cache showsrc protobuf >/dev/null 2>&1 || [ -z "$(apt-cache showsrc protobuf 2>/dev/null)" ]; then
  # deb-src entries are off by default on Debian 12; add them for the main archive.
  cat > /etc/apt/sources.list.d/cumemtrace-debian-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi
mkdir -p "$dest"
cd "$dest"
apt-get source --download-only -qq protobuf=3.21.12-3+deb12u1 2>/dev/null ||
  apt-get source --download-only -qq protobuf
ls "$tarball" >/dev/null
echo "fetched $(basename "$tarball")"
