#!/usr/bin/env bash
# CTest: exports a golden trace to memory_viz with the real CLI and checks the pickle with
# check_memory_viz.py (Python's pickle) against the trace's summary; with `oom`, the snapshot
# at the first out-of-memory (`export --at oom`).
#   run_memory_viz_check.sh CUMEMTRACE TRACE WORK_DIR [oom]
set -euo pipefail
cumemtrace=$1 trace=$2 work=$3 at=${4:-}
rm -rf "$work" && mkdir -p "$work"
"$cumemtrace" export --format memory-viz ${at:+--at "$at"} -o "$work/snapshot.pickle" "$trace"
"$cumemtrace" report --json "$trace" > "$work/summary.json"
exec python3 "$(dirname "$0")/check_memory_viz.py" "$work/snapshot.pickle" "$work/summary.json" \
  ${at:+--at-oom}
