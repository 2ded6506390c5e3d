#!/bin/sh
# The highest sustained rate of NVTX records the tracer keeps whole: burst_rate (4 threads,
# paced) under `cumemtrace run` at each offered rate given, for DURATION_MS (default 2000),
# one line per run with what was offered, kept and dropped (docs/benchmarks.md).
#
#   benchmarks/burst_rate.sh BUILD_DIR RATE...      records per second, all threads together
#   RATE "max": as fast as the threads can (250,000 ranges each, or RANGES)
#
# THREADS (default 4), DURATION_MS, RANGES, and RUN_FLAGS (more `cumemtrace run` options,
# e.g. --wait-when-full) change the run; TRACER another tracer library (to compare builds).
set -eu
build=$1
shift
cli=$build/bin/cumemtrace
bench=$build/benchmarks/burst_rate
threads=${THREADS:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "${TRACER:-}" ] && export CUMEMTRACE_TRACER_LIB="$TRACER"
n=0
for rate in "$@"; do
  n=$((n + 1))
  if [ "$rate" = max ]; then
    args="--threads=$threads --ranges=${RANGES:-250000}"
  else
    args="--threads=$threads --rate=$rate --duration-ms=${DURATION_MS:-2000}"
  fi
  # shellcheck disable=SC2086
  "$cli" run -o "$tmp/$n" --quiet ${RUN_FLAGS:-} -- "$bench" $args >"$tmp/out" 2>"$tmp/err" || {
    cat "$tmp/err" >&2
    exit 1
  }
  python3 - "$tmp/$n/summary.json" "$rate" "$(cat "$tmp/out")" <<'EOF'
import json, re, sys
summary = json.load(open(sys.argv[1]))
line = sys.argv[3]
m = re.search(r"burst_rate: (\d+) ranges .* in ([\d.]+) s \((\d+) records/s", line)
ranges, seconds, offered_rate = int(m.group(1)), float(m.group(2)), int(m.group(3))
kept = 0
for process in summary.get("processes", [summary]):
    for phase in process.get("phases", []):
        if phase.get("name") == "burst":
            kept += phase.get("occurrences", 0)
dropped = sum(d["count"] for p in summary.get("processes", [summary])
              for d in p.get("dropped", []) if d.get("source") == "tracer_queue")
print(f"asked {sys.argv[2]:>9} offered {offered_rate:>9} records/s ({seconds:.2f} s): "
      f"ranges {ranges}, kept {kept}, records dropped {dropped}"
      f"{'  LOSSLESS' if dropped == 0 and kept == ranges else ''}")
EOF
done
