// The flame graph by module and by operator (`run --modules`, `--ops`): a selector beside it
// offers the groupings the trace has data for, the boxes are the live bytes of each module
// path (or operator) to the byte, a backward tensor counts under its forward op's module and
// under "backward of <forward op>", and a click zooms. The pages are the golden torch_async
// export with its allocations replaced by a few made here, in the layout WriteViewerHtml gives
// them (docs/exports.md): per process `attributions` (columns `module`, `operator`,
// `inner_operator`, `backward`, `forward_operator` of ids into its `strings`, 0: none) and per
// device the allocation column `attribution` indexing it. Expected figures
// are computed here from the page's own columns, not by the viewer. Run through CTest:
// viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { launchBrowser, openViewer, until } from './browser.mjs';
import { readPage, writePage, column, b64 } from './page_data.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

const MiB = 1024 * 1024, KiB = 1024;
const NO_STEP = 0xffffffff;
const ONE_STACK = { frames: { function: ['main'], file: ['/home/user/train.py'], line: [3], kind: ['python'] },
  stacks: [[0]] };

// Each allocation: bytes, born at step 0, released at `death` (never when absent), its module
// path, outer and inner operator, born in backward, and the forward op it was linked to.
// The model, `<Model>`, holds encoder.attn (3 MiB, forward) and decoder.mlp (1 MiB, a
// backward tensor whose module is its forward op's); the model's own 512 KiB; 256 KiB born
// outside every module and operator; a 2 MiB encoder tensor released at the peak's step, so
// live only before it; a 640 KiB backward tensor whose forward op allocated nothing (not linked).
const ALLOCATIONS = [
  { bytes: 3 * MiB, module: 'encoder.attn', op: 'aten::linear', inner: 'aten::addmm' },
  { bytes: 1 * MiB, module: 'decoder.mlp', op: 'AddmmBackward0', inner: 'aten::mm', backward: true,
    forward: 'aten::linear' },
  { bytes: 512 * KiB, module: '<Model>', op: 'aten::empty', inner: 'aten::empty' },
  { bytes: 256 * KiB },
  { bytes: 2 * MiB, module: 'encoder.attn', op: 'aten::linear', inner: 'aten::addmm', death: 'peak' },
  { bytes: 640 * KiB, module: 'decoder', op: 'ViewBackward0', backward: true },
];

// torch_async.html with `list` (ALLOCATIONS) on its device; `modules: false` leaves every
// module none (a trace recorded with --ops only), `stacks` adds one stack for every allocation.
function makePage(file, { modules = true, stacks = false, list = ALLOCATIONS } = {}) {
  const page = readPage(work, 'torch_async');
  const p = page.data.processes[0], d = p.devices[0];
  const id = (text) => {
    if (!text) return 0;
    let i = p.strings.indexOf(text);
    if (i < 0) i = p.strings.push(text) - 1;
    return i;
  };
  const n = list.length;
  const phase0 = column(d.allocations.phase, Int32Array)[0], kind0 = column(d.allocations.kind, Uint8Array)[0];
  d.allocations = {
    n,
    birth_step: b64(new Uint32Array(n)),
    death_step: b64(Uint32Array.from(list, (x) => deathOf(x, d.peak_step))),
    bytes: b64(Float64Array.from(list, (x) => x.bytes)),
    phase: b64(new Int32Array(n).fill(phase0)),
    api: b64(new Uint32Array(n)),
    library: b64(new Uint32Array(n)),
    kind: b64(new Uint8Array(n).fill(kind0)),
  };
  // The process' distinct attributions ([0]: none), each allocation's index into them.
  const table = { module: [0], operator: [0], inner_operator: [0], backward: [0], forward_operator: [0] };
  const entries = new Map([['0,0,0,0,0', 0]]);
  const entry = (x) => {
    const row = [modules ? id(x.module) : 0, id(x.op), id(x.inner), x.backward ? 1 : 0, id(x.forward)];
    if (!entries.has(String(row))) {
      entries.set(String(row), table.module.length);
      Object.values(table).forEach((col, k) => col.push(row[k]));
    }
    return entries.get(String(row));
  };
  d.allocations.attribution = b64(Uint32Array.from(list, entry));
  p.attributions = { n: table.module.length, ...table };
  if (stacks) {
    p.stacks = ONE_STACK;
    d.allocations.stack = new Array(n).fill(0);
  }
  writePage(work, page, file);
  return d;
}

