#!/usr/bin/env bash
# CTest entry of the viewer's browser test: makes report.html files from golden traces with
# the real `cumemtrace export`, then runs viewer/test/*.test.mjs (node --test) against them in
# Debian's chromium through playwright-core. Exit 77 (CTest: skipped) only when node, npm or
# chromium is missing; tools/setup.sh installs them, so CI never skips.
#   run_browser_test.sh CUMEMTRACE GOLDEN_DIR WORK_DIR
set -euo pipefail
cumemtrace=$1 golden=$2 work=$3
viewer=$(cd "$(dirname "$0")/.." && pwd)
chromium=${CUMEMTRACE_CHROMIUM:-/usr/bin/chromium}
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed (apt-get install nodejs npm)"; exit 77; }
done
[ -x "$chromium" ] || { echo "SKIPPED: $chromium is missing (apt-get install chromium)"; exit 77; }

rm -rf "$work" && mkdir -p "$work"
# Exactly the locked playwright-core; it never downloads a browser.
(cd "$viewer" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
for name in torch_async cuda_phases; do
  "$cumemtrace" export --format html -o "$work/$name.html" "$golden/$name.cmtrace"
  "$cumemtrace" report --json "$golden/$name.cmtrace" > "$work/$name.summary.json"
done
export CUMEMTRACE_VIEWER_WORK=$work CUMEMTRACE_CHROMIUM=$chromium
exec node --test "$viewer/test/viewer.test.mjs"
