#!/usr/bin/env bash
# A block of `cumemtrace report`'s text on a trace a generator writes must be EXPECTED, line for
# line (the examples of the docs, kept true).
#   check_report_block.sh CUMEMTRACE GENERATOR EXPECTED
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$2" "$tmp/trace.cmtrace"
"$1" report "$tmp/trace.cmtrace" > "$tmp/report.txt"
first=$(head -n 1 "$3")
lines=$(wc -l < "$3")
start=$(grep -n -F -x -- "$first" "$tmp/report.txt" | head -n 1 | cut -d: -f1)
if [ -z "$start" ]; then
  echo "the report has no line: $first" >&2
  cat "$tmp/report.txt" >&2
  exit 1
fi
diff -u "$3" <(tail -n +"$start" "$tmp/report.txt" | head -n "$lines")
