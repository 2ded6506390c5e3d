// The timeline stacked by category and the peaks' breakdown, against `cumemtrace report
// --json` of the same trace (run_browser_test.sh makes both): a fabricated training step with
// every layer (categories.html: the allocator bridge's tensors, some named by the program's
// objects, PyTorch's cache, cuBLAS's memory), golden PyTorch traces without tags (async and
// native), a LibTorch program, and a CUDA program, which has no categories.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { launchBrowser, openViewer, until } from './browser.mjs';

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

// The report's figures at one peak as the page's layers: name → bytes.
function reportLayers(c, which, layers) {
  const out = {};
  for (const name of layers) {
    if (name === 'not_torch') out[name] = c[which].not_torch_bytes;
    else if (name === 'torch_cache') out[name] = c[which].torch_cache_bytes;
    else out[name] = c.by_category[name][which].bytes;
  }
  return out;
}

for (const name of ['categories', 'categories_long', 'torch_async', 'torch_native', 'libtorch_native']) {
  test(`${name}: the stacked layers at both peaks are the report's figures, to the byte`, async () => {
    const { page, problems, summary } = await open(name);
    const devices = summary.processes[0].devices;
    assert.equal(await page.evaluate(() => window.cumemtraceViewer.stackBy()), 'category');
    for (let slot = 0; slot < devices.length; slot++) {
      const c = devices[slot].categories;
      assert.ok(c, 'the report has categories');
      const withAllocations = Object.keys(c.by_category).filter((k) => c.by_category[k].allocations > 0);
      const atDevice = await page.evaluate((s) => window.cumemtraceViewer.categoriesAtPeak(s, 'device'), slot);
      const atTensor = await page.evaluate((s) => window.cumemtraceViewer.categoriesAtPeak(s, 'tensor'), slot);
      const layers = Object.keys(atDevice.layers);
      // Every category with allocations, in the report's order, then what is not a tensor.
      assert.deepEqual(layers.filter((l) => l !== 'not_torch' && l !== 'torch_cache'), withAllocations);
      assert.equal(layers.includes('torch_cache'), c.tensor_layer === 'torch_allocated');
      assert.deepEqual(atDevice.layers, reportLayers(c, 'at_device_peak', layers));
      assert.deepEqual(atTensor.layers, reportLayers(c, 'at_tensor_peak', layers));
      assert.equal(atDevice.inUse, devices[slot].peak.bytes);
      assert.equal(atTensor.inUse - atTensor.layers.not_torch, c.tensor_peak.bytes);
      assert.equal(atDevice.time, devices[slot].peak.time_ns);
      assert.equal(atTensor.time, c.tensor_peak.time_ns);
    }
    // Over the whole run the chart draws the device peak's column with exactly those layers,
    // and its in-use part reaches the peak.
    await page.click('#reset-zoom');
    await until(page, () => window.cumemtraceViewer.view().t0 <= 0);
    await until(page, () => window.cumemtraceViewer.drawn()[0].categories !== null);
    const drawn = await page.evaluate(() => window.cumemtraceViewer.drawn()[0]);
    assert.equal(drawn.stackBy, 'category');
    assert.equal(drawn.categories.inUseTop, devices[0].peak.bytes);
    assert.deepEqual(drawn.categories.peakColumn,
      reportLayers(devices[0].categories, 'at_device_peak', Object.keys(drawn.categories.peakColumn)));
    assert.deepEqual(problems, []);
    await page.close();
  });
}

test('categories_long: a run longer than the bound is sampled to it, and says so', async () => {
  const { page, problems, summary } = await open('categories_long');
  const series = await page.evaluate(() => {
    const d = JSON.parse(document.getElementById('cumemtrace-data').textContent).processes[0].devices[0];
    return { steps: d.steps.n, n: d.categories.n, sampled: d.categories.sampled, max: d.categories.max_points };
  });
  assert.ok(series.steps > series.max, `${series.steps} steps`);
  assert.ok(series.sampled);
  assert.ok(series.n <= series.max + 2, `${series.n} points`);
  assert.match(await page.locator('.category-device .hint').textContent(), /points sampled from/);
  // The layers at the peaks stay exact (the loop above checks every layer by the byte).
  const at = await page.evaluate(() => window.cumemtraceViewer.categoriesAtPeak(0, 'device'));
  assert.equal(at.inUse, summary.processes[0].devices[0].peak.bytes);
  assert.deepEqual(problems, []);
  await page.close();
});

