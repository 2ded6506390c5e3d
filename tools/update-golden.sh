#!/usr/bin/env bash
# Regenerates integration_tests/golden/*.summary.json from the checked-in traces with the
# current build. Read the diff before committing it: it is the change in what users see.
set -euo pipefail
cd "$(dirname "$0")/.."
cumemtrace=${1:-build/bin/cumemtrace}
for trace in integration_tests/golden/*.cmtrace; do
  "$cumemtrace" report --json "$trace" > "${trace%.cmtrace}.summary.json"
done
git --no-pager diff --stat -- integration_tests/golden/
