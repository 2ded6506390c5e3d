// The viewer in a real browser, on report.html files made by `cumemtrace export --format html`
// from golden traces (run_browser_test.sh makes them and the summaries they are checked
// against). Run through CTest: viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launchBrowser, openViewer } from './browser.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

async function open(name) {
  const { page, problems } = await openViewer(browser, join(work, name + '.html'));
  const summary = JSON.parse(readFileSync(join(work, name + '.summary.json'), 'utf8'));
  return { page, problems, summary };
}

// Pixels of the chart canvas that are not background.
async function inkedPixels(page, index) {
  return page.evaluate((i) => {
    const c = document.querySelectorAll('canvas.chart')[i];
    const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let k = 3; k < px.length; k += 4) if (px[k] !== 0) n++;
    return n;
  }, index);
}

test('loads with no console errors and draws one chart per device', async () => {
  const { page, problems, summary } = await open('torch_async');
  const devices = summary.processes[0].devices;
  assert.equal(await page.locator('canvas.chart').count(), devices.length);
  for (let i = 0; i < devices.length; i++) {
    assert.ok(await inkedPixels(page, i) > 5000, 'the chart is drawn');
  }
  // The per-phase table has one row per phase and device, as in summary.json.
  const phaseRows = await page.locator('#phase-table tbody tr').count();
  const expected = summary.processes[0].phases.reduce((n, p) => n + p.devices.length, 0);
  assert.equal(phaseRows, expected);
  await page.screenshot({ path: join(work, 'torch_async.png'), fullPage: false });
  assert.deepEqual(problems, []);
  await page.close();
});

for (const name of ['torch_async', 'cuda_phases']) {
  test(`${name}: a click on the peak lists what summary.json says was live at it`, async () => {
    const { page, problems, summary } = await open(name);
    const device = summary.processes[0].devices[0];
    const point = await page.evaluate(() => window.cumemtraceViewer.peakPoint(0));
    assert.ok(point, 'the peak is marked');
    await page.mouse.click(point.x, point.y);
    await page.waitForSelector('#live-by-phase tbody tr');
    const rows = await page.$$eval('#live-by-phase tbody tr', (trs) => trs.map((tr) => ({
      phase: tr.dataset.phase, kind: tr.dataset.kind,
      count: Number(tr.dataset.count), bytes: Number(tr.dataset.bytes),
    })));
    const want = device.peak.live_by_phase_and_kind.map((g) => ({
      phase: g.phase === null ? '(no phase)' : g.phase, kind: g.kind, count: g.count, bytes: g.bytes,
    }));
    const key = (g) => `${g.phase}/${g.kind}`;
    assert.deepEqual(rows.sort((a, b) => key(a).localeCompare(key(b))),
      want.sort((a, b) => key(a).localeCompare(key(b))));
    assert.equal(rows.reduce((n, g) => n + g.bytes, 0), device.peak.bytes);
    // By API, the live set matches the summary's share of the peak per API.
    const apis = await page.$$eval('#live-by-api tbody tr',
      (trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.api, Number(tr.dataset.bytes)])));
    for (const [apiName, stats] of Object.entries(device.by_api)) {
      if (stats.live_at_peak_bytes > 0) assert.equal(apis[apiName], stats.live_at_peak_bytes, apiName);
    }
    const selection = await page.evaluate(() => window.cumemtraceViewer.selection());
    assert.equal(selection.device, device.index);
    if (name === 'torch_async') await page.screenshot({ path: join(work, 'torch_async_peak.png'), fullPage: true });
    assert.deepEqual(problems, []);
    await page.close();
  });
}

