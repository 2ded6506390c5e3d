// The viewer in a real browser, on report.html files made by `cumemtrace export --format html`
// from golden traces (run_browser_test.sh makes them and the summaries they are checked
// against). Run through CTest: viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launchBrowser } from './browser.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

async function open(name) {
  const page = await browser.context.newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('requestfailed', (r) => problems.push('request failed: ' + r.url()));
  await page.goto(pathToFileURL(join(work, name + '.html')).href);
  await page.waitForFunction(() => window.cumemtraceViewer && window.cumemtraceViewer.ready);
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

test('the wheel zooms in around the pointer and a drag pans', async () => {
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
  // Drag right by 200 px: the same span, earlier times.
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2 + 200, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  const panned = await page.evaluate(() => window.cumemtraceViewer.view());
  assert.ok(Math.abs((panned.t1 - panned.t0) - (zoomed.t1 - zoomed.t0)) < 1e-3 * (zoomed.t1 - zoomed.t0));
  assert.ok(panned.t0 < zoomed.t0, 'dragging right shows earlier times');
  assert.ok(await inkedPixels(page, 0) > 5000, 'still drawn after zoom and pan');
  await page.screenshot({ path: join(work, 'torch_async_zoomed.png') });
  assert.deepEqual(problems, []);
  await page.close();
});
