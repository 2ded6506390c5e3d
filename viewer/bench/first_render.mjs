// Time to first render of the viewer on a big synthetic run: 1,000,000 allocations (2,000,000
// memory steps) and 10,000,000 kernels on one device, with 3 phases per iteration. Not a
// test: it prints figures. Usage (after building, from the repository root):
//   node viewer/bench/first_render.mjs build-export/viewer/viewer_assets.cc.html
// The data is made here in the layout WriteViewerHtml writes ("cumemtrace.viewer/1",
// docs/exports.md) rather than through a 10-million-kernel .cmtrace, which would measure the
// engine instead; kernels reach the viewer as 2,000 busy-time bins either way.
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launchBrowser } from '../test/browser.mjs';

const template = readFileSync(process.argv[2], 'utf8');
const ALLOCS = 1_000_000, KERNELS = 10_000_000, BINS = 2000, PHASES = 3, ITER_ALLOCS = 100;
const b64 = (typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString('base64');

// Iterations of 100 allocations: each lives until 10 to 60 steps later, so memory saws up and
// down; every 1000th iteration holds a large block for a while (the peak hides in one).
const steps = ALLOCS * 2;
const time = new Float64Array(steps), bytes = new Float64Array(steps);
const birth = new Uint32Array(ALLOCS), death = new Uint32Array(ALLOCS);
const size = new Float64Array(ALLOCS), phase = new Int32Array(ALLOCS);
const zeros = new Uint32Array(ALLOCS), kind = new Uint8Array(ALLOCS).fill(3);
let seed = 1;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const events = [];  // [time, +/-index]
for (let i = 0; i < ALLOCS; i++) {
  const t = i * 1000;
  size[i] = 1 << (10 + Math.floor(rand() * 14));
  if (i % 100_000 === 50) size[i] = 8 * 2 ** 30;
  phase[i] = Math.floor((i % ITER_ALLOCS) / (ITER_ALLOCS / PHASES));
  events.push([t, i + 1], [t + 1000 * (10 + Math.floor(rand() * 50)) + 1, -(i + 1)]);
}
events.sort((x, y) => x[0] - y[0]);
let cur = 0, peak = 0, peakStep = 0;
events.forEach(([t, e], k) => {
  const i = Math.abs(e) - 1;
  if (e > 0) { birth[i] = k; cur += size[i]; } else { death[i] = k; cur -= size[i]; }
  time[k] = t; bytes[k] = cur;
  if (e > 0 && cur > peak) { peak = cur; peakStep = k; }
});
const duration = time[steps - 1] + 1000;
const busy = new Float32Array(BINS);
const binW = duration / BINS, kernelDur = duration / KERNELS * 0.7;
for (let k = 0; k < KERNELS; k++) busy[Math.floor(k * duration / KERNELS / binW)] += kernelDur / binW;
const iterations = ALLOCS / ITER_ALLOCS;
const rStart = new Float64Array(iterations * PHASES), rEnd = new Float64Array(iterations * PHASES);
const rPhase = new Int32Array(iterations * PHASES), rThread = new Uint32Array(iterations * PHASES).fill(1);
for (let it = 0; it < iterations; it++) {
  for (let p = 0; p < PHASES; p++) {
    const j = it * PHASES + p;
    rStart[j] = (it * ITER_ALLOCS + p * ITER_ALLOCS / PHASES) * 1000;
    rEnd[j] = rStart[j] + ITER_ALLOCS / PHASES * 1000;
    rPhase[j] = p;
  }
}
const names = ['forward', 'backward', 'optimizer'];
// Iteration windows as the report gives them: ten thousand boundaries to mark on the axis.
const windows = Array.from({ length: iterations }, (_, it) => [it * ITER_ALLOCS * 1000, (it + 1) * ITER_ALLOCS * 1000]);
const spread = (v) => ({ count: iterations - 1, median: v, min: v, max: v });
const data = {
  schema: 'cumemtrace.viewer/1', trace_file: 'synthetic', truncated: false,
  processes: [{
    label: 'synthetic (pid 1)', pid: 1, command_line: ['synthetic'], allocator_mode: 'async',
    duration_ns: duration, strings: [''], phase_names: names,
    phases: names.map((name) => ({ name, occurrences: iterations, total_ns: iterations * 33000, devices: [] })),
    failed_allocations: [],
    iterations: { source: 'range', range: 'step', note: null, count: iterations, windows_ns: windows,
      warmup_ns: ITER_ALLOCS * 1000, duration_ns: spread(ITER_ALLOCS * 1000),
      phases: names.map((phase) => ({ phase, inferred: false, iterations_with_phase: iterations,
        warmup_ns: 33000, time_ns: spread(33000), devices: [] })) },
    ranges: { n: rStart.length, start_ns: b64(rStart), end_ns: b64(rEnd), phase: b64(rPhase),
      thread: b64(rThread), depth: b64(new Uint8Array(rStart.length)) },
    devices: [{
      index: 0, name: 'synthetic GPU', total_memory_bytes: 80 * 2 ** 30, peak_bytes: peak,
      peak_time_ns: time[peakStep], peak_step: peakStep, peak_live_allocations: 0,
      kernel_count: KERNELS,
      steps: { n: steps, time_ns: b64(time), bytes: b64(bytes) },
      allocations: { n: ALLOCS, birth_step: b64(birth), death_step: b64(death), bytes: b64(size),
        phase: b64(phase), api: b64(zeros), library: b64(zeros), kind: b64(kind) },
      kernel_busy: { bins: BINS, fraction: b64(busy) },
    }],
  }],
};
const html = template.replace('{{CUMEMTRACE_DATA}}', JSON.stringify(data));
const dir = mkdtempSync(join(tmpdir(), 'cumemtrace-bench-'));
const file = join(dir, 'big.html');
writeFileSync(file, html);
console.log(`report.html: ${(html.length / 2 ** 20).toFixed(1)} MiB, ${ALLOCS} allocations, ${KERNELS} kernels`);

const browser = await launchBrowser();
try {
  for (let run = 0; run < 3; run++) {
    const page = await browser.context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(pathToFileURL(file).href, { timeout: 120000 });
    await page.waitForFunction(() => window.cumemtraceViewer && window.cumemtraceViewer.ready, null, { timeout: 120000 });
    const r = await page.evaluate(async () => {
      const v = window.cumemtraceViewer;
      const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
      // Zoom: time from a view change to its frame being drawn.
      let t = performance.now();
      const { t0, t1 } = v.view();
      v.setView(t0 + (t1 - t0) * 0.25, t1 - (t1 - t0) * 0.25);
      await frame();
      const zoomMs = performance.now() - t, zoomDrawMs = v.lastDrawMs;
      // Pan: the zoomed view moved by a tenth of its span.
      t = performance.now();
      const z = v.view();
      v.setView(z.t0 + (z.t1 - z.t0) * 0.1, z.t1 + (z.t1 - z.t0) * 0.1);
      await frame();
      const panMs = performance.now() - t;
      // Deep zoom: a thousandth of the run.
      t = performance.now();
      v.setView(t0 + (t1 - t0) * 0.5, t0 + (t1 - t0) * 0.501);
      await frame();
      const deepZoomMs = performance.now() - t;
      t = performance.now();
      v.setView(t0, t1);
      await frame();
      const fullRedrawMs = performance.now() - t, fullDrawMs = v.lastDrawMs;
      return { firstRenderMs: v.firstRenderMs, scriptMs: v.scriptMs, zoomMs, zoomDrawMs, panMs, deepZoomMs,
        fullRedrawMs, fullDrawMs };
    });
    const p = await page.evaluate(() => window.cumemtraceViewer.peakPoint(0));
    let t = Date.now();
    await page.mouse.click(p.x, p.y);
    await page.waitForSelector('#live-by-phase tbody tr');
    const clickMs = Date.now() - t;
    console.log(`run ${run + 1}: first render ${r.firstRenderMs.toFixed(0)} ms after navigation ` +
      `(script ${r.scriptMs.toFixed(0)} ms), zoom frame ${r.zoomMs.toFixed(1)} ms, ` +
      `pan frame ${r.panMs.toFixed(1)} ms, deep-zoom frame ${r.deepZoomMs.toFixed(1)} ms, ` +
      `whole-run frame ${r.fullRedrawMs.toFixed(1)} ms` +
      // Viewers before lastDrawMs existed (to compare with an older build) do not report it.
      (r.fullDrawMs == null ? '' : ` (drawing alone: zoom ${r.zoomDrawMs.toFixed(1)} ms, ` +
        `whole run ${r.fullDrawMs.toFixed(1)} ms)`) + `, click at the peak ${clickMs} ms` +
      (errors.length ? ` ERRORS: ${errors}` : ''));
    await page.close();
  }
} finally {
  await browser.close();
}