test('the wheel zooms in around the pointer and a shift+drag pans', async () => {
  const { page, problems } = await open('torch_async');
  const before_ = await page.evaluate(() => window.cumemtraceViewer.view());
  const box = await page.locator('canvas.chart').first().boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.wheel(0, -400);
  await page.waitForFunction((span) => {
    const v = window.cumemtraceViewer.view();
    return v.t1 - v.t0 < span * 0.8;
  }, before_.t1 - before_.t0);
  const zoomed = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(zoomed.t0 > before_.t0 && zoomed.t1 < before_.t1, 'zoomed inside the old range');
  const label = await page.locator('#range').textContent();
  assert.match(label, /showing/);
  // Shift+drag right by 200 px: the same span, earlier times.
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.keyboard.down('Shift');
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2 + 200, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  await page.keyboard.up('Shift');
  const panned = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(Math.abs((panned.t1 - panned.t0) - (zoomed.t1 - zoomed.t0)) < 1e-3 * (zoomed.t1 - zoomed.t0));
  assert.ok(panned.t0 < zoomed.t0, 'dragging right shows earlier times');
  assert.ok(await inkedPixels(page, 0) > 5000, 'still drawn after zoom and pan');
  await page.screenshot({ path: join(work, 'torch_async_zoomed.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

// The golden CUDA program asks for twice the device's memory: the page opens on that
// out-of-memory, with its post-mortem (docs/oom.md) above what was live then.
test('on load an out-of-memory is selected: why it did not fit and what was live then', async () => {
  const { page, problems, summary } = await open('cuda_phases');
  const failure = summary.processes[0].failed_allocations[0];
  await page.locator('#oom').waitFor({ state: 'visible' });
  assert.match(await page.locator('#oom h2').textContent(),
    new RegExp(`^Out of memory at \\S+ \\S+ on GPU ${failure.device}$`));
  const text = await page.locator('#oom').textContent();
  assert.ok(text.includes(failure.post_mortem.explanation), text);
  assert.match(await page.locator('#oom-would-fit').textContent(), /a smaller request: up to/);
  const selection = await page.evaluate(() => window.cumemtraceViewer.selection());
  assert.equal(selection.device, failure.device);
  const live = await page.$$eval('#live-by-phase tbody tr',
    (trs) => trs.reduce((n, tr) => n + Number(tr.dataset.bytes), 0));
  assert.equal(live, failure.post_mortem.held_bytes);
  assert.deepEqual(problems, []);
  await page.close();
});

test('on load the peak is selected: what was live there by allocating phase, with byte figures', async () => {
  const { page, problems, summary } = await open('torch_async');
  const device = summary.processes[0].devices[0];
  // No click: the breakdown is there and visible.
  await page.locator('#live-by-phase').waitFor({ state: 'visible' });
  const selection = await page.evaluate(() => window.cumemtraceViewer.selection());
  assert.equal(selection.device, device.index);
  const rows = await page.$$eval('#live-by-phase tbody tr', (trs) => trs.map((tr) => ({
    phase: tr.dataset.phase, kind: tr.dataset.kind, count: Number(tr.dataset.count), bytes: Number(tr.dataset.bytes),
  })));
  const want = device.peak.live_by_phase_and_kind.map((g) => ({
    phase: g.phase === null ? '(no phase)' : g.phase, kind: g.kind, count: g.count, bytes: g.bytes,
  }));
  const key = (g) => `${g.phase}/${g.kind}`;
  assert.deepEqual(rows.sort((a, b) => key(a).localeCompare(key(b))), want.sort((a, b) => key(a).localeCompare(key(b))));
  // The sentence above it names the peak in bytes, and the largest share's phase.
  const answer = await page.locator('#live-summary').textContent();
  assert.match(answer, /\(the peak\)/);
  assert.ok(answer.includes(device.peak.bytes.toLocaleString('en-US') + ' B'), answer);
  const top = want.sort((a, b) => b.bytes - a.bytes)[0];
  assert.match(answer, new RegExp(`allocated in ${top.phase}`));
  assert.ok(await page.locator('#live-largest tbody tr').count() > 0, 'the largest allocations are listed');
  // The chart's layers at the peak: the bytes of each allocating phase, summing to the peak.
  const layers = await page.evaluate(() => window.cumemtraceViewer.layersAt(0, window.cumemtraceViewer.selection().step));
  const byPhase = {};
  for (const g of want) byPhase[g.phase] = (byPhase[g.phase] || 0) + g.bytes;
  assert.deepEqual(layers, byPhase);
  // Over the whole run, the stacked layers reach the peak exactly, in the peak's column.
  await page.click('#reset-zoom');
  await page.waitForFunction(([a]) => window.cumemtraceViewer.view().t0 <= a, [0]);
  await page.waitForFunction((peak) => window.cumemtraceViewer.drawn()[0].layersMax === peak, device.peak.bytes);
  // The header says what the run was.
  const p = summary.processes[0];
  assert.equal(await page.locator('#run-command').textContent(), p.command_line.join(' '));
  assert.match(await page.locator('#run-exit').textContent(), /exit status 0/);
  assert.match(await page.locator('#run-allocator').textContent(), new RegExp(`allocator ${p.allocator.mode}`));
  assert.deepEqual(problems, []);
  await page.close();
});

test('the first view is the training iterations; "whole run" and the keyboard change it', async () => {
  const { page, problems, summary } = await open('torch_async');
  const p = summary.processes[0];
  const w = p.iterations.windows_ns;
  const full = await page.evaluate(() => window.cumemtraceViewer.full());
  const first = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(first.t0 > full[0] && first.t0 <= w[0][0], JSON.stringify({ first, full }));
  assert.ok(first.t1 >= w[w.length - 1][1] && first.t1 - first.t0 < (full[1] - full[0]) * 0.5, JSON.stringify({ first, full }));
  await page.click('#reset-zoom');
  await page.waitForFunction(([a, b]) => { const v = window.cumemtraceViewer.view(); return v.t0 <= a && v.t1 >= b; }, full);
  // W zooms in at the middle, A pans to earlier times, 0 shows the whole run again.
  await page.click('#zoom-iterations');
  const before_ = await page.evaluate(() => window.cumemtraceViewer.view());
  await page.keyboard.press('w');
  await page.waitForFunction((s) => { const v = window.cumemtraceViewer.view(); return v.t1 - v.t0 < s * 0.8; }, before_.t1 - before_.t0);
  const zoomed = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(zoomed.t0 > before_.t0 && zoomed.t1 < before_.t1);
  await page.keyboard.press('ArrowLeft');
  await page.waitForFunction((t0) => window.cumemtraceViewer.view().t0 < t0, zoomed.t0);
  await page.keyboard.press('+');
  await page.waitForFunction((s) => { const v = window.cumemtraceViewer.view(); return v.t1 - v.t0 < s * 0.8; }, zoomed.t1 - zoomed.t0);
  await page.keyboard.press('0');
  await page.waitForFunction(([a, b]) => { const v = window.cumemtraceViewer.view(); return v.t0 <= a && v.t1 >= b; }, full);
  // P: the iteration holding the peak.
  await page.keyboard.press('p');
  const peakTime = p.devices[0].peak.time_ns;
  await page.waitForFunction((t) => { const v = window.cumemtraceViewer.view(); return v.t0 < t && t < v.t1; }, peakTime);
  const atPeak = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(atPeak.t1 - atPeak.t0 < full[1] - full[0]);
  assert.deepEqual(problems, []);
  await page.close();
});

test('a drag selects a range and zooms to it', async () => {
  const { page, problems } = await open('torch_async');
  const before_ = await page.evaluate(() => window.cumemtraceViewer.view());
  const box = await page.locator('canvas.chart').first().boundingBox();
  const x0 = box.x + box.width * 0.4, x1 = box.x + box.width * 0.6, y = box.y + box.height / 2;
  await page.mouse.move(x0, y);
  await page.mouse.down();
  await page.mouse.move(x1, y, { steps: 5 });
  assert.ok(await page.locator('.drag-box').isVisible(), 'the selection is shown while dragging');
  await page.mouse.up();
  await page.waitForFunction((s) => { const v = window.cumemtraceViewer.view(); return v.t1 - v.t0 < s * 0.5; }, before_.t1 - before_.t0);
  const after_ = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(after_.t0 > before_.t0 && after_.t1 < before_.t1, 'inside the old view');
  assert.deepEqual(problems, []);
  await page.close();
});

test('hovering the chart shows a tooltip with the memory in use there', async () => {
  const { page, problems } = await open('torch_async');
  const box = await page.locator('canvas.chart').first().boundingBox();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
  await page.locator('#tooltip').waitFor({ state: 'visible' });
  const text = await page.locator('#tooltip').textContent();
  assert.match(text, /in use \d/);
  assert.match(text, /running: /);
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height + 200);
  await page.locator('#tooltip').waitFor({ state: 'hidden' });
  assert.deepEqual(problems, []);
  await page.close();
});

test('tables sort by a header click; the filter box narrows the largest allocations', async () => {
  const { page, problems } = await open('torch_async');
  const bytes = () => page.$$eval('#live-largest tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.bytes)));
  const header = page.locator('#live-largest th', { hasText: 'bytes' });
  await header.click();  // descending
  const desc = await bytes();
  assert.deepEqual(desc, [...desc].sort((a, b) => b - a));
  await header.click();  // ascending
  const asc = await bytes();
  assert.deepEqual(asc, [...asc].sort((a, b) => a - b));
  assert.ok(asc[0] < asc[asc.length - 1]);
  await page.fill('#live-filter', 'optimizer >=16MiB');
  const phases = await page.$$eval('#live-largest tbody tr', (trs) => trs.map((tr) => [tr.dataset.phase, Number(tr.dataset.bytes)]));
  assert.ok(phases.length > 0);
  for (const [phase, b] of phases) { assert.equal(phase, 'optimizer'); assert.ok(b >= 16 * 1024 * 1024); }
  await page.fill('#live-filter', '');
  assert.deepEqual(problems, []);
  await page.close();
});

test('the legend hides and shows a phase', async () => {
  const { page, problems } = await open('torch_async');
  const item = page.locator('#legend button.legend-item[data-phase="forward"]');
  await item.click();
  assert.deepEqual(await page.evaluate(() => window.cumemtraceViewer.hiddenPhases()), [0]);
  assert.equal(await item.getAttribute('aria-pressed'), 'false');
  await item.click();
  assert.deepEqual(await page.evaluate(() => window.cumemtraceViewer.hiddenPhases()), []);
  assert.deepEqual(problems, []);
  await page.close();
});

test('no sideways scrolling at 1280x800, and a screenshot for the README', async () => {
  for (const name of ['torch_async', 'cuda_phases', 'torch_native', 'compare', 'sweep/sweep']) {
    const page = await browser.context.newPage();
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(pathToFileURL(join(work, name + '.html')).href);
    await page.waitForFunction(() => window.cumemtraceViewer && window.cumemtraceViewer.ready);
    const { scroll, width } = await page.evaluate(() => ({
      scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth,
    }));
    assert.ok(scroll <= width, `${name}: the page is ${scroll} px wide in a ${width} px window`);
    if (name === 'torch_async') await page.screenshot({ path: join(work, 'torch_async_1280.png') });
    await page.close();
  }
});

// Names are data: a range named "<!--<script>" once made report.html render empty, because
// inside <script> it makes the HTML parser read the rest of the page as script.
for (const name of ['hostile_run', 'hostile_export']) {
  test(`${name}: hostile range names show as text and never as markup`, async () => {
    const { page, problems, summary } = await open(name);
    const want = summary.processes[0].phases.map((p) => p.name);
    assert.ok(want.includes('<!--<script>'), 'the summary has the hostile names');
    assert.equal(want.length, 5);
    const shown = await page.$$eval('#phase-table tbody tr', (trs) => trs.map((tr) => tr.cells[0].textContent));
    assert.deepEqual([...new Set(shown)].sort(), [...want].sort());
    assert.ok(await inkedPixels(page, 0) > 1000, 'the chart is drawn');
    assert.equal(await page.evaluate(() => window.pwned), undefined, 'no name ran as script');
    assert.equal(await page.locator('img').count(), 0, 'no name became an element');
    assert.equal(await page.locator('script').count(), 2, 'the data and the viewer, nothing else');
    assert.deepEqual(problems, []);
    await page.close();
  });
}
