#!/usr/bin/env bash
# What the CUPTI multiplexer costs a program that starts no CUPTI client of its own: this
# tree's tracer against the tracer of BASE_REV (by default the commit before the
# multiplexer), with the same CLI and collector, one process per run, rounds interleaved
# (overhead.py). The launch-bound MLP and the allocation loop are the workloads where a
# per-callback cost would show; the multiplexer adds one relaxed atomic load per callback.
#
#   benchmarks/gpu/mux_overhead.sh [BASE_REV] [ROUNDS] [OUT_JSON]
#
# Needs the repository's git history (the base tracer is built from `git archive BASE_REV`)
# and build-gpu/ from `integration_tests/gpu/run_gpu_suite.sh RESULTS build`.
# Compare "cumemtrace --no-kernels" with "baseline tracer --no-kernels" and
# "cumemtrace --kernels" with "baseline tracer --kernels": within noise means the medians
# differ by less than the spread of their samples (printed in OUT_JSON).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
base_rev=${1:-4789e05}
rounds=${2:-5}
out=${3:-"$top/build-gpu/mux_overhead.json"}
build="$top/build-gpu"
base="$top/build-mux-base"
[ -x "$build/bin/cumemtrace" ] || { echo "run integration_tests/gpu/run_gpu_suite.sh first" >&2; exit 2; }
git -C "$top" rev-parse --verify -q "$base_rev^{commit}" >/dev/null ||
  { echo "no commit $base_rev here: this needs the repository's history" >&2; exit 2; }
rm -rf "$base/src"
mkdir -p "$base/src"
git -C "$top" archive "$base_rev" | tar -x -C "$base/src"
rm -rf "$base/src/third_party/protobuf"
ln -s "$top/third_party/protobuf" "$base/src/third_party/protobuf"
cmake -S "$base/src" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUMEMTRACE_BUILD_TESTS=OFF >"$base/build.log" 2>&1
cmake --build "$base/build" --target cumemtrace_tracer >>"$base/build.log" 2>&1
python3 "$top/benchmarks/gpu/overhead.py" --cumemtrace "$build/bin/cumemtrace" \
  --libtorch-train "$build/programs/libtorch_train" --rounds "$rounds" --out "$out" \
  --workloads launch,alloc,libtorch \
  --baseline-tracer "$base/build/lib/cumemtrace/libcumemtrace-tracer.so" \
  --configs 'untraced|untraced, async allocator|cumemtrace --no-kernels|baseline tracer --no-kernels|cumemtrace --kernels|baseline tracer --kernels|cumemtrace'
