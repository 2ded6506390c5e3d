#!/usr/bin/env bash
# CTest entry of the viewer's browser test: makes report.html files from golden traces with
# the real `cumemtrace export` (one trace, and two runs compared), a sweep.html with the real
# `cumemtrace sweep` over the fake tracer (a synthetic sweep: its peaks are known exactly),
# then runs viewer/test/*.test.mjs (node --test) against them in Debian's chromium through
# playwright-core, and PyTorch's memory_viz page (MemoryViz.js, vendored) on memory_viz
# exports of the same traces. Exit 77 (CTest: skipped) only when node, npm or chromium is missing;
# tools/setup.sh installs them, so CI never skips.
# CATEGORY_TRACE writes a fabricated training step with every category layer (the allocator
# bridge's tensors and cache, tags, cuBLAS memory), exported and reported as the golden ones;
# ATTRIBUTION_TRACE a step with modules and operators (`run --modules --ops`), the same way.
#   run_browser_test.sh CUMEMTRACE GOLDEN_DIR WORK_DIR FAKE_TRACER PRELOAD_STUB CATEGORY_TRACE \
#     ATTRIBUTION_TRACE
set -euo pipefail
cumemtrace=$1 golden=$2 work=$3 fake_tracer=$4 preload_stub=$5 category_trace=$6
attribution_trace=$7
viewer=$(cd "$(dirname "$0")/.." && pwd)
chromium=${CUMEMTRACE_CHROMIUM:-/usr/bin/chromium}
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed (apt-get install nodejs npm)"; exit 77; }
done
[ -x "$chromium" ] || { echo "SKIPPED: $chromium is missing (apt-get install chromium)"; exit 77; }

rm -rf "$work" && mkdir -p "$work"
# Exactly the locked playwright-core; it never downloads a browser.
(cd "$viewer" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
for name in torch_async cuda_phases torch_native libtorch_native; do
  "$cumemtrace" export --format html -o "$work/$name.html" "$golden/$name.cmtrace"
  "$cumemtrace" report --json "$golden/$name.cmtrace" > "$work/$name.summary.json"
  # For PyTorch's own memory_viz page (memory_viz.test.mjs).
  "$cumemtrace" export --format memory-viz -o "$work/$name.memory_viz.pickle" "$golden/$name.cmtrace"
done
# categories_long: 1,500 more blocks in the optimizer, 3,000 more steps: a sampled series.
"$category_trace" "$work/categories.cmtrace"
"$category_trace" "$work/categories_long.cmtrace" 1500
"$attribution_trace" "$work/attribution.cmtrace"
for name in categories categories_long attribution; do
  "$cumemtrace" export --format html -o "$work/$name.html" "$work/$name.cmtrace"
  "$cumemtrace" report --json "$work/$name.cmtrace" > "$work/$name.summary.json"
done
"$cumemtrace" export --format html -o "$work/compare.html" \
  "async=$golden/torch_async.cmtrace" "native=$golden/torch_native.cmtrace"
# The fake tracer allocates --events MiB per batch and never frees (peak = batches x events);
# the preload stub stands in for the tracer library, so only the fake client talks.
(unset CUMEMTRACE_SOCKET LD_PRELOAD CUDA_INJECTION64_PATH NVTX_INJECTION64_PATH
 CUMEMTRACE_TRACER_LIB=$preload_stub "$cumemtrace" sweep -o "$work/sweep" --param n=1,4,16 \
   --run "A=$fake_tracer --events={n}" --run "B=$fake_tracer --events={n} --batches=2" > /dev/null)
# Range names made to break the page ("<!--<script>" once left report.html empty; no name
# holds "-->", which would end that state and hide the bug): the page
# `run` writes and the one `export` writes, each with the summary it is checked against.
line_separator=$(printf 'line\342\200\250separator\342\200\251end')
(unset CUMEMTRACE_SOCKET LD_PRELOAD CUDA_INJECTION64_PATH NVTX_INJECTION64_PATH
 CUMEMTRACE_TRACER_LIB=$preload_stub "$cumemtrace" run -o "$work/hostile-run" -- "$fake_tracer" \
   --batches=5 --range='<!--<script>' --range='</script><img src=x onerror="window.pwned=1">' \
   --range='&lt;b&gt;' --range="$line_separator" --range='<script>window.pwned=2</script>' \
   > /dev/null 2>&1)
cp "$work/hostile-run/report.html" "$work/hostile_run.html"
"$cumemtrace" report --json "$work/hostile-run/trace.cmtrace" > "$work/hostile_run.summary.json"
"$cumemtrace" export --format html -o "$work/hostile_export.html" "$work/hostile-run/trace.cmtrace"
cp "$work/hostile_run.summary.json" "$work/hostile_export.summary.json"
export CUMEMTRACE_VIEWER_WORK=$work CUMEMTRACE_CHROMIUM=$chromium
exec node --test "$viewer/test/"*.test.mjs
