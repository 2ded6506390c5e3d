#!/usr/bin/env bash
# What the CUPTI multiplexer (tracer/sources/cupti/cupti_mux.h) costs a program that starts no CUPTI
# client of its own. The commit that added it (MUX_REV) and its parent (BASE_REV) are each
# checked out in a git worktree and built whole (CLI, collector, tracer) with cmake; then
# overhead.py runs the same workloads untraced, under MUX_REV's cumemtrace and under
# BASE_REV's (--baseline-cumemtrace), one process per run, configurations interleaved round
# by round. The two builds differ only by the multiplexer, so the difference between
# "cumemtrace" and "baseline: cumemtrace" (and between the two --no-kernels rows) is its
# cost: one relaxed atomic load per driver callback and one per completed CUPTI buffer.
# The workloads are the launch-bound MLP, the allocation loop (a callback per tensor with
# the async allocator, both builds' default), an EP step and the LibTorch program.
#
#   benchmarks/gpu/mux_overhead.sh [ROUNDS [OUT_JSON [BASE_REV [MUX_REV]]]]
#
# Defaults: 7 rounds, build-gpu/mux_overhead.json, ed08061^ and ed08061. MUX_REV "." takes
# this tree's build-gpu/bin/cumemtrace instead (today's tracer against BASE_REV's: then the
# difference holds every change since BASE_REV, not only the multiplexer).
# Needs build-gpu/ from `integration_tests/gpu/run_gpu_suite.sh RESULTS SUITE` (the LibTorch
# training program), and the repository's git history, or else the two source trees already
# in build-gpu/mux-overhead/{base,mux}-src (made where the history is with
# MUX_OVERHEAD_STEP=sources, then copied along: about 2 MB each).
# MUX_OVERHEAD_STEP: sources (check the two revisions out and stop), build (build them and
# stop), all (the default: build and measure).
# Within noise: for each workload, each pair of medians differs by no more than the spread
# (max - min) of either configuration's per-process samples (printed, and in OUT_JSON).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-7}
out=${2:-"$top/build-gpu/mux_overhead.json"}
base_rev=${3:-ed08061^}
mux_rev=${4:-ed08061}
work="$top/build-gpu/mux-overhead"
step=${MUX_OVERHEAD_STEP:-all}
case "$step" in sources|build|all) ;; *) echo "MUX_OVERHEAD_STEP: sources, build or all" >&2; exit 2 ;; esac
unset CUMEMTRACE_TRACER_LIB  # each CLI must find its own tracer, beside it

if [ "$step" = all ] && [ ! -x "$top/build-gpu/programs/libtorch_train" ]; then
  echo "no build-gpu/programs/libtorch_train: run integration_tests/gpu/run_gpu_suite.sh first" >&2
  exit 2
fi
tarball="$top/third_party/protobuf/protobuf_3.21.12.orig.tar.gz"
[ -s "$tarball" ] || "$top/tools/fetch-protobuf-source.sh"

# Checks REV out in a git worktree under $work (or takes the tree already there when this
# copy has no git history), builds it, and prints the path of its cumemtrace.
build_rev() {
  local rev=$1 name=$2
  local src="$work/$name-src" bld="$work/$name-build"
  local commit
  if commit=$(git -C "$top" rev-parse --verify -q "$rev^{commit}"); then
    if [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$commit" ]; then
      git -C "$top" worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"
      git -C "$top" worktree prune
      git -C "$top" worktree add --detach "$src" "$commit" >&2
    fi
    # The multiplexer commit and its parent sit where main did not build: the collector's
    # failed_allocations.* still named engine headers renamed just before (decoded.h,
    # process_sweep.h). 0bdcaff fixed those two includes and nothing else; it goes on top.
    if grep -q '"collector/engine/decoded.h"' "$src/collector/engine/failed_allocations.h" &&
       [ ! -e "$src/collector/engine/decoded.h" ]; then
      git -C "$top" show 0bdcaff -- collector/engine | git -C "$src" apply
    fi
    echo "$commit" >"$src/.mux-overhead-rev"
  elif [ -s "$src/.mux-overhead-rev" ]; then
    commit=$(cat "$src/.mux-overhead-rev")
    echo "no commit $rev here: building the tree of $commit already in $src" >&2
  else
    echo "no commit $rev here and no $src: this needs the repository's git history" \
      "(or MUX_OVERHEAD_STEP=sources run where it is, and $work/*-src copied here)" >&2
    return 2
  fi
  if [ "$step" = sources ]; then echo "$src"; return 0; fi
  echo "building $rev ($commit) in $bld" >&2
  # As run_gpu_suite.sh configures the GPU build, without tests and benchmarks (neither is
  # needed here); protobuf from this tree's source tarball (those revisions need no RE2).
  cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCUMEMTRACE_BUILD_TESTS=OFF -DCUMEMTRACE_BUILD_BENCHMARKS=OFF \
    -DCUMEMTRACE_PROTOBUF_TARBALL="$tarball" >"$work/$name-build.log" 2>&1 ||
    { tail -20 "$work/$name-build.log" >&2; return 1; }
  cmake --build "$bld" --target cumemtrace cumemtrace_tracer >>"$work/$name-build.log" 2>&1 ||
    { tail -20 "$work/$name-build.log" >&2; return 1; }
  [ -x "$bld/bin/cumemtrace" ] && [ -s "$bld/lib/cumemtrace/libcumemtrace-tracer.so" ] ||
    { echo "$rev: no bin/cumemtrace or lib/cumemtrace/libcumemtrace-tracer.so in $bld" >&2; return 1; }
  echo "$bld/bin/cumemtrace"
}

mkdir -p "$work"
base_cli=$(build_rev "$base_rev" base)
if [ "$mux_rev" = . ]; then
  mux_cli="$top/build-gpu/bin/cumemtrace"
  [ "$step" = sources ] || [ -x "$mux_cli" ] ||
    { echo "no $mux_cli: run integration_tests/gpu/run_gpu_suite.sh first" >&2; exit 2; }
else
  mux_cli=$(build_rev "$mux_rev" mux)
fi
echo "multiplexer: $mux_cli"
echo "baseline:    $base_cli"
[ "$step" = all ] || exit 0

python3 "$top/benchmarks/gpu/overhead.py" --cumemtrace "$mux_cli" \
  --libtorch-train "$top/build-gpu/programs/libtorch_train" --rounds "$rounds" --out "$out" \
  --workloads launch,alloc,ep50,libtorch --baseline-cumemtrace "$base_cli" \
  --configs 'untraced|cumemtrace|baseline: cumemtrace|cumemtrace --no-kernels|baseline: cumemtrace --no-kernels'

# The verdict per workload: each pair's medians against the spread of their samples.
python3 - "$out" <<'EOF'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
by = {(r["workload"], r["config"]): r["samples"] for r in rows}
status = 0
print("\nmultiplexer vs baseline (median difference; spread = max - min of the samples)")
for workload in sorted({w for w, _ in by}):
    for mode in ("cumemtrace", "cumemtrace --no-kernels"):
        mux, base = by.get((workload, mode)), by.get((workload, "baseline: " + mode))
        if not mux or not base:
            continue
        diff = statistics.median(mux) - statistics.median(base)
        spread = max(max(mux) - min(mux), max(base) - min(base))
        within = abs(diff) <= spread
        status |= 0 if within else 1
        print(f"  {workload:9s} {mode:24s} {diff:+9.4f} ({100 * diff / statistics.median(base):+.2f}%)"
              f"  spread {spread:.4f}  {'within noise' if within else 'OUTSIDE noise'}")
sys.exit(status)
EOF
