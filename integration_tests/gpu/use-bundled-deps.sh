# shellcheck shell=bash
# Sourced on a GPU host without cumemtrace's build dependencies (tools/bundle-build-deps.sh
# says when): unpacks the bundled Debian packages into a prefix of its own, never into /, and
# points the build at them.
#   . integration_tests/gpu/use-bundled-deps.sh DIR [PREFIX (default /tmp/cumemtrace-deps)]
# RE2 and libdw (with libelf, zlib, liblzma and bzip2) are linked statically (their shared
# libraries are not on the host at run time), and protoc finds its own libraries through a
# wrapper, so the traced programs' environment is untouched.
_bundle=${1:?usage: . integration_tests/gpu/use-bundled-deps.sh DIR [PREFIX]}
_prefix=${2:-/tmp/cumemtrace-deps}
_lib=$_prefix/usr/lib/x86_64-linux-gnu
mkdir -p "$_prefix/bin"
for _deb in "$_bundle"/*.deb; do dpkg -x "$_deb" "$_prefix"; done
# Without the .so links the linker takes the .a beside them.
rm -f "$_lib"/lib{re2,dw,elf,z,lzma,bz2}.so
sed -i "s|/usr|$_prefix/usr|" "$_lib"/pkgconfig/{re2,libdw,libelf,zlib,liblzma}.pc
# A static libdw needs what its Libs.private and Requires.private name at every link.
sed -i "s|^Libs: .*|& -lelf -lz -llzma -lbz2|" "$_lib/pkgconfig/libdw.pc"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/protoc "$@"\n' "$_lib" "$_prefix" \
  >"$_prefix/bin/protoc"
chmod +x "$_prefix/bin/protoc"
export PATH="$_prefix/bin:$PATH"
export CMAKE_PREFIX_PATH="$_prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_PATH="$_lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
unset _bundle _prefix _lib _deb
