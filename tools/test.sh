#!/usr/bin/env bash
# Builds everything with warnings as errors and runs every test (unit, golden, end to end),
# then the same for the collector, the engine and their tests under ASan+UBSan, built with
# clang 14 together with the libFuzzer targets, which CTest runs briefly from their corpus.
#   BUILD_DIR (default build), SANITIZE_BUILD_DIR (default build-asan),
#   CUMEMTRACE_FUZZ_SECONDS (default 20, per fuzz target), SKIP_SANITIZE=1 to skip the second.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUMEMTRACE_WERROR=ON
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j2

[ "${SKIP_SANITIZE:-0}" = 1 ] && exit 0
sanitize=${SANITIZE_BUILD_DIR:-build-asan}
CC=clang-14 CXX=clang++-14 cmake -S . -B "$sanitize" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUMEMTRACE_WERROR=ON -DCUMEMTRACE_SANITIZE=ON -DCUMEMTRACE_FUZZ=ON \
  -DCUMEMTRACE_FUZZ_SECONDS="${CUMEMTRACE_FUZZ_SECONDS:-20}"
cmake --build "$sanitize"
# detect_leaks: every test process is checked for leaks at exit, fuzzers included.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$sanitize" --output-on-failure -j2
