// The viewer's iteration statistics, lifetime classes, compare page and sweep page in a real
// browser, checked against what the engine says (summary.json of the same traces, the exact
// peaks of a synthetic sweep), through the data the page reports (window.cumemtraceViewer)
// rather than pixels. run_browser_test.sh makes the files. Run through CTest:
// viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { launchBrowser, openViewer } from './browser.mjs';
import { readPage, writePage, column, b64 } from './page_data.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

const open = (file) => openViewer(browser, join(work, file));
const summaryOf = (name) => JSON.parse(readFileSync(join(work, name + '.summary.json'), 'utf8'));

// The process and device with the highest peak, as the compare page and `compare` pick them.
function highestPeak(summary) {
  let best = null;
  for (const p of summary.processes) {
    for (const d of p.devices) if (!best || d.peak.bytes > best.device.peak.bytes) best = { process: p, device: d };
  }
  return best;
}

test('iteration table: the report\'s medians per phase, and the boundaries on the axis', async () => {
  const { page, problems } = await open('torch_async.html');
  const p = summaryOf('torch_async').processes[0];
  assert.equal(p.iterations.count, 5);
  const rows = await page.$$eval('#iteration-table tbody tr', (trs) => trs.map((tr) => ({
    phase: tr.dataset.phase, device: Number(tr.dataset.device), time: Number(tr.dataset.timeMedian),
    rise: Number(tr.dataset.riseMedian), net: Number(tr.dataset.netMedian),
  })));
  const want = p.iterations.phases.flatMap((ph) => ph.devices.map((d) => ({
    phase: ph.phase, device: d.index, time: ph.time_ns.median,
    rise: d.peak_above_entry_bytes.median, net: d.net_change_bytes.median,
  })));
  assert.deepEqual(rows, want);
  assert.deepEqual(rows.map((r) => r.phase), ['forward', 'backward', 'optimizer']);
  // The golden run's steady state: forward and backward keep what they allocate (activations,
  // gradients), the optimizer frees the gradients (zero_grad) after its rise.
  assert.ok(rows[0].net > 0 && rows[1].net > 0 && rows[2].net < 0 && rows[2].rise > 0, JSON.stringify(rows));
  const text = await page.locator('#iterations').textContent();
  assert.match(text, /5 iterations/);
  assert.match(text, /warm-up/);
  const starts = await page.evaluate(() => window.cumemtraceViewer.iterationStarts());
  assert.deepEqual(starts, p.iterations.windows_ns.map((w) => w[0]));
  // Zoom onto the iterations so that their marks are labeled, then look at it.
  const [first, last] = [p.iterations.windows_ns[1][0] - 2e6, p.iterations.windows_ns[4][1] + 1e6];
  await page.evaluate(([a, b]) => window.cumemtraceViewer.setView(a, b), [first, last]);
  await page.waitForFunction(([a]) => Math.abs(window.cumemtraceViewer.view().t0 - a) < 1, [first]);
  await page.screenshot({ path: join(work, 'torch_async_iterations.png'), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test('lifetime classes at the peak: the table and the click on the peak agree with the report', async () => {
  const { page, problems } = await open('torch_async.html');
  const device = summaryOf('torch_async').processes[0].devices[0];
  const table = await page.$$eval('#lifetime-table tbody tr', (trs) => Object.fromEntries(
    trs.map((tr) => [tr.dataset.class, Number(tr.dataset.bytes)])));
  for (const [c, bytes] of Object.entries(device.lifetime_at_peak.bytes_by_class)) assert.equal(table[c], bytes, c);
  assert.equal(table['activation memory'], device.lifetime_at_peak.activation_memory_bytes);
  assert.equal(table['activation memory'], device.peak.bytes - (device.lifetime_at_peak.bytes_by_class.persistent || 0));

  const point = await page.evaluate(() => window.cumemtraceViewer.peakPoint(0));
  await page.mouse.click(point.x, point.y);
  await page.waitForSelector('#live-by-lifetime tbody tr');
  const live = await page.$$eval('#live-by-lifetime tbody tr', (trs) => Object.fromEntries(
    trs.map((tr) => [tr.dataset.class, Number(tr.dataset.bytes)])));
  assert.deepEqual(live, device.lifetime_at_peak.bytes_by_class);
  assert.deepEqual(problems, []);
  await page.close();
});

// The golden CUDA program has phases (setup, async, ...) but no forward and backward: the
// report gives no lifetime classes (lifetime_at_peak null), and the page says so rather than
// calling its whole peak activation memory.
test('no lifetime classes or activation figure without forward and backward phases', async () => {
  const { page, problems } = await open('cuda_phases.html');
  const device = summaryOf('cuda_phases').processes[0].devices[0];
  assert.equal(device.lifetime_at_peak, null);
  assert.ok(await page.locator('#lifetime-none').isVisible());
  assert.equal(await page.locator('#lifetime-table').count(), 0);
  assert.equal(await page.locator('#live-by-lifetime').count(), 0);
  const text = await page.locator('main').textContent();
  assert.equal((text.match(/activation/g) || []).length, 1, 'only the note that says why there is none');
  assert.deepEqual(problems, []);
  await page.close();
});

// PyTorch's caching allocator kept (native) and no bridge: the classes are of segments, and
// the page says that activation memory reads low. With the bridge's tensors (kind 8), it names
// their kind and says what the trace sees.
test('native mode says what its lifetime classes can and cannot know', async () => {
  const { page, problems } = await open('torch_native.html');
  assert.ok(await page.locator('#lifetime-segments').isVisible());
  assert.match(await page.locator('#allocator-note').textContent(), /segments it reserves/);
  await page.close();

  const bridged = readPage(work, 'torch_async');
  bridged.data.processes[0].allocator_mode = 'native';
  const a = bridged.data.processes[0].devices[0].allocations;
  const kind = column(a.kind, Uint8Array).map((k) => (k === 3 ? 8 : k));
  a.kind = b64(kind);
  writePage(work, bridged, 'torch_bridged.html');
  const b = await open('torch_bridged.html');
  assert.equal(await b.page.locator('#lifetime-segments').count(), 0);
  assert.match(await b.page.locator('#allocator-note').textContent(), /allocator bridge attached/);
  const kinds = await b.page.$$eval('#live-by-phase tbody tr', (trs) => [...new Set(trs.map((tr) => tr.dataset.kind))]);
  assert.deepEqual(kinds, ['TORCH_ALLOCATED']);
  assert.deepEqual([...problems, ...b.problems], []);
  await b.page.close();
});

test('the drawn columns never hide a value: pyramid downsampling equals a scan of every step', async () => {
  const { page, problems } = await open('torch_async.html');
  const mismatches = await page.evaluate(() => {
    // The reference: every step placed in its column by a linear scan, no pyramid.
    function scan(time, bytes, t0, t1, w) {
      const min = new Array(w), max = new Array(w), step = (t1 - t0) / w;
      let i = 0;
      while (i < time.length && time[i] < t0) i++;
      let carried = i > 0 ? bytes[i - 1] : 0;
      for (let c = 0; c < w; c++) {
        let lo = carried, hi = carried;
        for (; i < time.length && (c === w - 1 ? time[i] <= t1 : time[i] < t0 + (c + 1) * step); i++) {
          carried = bytes[i];
          lo = Math.min(lo, carried); hi = Math.max(hi, carried);
        }
        min[c] = lo; max[c] = hi;
      }
      return { min, max };
    }
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const bad = [];
    for (const n of [0, 1, 15, 16, 17, 33, 1000, 4099]) {
      const time = [], bytes = [];
      let t = 0;
      for (let k = 0; k < n; k++) {
        t += rand() < 0.3 ? 0 : Math.floor(rand() * 50);  // some steps share a nanosecond
        time.push(t);
        bytes.push(Math.floor(rand() * 1e9) + (rand() < 0.01 ? 5e10 : 0));  // rare spikes
      }
      for (const [t0, t1, w] of [[0, t + 1, 7], [-5, t + 5, 300], [t / 3, t / 2, 64], [t / 2, t / 2 + 3, 10], [0, t, 1]]) {
        const got = window.cumemtraceViewer.downsample(time, bytes, t0, t1, w), want = scan(time, bytes, t0, t1, w);
        for (let c = 0; c < w; c++) {
          if (got.min[c] !== want.min[c] || got.max[c] !== want.max[c]) bad.push({ n, t0, t1, w, c });
        }
      }
    }
    return bad.slice(0, 5);
  });
  assert.deepEqual(mismatches, []);
  // And on the real chart: the whole-run frame draws the peak itself.
  const drawn = await page.evaluate(() => window.cumemtraceViewer.drawn());
  assert.equal(drawn[0].max, summaryOf('torch_async').processes[0].devices[0].peak.bytes);
  assert.deepEqual(problems, []);
  await page.close();
});

test('compare page: two runs on one axis, each aligned at its first steady-state iteration', async () => {
  const { page, problems } = await open('compare.html');
  const runs = await page.evaluate(() => window.cumemtraceViewer.compare());
  assert.equal(await page.evaluate(() => window.cumemtraceViewer.mode), 'compare');
  assert.deepEqual(runs.map((r) => r.label), ['async', 'native']);
  for (const [i, name] of ['torch_async', 'torch_native'].entries()) {
    const { process, device } = highestPeak(summaryOf(name));
    const r = runs[i];
    const windows = process.iterations.windows_ns;
    assert.ok(windows.length > 1, `${name} has iterations past the warm-up`);
    assert.equal(r.found, true);
    assert.equal(r.pid, process.pid);
    assert.equal(r.device, device.index);
    // t = 0 at iteration 2: the warm-ups (first CUDA calls, cuBLAS handles) are not lined up.
    assert.equal(r.aligned_at, 'first steady-state iteration (2)');
    assert.equal(r.align_ns, windows[1][0]);
    assert.deepEqual(r.iteration_starts, windows.map((w) => w[0] - windows[1][0]));
    assert.equal(r.iteration_starts[1], 0);
    assert.equal(r.peak_bytes, device.peak.bytes);
    assert.equal(r.peak_time, device.peak.time_ns - windows[1][0]);
    assert.ok(r.points > 40, `the series is embedded (${r.points} steps)`);
  }
  // The difference column: each run less the first, exact in its sort key.
  const headers = await page.$$eval('#compare-table th', (ths) => ths.map((th) => th.textContent));
  assert.deepEqual(headers.slice(1), ['async', 'native', 'native − async']);
  const diff = await page.$eval('#compare-table tr[data-metric="peak"] td:nth-child(4)', (td) => Number(td.dataset.sort));
  assert.equal(diff, runs[1].peak_bytes - runs[0].peak_bytes);
  // Click on the chart: each run's memory at that aligned instant, and the difference.
  const box = await page.locator('canvas.chart.compare').boundingBox();
  await page.mouse.click(box.x + box.width * 0.5, box.y + box.height * 0.5);
  await page.locator('#compare-inspect').waitFor({ state: 'visible' });
  const inspected = await page.$$eval('#compare-inspect tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.bytes)));
  assert.equal(inspected.length, 2);
  const delta = await page.$eval('#compare-inspect tbody tr:nth-child(2) td:nth-child(4)', (td) => Number(td.dataset.sort));
  assert.equal(delta, inspected[1] - inspected[0]);
  await page.click('#reset-zoom');
  // Both series are drawn over the whole axis, each with its own peak.
  const drawn = (await page.evaluate(() => window.cumemtraceViewer.drawn()))[0];
  assert.deepEqual(drawn.map((d) => [d.label, d.max]), runs.map((r) => [r.label, r.peak_bytes]));
  // Zoomed onto the aligned iterations, both runs still have memory in view.
  await page.evaluate(() => window.cumemtraceViewer.setView(-1e6, 2e7));
  await page.waitForFunction(() => window.cumemtraceViewer.view().t0 === -1e6);
  await page.waitForFunction(() => window.cumemtraceViewer.drawn()[0].every((d) => d.max > 0));
  const legend = await page.$$eval('#compare-legend .legend-item', (items) => items.map((e) => e.textContent));
  assert.equal(legend.length, 2);
  assert.match(legend[0], /async.*peak 836 MiB/);
  const peakRow = await page.$$eval('#compare-table tr[data-metric="peak"] td', (tds) => tds.map((td) => td.textContent));
  assert.deepEqual(peakRow.slice(1), ['836 MiB', '842 MiB', '+6.29 MiB (+0.8 %)']);
  // The warm-up iterations and the steady state of both, for the screenshot.
  await page.evaluate(() => window.cumemtraceViewer.setView(-5e7, 4.2e8));
  await page.waitForFunction(() => window.cumemtraceViewer.view().t0 === -5e7);
  await page.screenshot({ path: join(work, 'compare.png'), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test('sweep page: every point of a synthetic sweep, with its exact peak', async () => {
  const { page, problems } = await open('sweep/sweep.html');
  const sweep = await page.evaluate(() => window.cumemtraceViewer.sweep());
  assert.equal(sweep.parameter, 'n');
  assert.equal(sweep.numeric, true);
  assert.deepEqual(sweep.labels, ['A', 'B']);
  // The fake tracer allocates n MiB per batch and never frees: peak = batches x n MiB, all
  // of it live at the end. It marks no phases, so no lifetime figures: no persistent and no
  // activation memory (as sweep.json and summary.json say), drawn as no point at all.
  const MiB = 1 << 20;
  const want = [];
  // 1, 4, 16: a depth-like parameter, on a log axis.
  assert.equal(sweep.log, true);
  for (const n of [1, 4, 16]) {
    want.push({ label: 'A', value: String(n), x: Math.log10(n), peak: 3 * n * MiB });
    want.push({ label: 'B', value: String(n), x: Math.log10(n), peak: 2 * n * MiB });
  }
  assert.deepEqual(sweep.points.map((p) => ({ label: p.label, value: p.value, x: p.x, peak: p.peak_bytes })), want);
  for (const p of sweep.points) {
    assert.equal(p.exit_status, 0);
    assert.equal(p.persistent_bytes, null);
    assert.equal(p.activation_memory_bytes, null);
  }
  const rows = await page.$$eval('#sweep-table tbody tr', (trs) => trs.map((tr) => [tr.dataset.label,
    tr.dataset.value, Number(tr.dataset.peakBytes), tr.dataset.activationBytes, tr.cells[5].textContent]));
  assert.deepEqual(rows, want.map((w) => [w.label, w.value, w.peak, '', '–']));
  assert.equal(await page.locator('canvas.chart.sweep').count(), 3);
  // Each point links to its run's page, which exists.
  const links = await page.$$eval('#sweep-table a.run-link', (as) => as.map((a) => a.getAttribute('href')));
  assert.deepEqual(links, want.map((w) => `${w.label}-n=${w.value}/report.html`));
  for (const l of links) assert.ok(existsSync(join(work, 'sweep', l)), l);
  await page.screenshot({ path: join(work, 'sweep.png'), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});
