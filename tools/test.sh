#!/usr/bin/env bash
# Builds everything with warnings as errors and runs every test (unit, golden, end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUMEMTRACE_WERROR=ON
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j2