// The live allocations at a step, and the bytes per box path as the viewer should draw them.
const deathOf = (x, peakStep) => (x.death === 'peak' ? peakStep : NO_STEP);
const liveAt = (step, peakStep) => ALLOCATIONS.filter((x) => deathOf(x, peakStep) > step);
function bytesByModule(live) {
  const out = {};
  const add = (k, b) => { out[k] = (out[k] || 0) + b; };
  for (const x of live) {
    if (!x.module) { add('(no module)', x.bytes); continue; }
    add('<Model>', x.bytes);
    if (x.module[0] === '<') continue;
    const segs = x.module.split('.');
    for (let k = 1; k <= segs.length; k++) add(segs.slice(0, k).join('.'), x.bytes);
  }
  return out;
}

const open = (file) => openViewer(browser, join(work, file));
const flame = (page) => page.evaluate(() => window.cumemtraceViewer.flame());
const options = (page) => page.$$eval('#flame-by option', (os) => os.map((o) => o.value));
async function choose(page, by) {
  await page.selectOption('#flame-by', by);
  await until(page, (b) => window.cumemtraceViewer.flame().by === b, by);
  return flame(page);
}
const boxesAt = (f, depth) => Object.fromEntries(f.boxes.filter((b) => b.depth === depth).map((b) => [b.path, b]));

