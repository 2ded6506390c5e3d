// `cumemtrace export --format memory-viz` opened in PyTorch's own memory_viz page
// (MemoryViz.js, vendored under third_party/pytorch_memory_viz) with d3 5 from npm, in Debian's
// chromium: every view draws, with no page error, and the legend shows our phases. The page
// stopped with "Cannot read properties of undefined (reading 'push')" on a snapshot whose
// entries all had a phase (cuda_phases). run_browser_test.sh makes the snapshots. Run through
// CTest: viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchBrowser } from './browser.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');
const viewer = join(dirname(fileURLToPath(import.meta.url)), '..');
const modules = join(viewer, 'node_modules');
const pageScript = join(viewer, 'test', 'third_party', 'pytorch_memory_viz', 'MemoryViz.js');
const origin = 'http://memory-viz.test';

// MemoryViz.js imports d3 from skypack; an import map sends those URLs, and the bare names
// d3's own modules import, to the npm packages.
function importMap() {
  const imports = {
    'https://cdn.skypack.dev/d3@5': '/node_modules/d3/index.js',
    'https://cdn.skypack.dev/d3-axis@1': '/node_modules/d3-axis/src/index.js',
    'https://cdn.skypack.dev/d3-scale@1': '/node_modules/d3-scale/src/index.js',
    'https://cdn.skypack.dev/d3-zoom@1': '/node_modules/d3-zoom/src/index.js',
    'https://cdn.skypack.dev/d3-brush@1': '/node_modules/d3-brush/src/index.js',
  };
  for (const name of readdirSync(modules)) {
    if (name.startsWith('d3-')) imports[name] = `/node_modules/${name}/src/index.js`;
  }
  return { imports };
}

function pageHtml(snapshot, view) {
  const files = [{ name: snapshot, base64: readFileSync(join(work, snapshot)).toString('base64') }];
  return `<!DOCTYPE html><html><head><meta charset="utf-8">
<script type="importmap">${JSON.stringify(importMap())}</script></head><body>
<script type="module">
import { add_local_files } from '/MemoryViz.js';
add_local_files(${JSON.stringify(files)}, ${JSON.stringify(view)});
</script></body></html>`;
}

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

// Serves the page, MemoryViz.js and node_modules from a made-up origin (module scripts do not
// load from file://); anything else is refused, as browser.mjs refuses the network.
async function open(snapshot, view) {
  const page = await browser.context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));
  // Chromium asks for /favicon.ico on its own, past the routes; nothing else may fail.
  const favicon = (url) => new URL(url).pathname === '/favicon.ico';
  page.on('console', (m) => {
    if (m.type() === 'error' && !favicon(m.location().url || origin)) problems.push(m.text());
  });
  page.on('requestfailed', (r) => { if (!favicon(r.url())) problems.push('request failed: ' + r.url()); });
  await page.route(`${origin}/**`, async (route) => {
    const path = decodeURIComponent(new URL(route.request().url()).pathname);
    if (path === '/index.html') {
      return route.fulfill({ contentType: 'text/html', body: pageHtml(snapshot, view) });
    }
    if (path === '/MemoryViz.js') {
      return route.fulfill({ contentType: 'text/javascript', body: readFileSync(pageScript) });
    }
    // d3 5's sources import without the extension ("./selectorAll"), as node resolves them.
    const file = normalize(join(viewer, path.endsWith('.js') ? path : path + '.js'));
    if (path.startsWith('/node_modules/') && file.startsWith(modules + '/') && existsSync(file)) {
      return route.fulfill({ contentType: 'text/javascript', body: readFileSync(file) });
    }
    return route.abort();
  });
  await page.goto(`${origin}/index.html`);
  return { page, problems };
}

const summaryOf = (name) => JSON.parse(readFileSync(join(work, name + '.summary.json'), 'utf8'));
const exportedProcess = (name) => summaryOf(name).processes.reduce((a, b) =>
  (Math.max(0, ...a.devices.map((d) => d.peak.bytes)) >=
    Math.max(0, ...b.devices.map((d) => d.peak.bytes)) ? a : b));
const phasesOf = (name) => exportedProcess(name).phases.map((ph) => ph.name);
// PyTorch's names of our categories (collector/engine/lifetimes.cc MemoryVizCategoryName).
const pytorchName = { buffer: 'parameter', autograd_other: 'autograd_detail', workspace: 'unknown' };

for (const name of ['cuda_phases', 'torch_async']) {
  test(`${name}: the Active Memory Timeline draws every allocation, labelled by category or phase`, async () => {
    const { page, problems } = await open(name + '.memory_viz.pickle', 'Active Memory Timeline');
    await page.waitForFunction(() => document.querySelectorAll('svg polygon').length > 1 ||
      document.querySelector('body > div:last-child pre') !== null, null, { timeout: 20000 })
      .catch(() => {});
    assert.deepEqual(problems, []);
    const polygons = await page.$$eval('svg polygon', (ps) => ps.length);
    assert.ok(polygons > 1, `only ${polygons} polygons were drawn`);
    const legend = await page.$$eval('svg text', (ts) => ts.map((t) => t.textContent));
    assert.ok(legend.includes('unknown'), JSON.stringify(legend));
    const process = exportedProcess(name);
    if (process.categories && process.categories.given) {
      // Every category that holds tensors on the exported device is in the legend.
      const device = process.devices.find((d) => d.categories) || process.devices[0];
      for (const [category, figures] of Object.entries(device.categories.by_category)) {
        if (figures.allocations === 0) continue;
        const label = pytorchName[category] || category;
        assert.ok(legend.includes(label), `${category} (${label}) is not in the legend ${legend}`);
      }
      await page.close();
      return;
    }
    for (const phase of phasesOf(name)) {
      // Phases that allocated nothing on the exported device have no category.
      if (legend.includes(phase)) continue;
      const summary = summaryOf(name);
      const allocated = summary.processes.flatMap((p) => p.phases).filter((ph) => ph.name === phase)
        .flatMap((ph) => ph.devices).reduce((sum, d) => sum + d.allocations, 0);
      assert.equal(allocated, 0, `phase ${phase} allocated but is not in the legend ${legend}`);
    }
    await page.close();
  });

  test(`${name}: Allocator State History lists the events and draws the last one's state`, async () => {
    const { page, problems } = await open(name + '.memory_viz.pickle', 'Allocator State History');
    // The page selects the last event once drawn (a highlighted entry): draw() ran to the end.
    await page.waitForFunction(() => document.querySelector('pre[style*="background-color"]'),
      null, { timeout: 20000 }).catch(() => {});
    assert.deepEqual(problems, []);
    const events = await page.$$eval('pre', (ps) => ps.map((p) => p.textContent));
    assert.ok(events.length > 2, `${events.length} entries`);
    const selected = await page.$$eval('pre[style*="background-color"]', (ps) => ps.length);
    assert.equal(selected, 1);
    await page.close();
  });

  test(`${name}: Active Cached Segment Timeline draws without a page error`, async () => {
    const { page, problems } = await open(name + '.memory_viz.pickle', 'Active Cached Segment Timeline');
    await page.waitForFunction(() => document.querySelectorAll('svg polygon').length > 1,
      null, { timeout: 20000 }).catch(() => {});
    assert.deepEqual(problems, []);
    const drawn = await page.$$eval('svg polygon', (xs) => xs.length);
    assert.ok(drawn > 1, `only ${drawn} polygons were drawn`);
    await page.close();
  });
}
