#!/bin/sh
# The PyTorch bridge's hook as the injected library runs it: the fake bridge of the tests
# (tracer/tests/fake_torch_bridge.cc) emits tensor events on THREADS threads (default 1),
# EVENTS each (default 200000), each thread storing into WORK_KIB KiB of its own (default
# 8192) between two events and starting one every PACE_NS at most (default 2000: EP's
# settling loop has one every 6-7 us), under `cumemtrace run` with CUMEMTRACE_SELF_TIME=1.
# Prints the hook's self-time line: the ns per event from its entry to the commit, as
# built (position-independent code, the library's thread-locals), where
# Hook/TorchEntryThreads times a copy of the write compiled into the benchmark.
#
#   benchmarks/hook_in_library.sh BUILD_DIR [THREADS [EVENTS [WORK_KIB [PACE_NS]]]]
#
# TRACER another tracer library (to compare builds); RUN_FLAGS more `cumemtrace run` options.
set -eu
build=$1
tests=$build/tracer/tests
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "${TRACER:-}" ] && export CUMEMTRACE_TRACER_LIB="$TRACER"
# shellcheck disable=SC2086
CUMEMTRACE_TORCH_BRIDGE_DIR=$tests/fake_torch_bridge CUMEMTRACE_SELF_TIME=1 \
  "$build/bin/cumemtrace" run -o "$tmp/trace" --quiet ${RUN_FLAGS:-} -- \
  "$tests/cupti_mux_probe" torch-bridge "$tests/fake_torch/lib/libc10_cuda.so" \
  "$tests/fake_torch_bridge/libcumemtrace-torch-bridge-9.9.0.so" "${2:-1}" "${3:-200000}" \
  "${4:-8192}" "${5:-2000}" >"$tmp/out" 2>"$tmp/err" || {
  cat "$tmp/out" "$tmp/err" >&2
  exit 1
}
grep -q "refused: 0" "$tmp/out" || {
  echo "the tracer refused events:" >&2
  cat "$tmp/out" >&2
  exit 1
}
grep "cumemtrace self time" "$tmp/err"