test('flame by module: the model, then each module, to the byte, widths by bytes', async () => {
  const d = makePage('flame_modules.html');
  const { page, problems } = await open('flame_modules.html');
  await page.locator('#flame-graph').waitFor({ state: 'visible' });
  assert.deepEqual(await options(page), ['module', 'operator'], 'no stacks in this trace: no "by stack"');
  assert.ok(await page.locator('#flame-by').isVisible());
  const f = await choose(page, 'module');
  const live = liveAt(d.peak_step, d.peak_step);
  const total = live.reduce((s, x) => s + x.bytes, 0);
  assert.equal(f.rootBytes, total);
  assert.equal(f.liveCount, live.length);
  assert.match(f.title, new RegExp(`^Live at the peak of GPU ${d.index}, by module$`));
  const want = bytesByModule(live);
  // Under the root: the model and "(no module)".
  const top = boxesAt(f, 1);
  assert.deepEqual(Object.keys(top).sort(), ['(no module)', '<Model>']);
  assert.equal(top['<Model>'].bytes, want['<Model>']);
  assert.equal(top['(no module)'].bytes, 256 * KiB);
  // Under the model: encoder (3 MiB) and decoder (1 MiB + 640 KiB, both backward tensors),
  // each as wide as its share of the root's width.
  const second = boxesAt(f, 2);
  assert.deepEqual(Object.keys(second).sort(), ['decoder', 'encoder']);
  assert.equal(second.encoder.bytes, 3 * MiB);
  assert.equal(second.decoder.bytes, 1 * MiB + 640 * KiB);
  for (const b of [...Object.values(top), ...Object.values(second)]) {
    assert.ok(Math.abs(b.w - f.width * b.bytes / total) <= 2, JSON.stringify(b));
  }
  assert.ok(Math.abs(second.encoder.w / second.decoder.w - 3 * MiB / (1664 * KiB)) < 0.02);
  assert.equal(boxesAt(f, 3)['encoder.attn'].bytes, 3 * MiB);
  assert.equal(boxesAt(f, 3)['decoder.mlp'].bytes, 1 * MiB);
  for (const [path, bytes] of Object.entries(want)) {
    assert.equal(f.boxes.find((b) => b.path === path).bytes, bytes, path);
  }
  // Hover: the module path and its bytes.
  await page.locator('#flame-graph .flame-box[data-path="encoder.attn"]').hover();
  await page.locator('#tooltip').waitFor({ state: 'visible' });
  const tip = await page.locator('#tooltip').textContent();
  assert.ok(tip.includes('module encoder.attn') && tip.includes((3 * MiB).toLocaleString('en-US') + ' B'), tip);
  await page.locator('#flame').screenshot({ path: join(work, 'flame_by_module.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('flame by module: a click zooms, the title says into what; the choice stays at another instant', async () => {
  const d = makePage('flame_modules.html');
  const { page, problems } = await open('flame_modules.html');
  await choose(page, 'module');
  await page.click('#flame-graph .flame-box[data-path="encoder"]');
  await until(page, () => window.cumemtraceViewer.flame().focusPath === 'encoder');
  const z = await flame(page);
  const encoder = z.boxes.find((b) => b.path === 'encoder'), attn = z.boxes.find((b) => b.path === 'encoder.attn');
  assert.ok(Math.abs(encoder.w - z.width) <= 1 && Math.abs(attn.w - z.width) <= 1, JSON.stringify(z.boxes));
  assert.ok(!z.boxes.some((b) => b.path === 'decoder' || b.path === '(no module)'), 'its siblings are not drawn');
  assert.match(z.title, /, by module: encoder$/);
  assert.ok(await page.locator('#flame-reset').isVisible());
  await page.click('#flame-reset');
  await until(page, () => window.cumemtraceViewer.flame().focusPath === '');
  // A click early in the whole run: the 2 MiB tensor released at the peak is live there.
  await page.keyboard.press('0');
  const chart = page.locator('canvas.chart').first();
  await chart.scrollIntoViewIfNeeded();  // the clicks on the flame graph scrolled the page
  const box = await chart.boundingBox();
  await page.mouse.click(box.x + 90, box.y + box.height / 2);
  await until(page, (t) => !window.cumemtraceViewer.flame().title.includes(t), 'at the peak');
  const step = (await page.evaluate(() => window.cumemtraceViewer.selection())).step;
  const f = await flame(page);
  assert.equal(f.by, 'module');
  assert.match(f.title, new RegExp(`^Live on GPU ${d.index} at .+, by module$`));
  assert.ok(step >= 0 && step < d.peak_step, `step ${step} is before the peak`);
  const live = liveAt(step, d.peak_step), want = bytesByModule(live);
  assert.equal(f.rootBytes, live.reduce((s, x) => s + x.bytes, 0));
  assert.equal(want.encoder, 5 * MiB);
  assert.equal(f.boxes.find((b) => b.path === 'encoder').bytes, want.encoder);
  assert.deepEqual(problems, []);
  await page.close();
});

test('flame by operator: forward and backward, "backward of" the linked forward op, then the inner op', async () => {
  const d = makePage('flame_modules.html');
  const { page, problems } = await open('flame_modules.html');
  const f = await choose(page, 'operator');
  const live = liveAt(d.peak_step, d.peak_step);
  assert.match(f.title, /, by operator$/);
  const top = boxesAt(f, 1);
  assert.deepEqual(Object.keys(top).sort(), ['(no operator)', 'backward', 'forward']);
  assert.equal(top.forward.bytes, 3 * MiB + 512 * KiB);
  // Both backward tensors: dropping them would leave this box out or short.
  assert.equal(top.backward.bytes, live.filter((x) => x.backward).reduce((s, x) => s + x.bytes, 0));
  assert.equal(top.backward.bytes, 1 * MiB + 640 * KiB);
  assert.equal(top['(no operator)'].bytes, 256 * KiB);
  const second = boxesAt(f, 2);
  assert.equal(second['backward / backward of aten::linear'].bytes, 1 * MiB);
  assert.equal(second['backward / ViewBackward0'].bytes, 640 * KiB, 'an unlinked node keeps its own name');
  assert.equal(second['forward / aten::linear'].bytes, 3 * MiB);
  assert.equal(second['forward / aten::empty'].bytes, 512 * KiB);
  const third = boxesAt(f, 3);
  assert.equal(third['backward / backward of aten::linear / aten::mm'].bytes, 1 * MiB);
  assert.equal(third['forward / aten::linear / aten::addmm'].bytes, 3 * MiB);
  assert.ok(!('forward / aten::empty / aten::empty' in third), 'an inner op equal to the outer one adds no box');
  for (const b of [...Object.values(top), ...Object.values(second)]) {
    assert.ok(Math.abs(b.w - f.width * b.bytes / f.rootBytes) <= 2, JSON.stringify(b));
  }
  // Hover on the linked box names the autograd node behind it.
  await page.locator('#flame-graph .flame-box[data-path="backward / backward of aten::linear"]').hover();
  await page.locator('#tooltip').waitFor({ state: 'visible' });
  assert.match(await page.locator('#tooltip').textContent(), /autograd node: AddmmBackward0/);
  // Zoom into backward: it fills the width.
  await page.click('#flame-graph .flame-box[data-path="backward"]');
  await until(page, () => window.cumemtraceViewer.flame().focusPath === 'backward');
  const z = await flame(page);
  assert.ok(!z.boxes.some((b) => b.path === 'forward'));
  assert.ok(Math.abs(z.boxes.find((b) => b.path === 'backward').w - z.width) <= 1);
  await page.locator('#flame').screenshot({ path: join(work, 'flame_by_operator.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('flame selector: no "by module" without modules; no selector with one choice', async () => {
  makePage('flame_ops_only.html', { modules: false, stacks: true });
  let { page, problems } = await open('flame_ops_only.html');
  await page.locator('#flame-graph').waitFor({ state: 'visible' });
  assert.deepEqual(await options(page), ['stack', 'operator']);
  assert.equal((await flame(page)).by, 'stack', 'by stack first, as before');
  assert.equal((await choose(page, 'operator')).boxes.filter((b) => b.depth === 1).length, 3);
  assert.deepEqual(problems, []);
  await page.close();
  // Stacks alone: one choice, no selector to show.
  const plain = readPage(work, 'torch_async');
  const pp = plain.data.processes[0];
  pp.stacks = ONE_STACK;
  pp.devices[0].allocations.stack = new Array(pp.devices[0].allocations.n).fill(0);
  writePage(work, plain, 'flame_stacks_only.html');
  ({ page, problems } = await open('flame_stacks_only.html'));
  await page.locator('#flame-graph').waitFor({ state: 'visible' });
  assert.deepEqual((await flame(page)).choices, ['stack']);
  assert.equal(await page.locator('#flame-by').isVisible(), false);
  assert.deepEqual(problems, []);
  await page.close();
});

// The page `cumemtrace export` makes of a step with modules and operators
// (attribution_trace_main.cc): the flame graph at the peak (here the tensors' peak) against
// `cumemtrace report --json` of the same trace, to the byte.
test('flame by module and operator on a real export: summary.json\'s figures at the tensor peak', async () => {
  const summary = JSON.parse(readFileSync(join(work, 'attribution.summary.json'), 'utf8'));
  const dev = summary.processes[0].devices[0], attribution = dev.attribution;
  assert.equal(attribution.tensor_peak.bytes, dev.peak.bytes, 'the device peak is the tensors\' peak');
  const { page, problems } = await open('attribution.html');
  await page.locator('#flame-graph').waitFor({ state: 'visible' });
  assert.deepEqual(await options(page), ['module', 'operator']);
  const f = await flame(page);
  assert.equal(f.by, 'module', 'no stacks: by module first');
  assert.equal(f.rootBytes, attribution.tensor_peak.bytes);
  // Every module row of the report is a box of its subtree's bytes, "(no module)" included.
  for (const row of attribution.by_module) {
    const path = row.module === null ? '(no module)' : row.module;
    const box = f.boxes.find((b) => b.path === path);
    assert.ok(box, `a box for ${path}: ${JSON.stringify(f.boxes.map((b) => b.path))}`);
    assert.equal(box.bytes, row.bytes, path);
  }
  // The model at the top; the backward tensor (2 MiB) in decoder.mlp, its forward op's module.
  assert.deepEqual(Object.keys(boxesAt(f, 1)).sort(), ['(no module)', '<Net>']);
  assert.equal(f.boxes.find((b) => b.path === 'decoder.mlp').bytes, 3 * MiB);
  const o = await choose(page, 'operator');
  const byOp = Object.fromEntries(attribution.by_operator.map((r) => [r.operator, r.bytes]));
  const second = boxesAt(o, 2);
  assert.equal(second['forward / aten::linear'].bytes, byOp['aten::linear']);
  assert.equal(second['forward / aten::empty'].bytes, byOp['aten::empty']);
  assert.equal(second['backward / backward of aten::linear'].bytes, byOp.AddmmBackward0);
  assert.equal(second['backward / ViewBackward0'].bytes, byOp.ViewBackward0);
  assert.equal(boxesAt(o, 1).backward.bytes, attribution.backward.bytes, 'every backward tensor is live at the peak');
  assert.equal(boxesAt(o, 1)['(no operator)'].bytes, attribution.by_operator.find((r) => r.operator === null).bytes);
  assert.equal(boxesAt(o, 3)['backward / backward of aten::linear / aten::mm'].bytes, 2 * MiB);
  assert.deepEqual(problems, []);
  await page.close();
});

// Module paths and operator names are the traced program's strings: they reach the page as
// text only.
test('flame by module and operator: hostile names render as text, never as markup', async () => {
  const module = 'enc.<img src=x onerror="top[\'pwned\']=1">.-->';  // no '.' in a segment
  const op = '</script><script>window.pwned=2</script>';
  makePage('flame_hostile.html', { list: [{ bytes: MiB, module, op, inner: '&lt;b&gt;' }] });
  const { page, problems } = await open('flame_hostile.html');
  const f = await choose(page, 'module');
  assert.equal(f.boxes.find((b) => b.path === module).bytes, MiB);
  assert.ok((await page.locator('#flame-graph').textContent()).includes('<img src=x onerror="top[\'pwned\']=1">'));
  const o = await choose(page, 'operator');
  assert.equal(o.boxes.find((b) => b.path === `forward / ${op} / &lt;b&gt;`).bytes, MiB);
  assert.equal(await page.evaluate(() => window.pwned), undefined, 'no name ran as script');
  assert.equal(await page.locator('img').count(), 0, 'no name became an element');
  assert.deepEqual(problems, []);
  await page.close();
});
