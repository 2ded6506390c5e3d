#!/usr/bin/env bash
# Golden summary: `cumemtrace report --json TRACE` must equal EXPECTED (the trace_file line,
# which names where the trace was read from, aside).
#   check_summary.sh CUMEMTRACE TRACE EXPECTED
set -euo pipefail
actual=$("$1" report --json "$2" | grep -v '"trace_file":')
if ! diff -u <(grep -v '"trace_file":' "$3") <(printf '%s\n' "$actual"); then
  echo "golden summary of $2 changed; if intended, run tools/update-golden.sh and commit the diff" >&2
  exit 1
fi