test('categories: the breakdown table and bars are the report\'s figures, objects and inferred apart', async () => {
  const { page, problems, summary } = await open('categories');
  const c = summary.processes[0].devices[0].categories;
  assert.equal(c.tensor_layer, 'torch_allocated');
  assert.ok(c.at_device_peak.torch_cache_bytes > 0 && c.at_device_peak.not_torch_bytes > 0, 'every layer is there');
  const rows = await page.$$eval('table.category-table tbody tr', (trs) => trs.map((tr) => ({ ...tr.dataset })));
  const byLayer = Object.fromEntries(rows.map((r) => [r.layer, r]));
  let objects = 0, inferred = 0;
  for (const [name, f] of Object.entries(c.by_category)) {
    if (f.allocations === 0) { assert.equal(byLayer[name], undefined, name); continue; }
    const r = byLayer[name];
    assert.equal(Number(r.devicePeak), f.at_device_peak.bytes, name);
    assert.equal(Number(r.tensorPeak), f.at_tensor_peak.bytes, name);
    assert.equal(Number(r.ownPeak), f.own_peak.bytes, name);
    assert.equal(Number(r.objects), f.at_device_peak.objects_bytes, name);
    assert.equal(Number(r.inferred), f.at_device_peak.inferred_bytes, name);
    assert.equal(Number(r.ownObjects), f.own_peak.objects_bytes, name);
    objects += f.at_device_peak.objects_bytes;
    inferred += f.at_device_peak.inferred_bytes;
  }
  assert.ok(objects > 0 && inferred > 0, 'the trace has figures of both sources');
  assert.equal(Number(byLayer.not_torch.devicePeak), c.at_device_peak.not_torch_bytes);
  assert.equal(Number(byLayer.torch_cache.tensorPeak), c.at_tensor_peak.torch_cache_bytes);
  // The bar of each peak: its segments are the layers with bytes there, sized by them.
  for (const which of ['at_device_peak', 'at_tensor_peak']) {
    const segments = await page.$$eval(`.stack-bar[data-peak="${which}"] span`,
      (spans) => spans.map((s) => [s.dataset.layer, s.getBoundingClientRect().width]));
    const want = Object.entries(reportLayers(c, which, rows.map((r) => r.layer))).filter(([, b]) => b > 0);
    assert.deepEqual(segments.map(([l]) => l), want.map(([l]) => l), which);
    const sum = want.reduce((n, [, b]) => n + b, 0), width = segments.reduce((n, [, w]) => n + w, 0);
    segments.forEach(([l, w], i) => assert.ok(Math.abs(w / width - want[i][1] / sum) < 0.01, `${which} ${l}`));
  }
  // The legend names each layer once, in the order stacked.
  const legend = await page.$$eval('#category-legend [data-category]', (xs) => xs.map((x) => x.dataset.category));
  assert.deepEqual(legend, rows.map((r) => r.layer));
  assert.match(await page.locator('.category-device .hint').textContent(), /objects: named by the program's/);
  assert.deepEqual(problems, []);
  await page.close();
});

test('categories: hovering the peak tells its time, each layer\'s bytes and the total', async () => {
  const { page, problems, summary } = await open('categories');
  const device = summary.processes[0].devices[0];
  await page.click('#reset-zoom');
  await until(page, () => window.cumemtraceViewer.view().t0 <= 0);
  const point = await page.evaluate(() => window.cumemtraceViewer.peakPoint(0));
  await page.mouse.move(point.x, point.y);
  await page.locator('#tooltip').waitFor({ state: 'visible' });
  const text = await page.locator('#tooltip').textContent();
  // What the hover reads is the column the peak is drawn in: the report's layers there.
  const at = await page.evaluate((ns) => window.cumemtraceViewer.stackAt(0, ns), device.peak.time_ns);
  assert.deepEqual(at.layers, reportLayers(device.categories, 'at_device_peak', Object.keys(at.layers)));
  assert.equal(at.total, device.peak.bytes + device.categories.at_device_peak.torch_cache_bytes);
  assert.match(text, /by category, at /);
  for (const label of ['parameter', 'activation', 'not PyTorch\'s', 'PyTorch\'s cache', 'total']) {
    assert.ok(text.includes(label), `${label} is not in the hover: ${text}`);
  }
  assert.deepEqual(problems, []);
  await page.close();
});

test('categories: the phase bands stay, and the colouring can go back to phases', async () => {
  const { page, problems } = await open('categories');
  assert.ok(await page.locator('#legend button.legend-item[data-phase="forward"]').count() === 1, 'phases stay in the legend');
  await page.selectOption('#stack-by', 'phase');
  await until(page, () => window.cumemtraceViewer.drawn()[0].stackBy === 'phase');
  assert.ok(await page.locator('#category-legend').isHidden());
  await page.selectOption('#stack-by', 'category');
  await until(page, () => window.cumemtraceViewer.drawn()[0].stackBy === 'category');
  assert.deepEqual(problems, []);
  await page.close();
});

test('cuda_phases: no categories is said once, with no empty chart or legend', async () => {
  const { page, problems, summary } = await open('cuda_phases');
  assert.equal(summary.processes[0].devices[0].categories, null);
  assert.equal(await page.locator('#categories-none').count(), 1);
  assert.equal(await page.locator('table.category-table, .stack-bar, #category-legend').count(), 0);
  assert.deepEqual(await page.$$eval('#stack-by option', (os) => os.map((o) => o.value)), ['phase', 'none']);
  assert.equal(await page.evaluate(() => window.cumemtraceViewer.stackBy()), 'phase');
  await until(page, () => window.cumemtraceViewer.drawn()[0] && window.cumemtraceViewer.drawn()[0].stackBy === 'phase');
  assert.deepEqual(problems, []);
  await page.close();
});
