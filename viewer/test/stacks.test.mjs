// Allocation stacks (run --stacks) in the viewer: the allocating frame in the table of the
// largest live allocations, an allocation's whole stack, and the flame graph of the bytes live
// at the peak. The pages are real exports of golden traces (run_browser_test.sh makes them)
// with stacks added here in the layout WriteViewerHtml gives them (docs/exports.md): per
// process "stacks" (columnar frames, each stack a list of frame indices, innermost first) and
// per device an allocation column "stack" (-1: none). Expected figures are computed here from
// the page's own columns, not by the viewer. Run through CTest: viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launchBrowser } from './browser.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

const DATA_OPEN = '<script id="cumemtrace-data" type="application/json">';
function readPage(name) {
  const html = readFileSync(join(work, name + '.html'), 'utf8');
  const at = html.indexOf(DATA_OPEN) + DATA_OPEN.length, end = html.indexOf('</script>', at);
  assert.ok(at > DATA_OPEN.length && end > at, `${name}.html holds the page data`);
  return { before: html.slice(0, at), data: JSON.parse(html.slice(at, end)), after: html.slice(end) };
}
// As EscapeJsonForScript does: nothing in the data can end or change the script element.
function writePage(page, file) {
  const text = JSON.stringify(page.data).replace(/[<>&\u2028\u2029]/g,
    (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  writeFileSync(join(work, file), page.before + text + page.after);
}
function column(b64, Type) {
  const bytes = Buffer.from(b64, 'base64');
  return new Type(new Uint8Array(bytes).buffer);
}
const b64 = (typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString('base64');

// The allocations live at the device's peak step, largest first (the page's order: bytes
// descending, then birth).
function liveAtPeak(d) {
  const a = d.allocations, birth = column(a.birth_step, Uint32Array), death = column(a.death_step, Uint32Array);
  const bytes = column(a.bytes, Float64Array), phase = column(a.phase, Int32Array);
  const live = [];
  for (let i = 0; i < a.n; i++) if (birth[i] <= d.peak_step && d.peak_step < death[i]) live.push(i);
  live.sort((x, y) => bytes[y] - bytes[x] || birth[x] - birth[y]);
  return { live, bytes, phase };
}

// A PyTorch-like stack table: the script, the model, torch's own Python frames and an
// unsymbolized native frame, innermost first.
function frames(list) {
  return {
    function: list.map((f) => f[0]), file: list.map((f) => f[1]), line: list.map((f) => f[2]), kind: list.map((f) => f[3]),
  };
}
const TORCH = '/opt/venv/lib/python3.12/site-packages/torch';
const FRAMES = [
  ['<module>', '/home/user/train.py', 80, 'python'],                  // 0
  ['train_step', '/home/user/train.py', 42, 'python'],                // 1
  ['forward', '/home/user/model.py', 17, 'python'],                   // 2
  ['_call_impl', TORCH + '/nn/modules/module.py', 1751, 'python'],    // 3
  ['linear', TORCH + '/nn/functional.py', 2380, 'python'],            // 4
  ['0x7f3a12345678', TORCH + '/lib/libc10_cuda.so', 0, 'native'],     // 5
  ['backward', '/home/user/train.py', 45, 'python'],                  // 6
  ['step', TORCH + '/optim/adam.py', 213, 'python'],                  // 7
  ['big_layer', '/home/user/model.py', 123, 'python'],                // 8
];
const STACKS = [
  [5, 4, 3, 2, 1, 0],  // forward: model.py:17
  [5, 6, 1, 0],        // backward: train.py:45
  [7, 1, 0],           // optimizer: inside torch, the user's frame is train.py:42
  [0],                 // set-up
  [5, 3, 8, 1, 0],     // the largest live allocation: model.py:123
];

// torch_async.html with stacks: each allocation gets its phase's stack, half of those outside
// any phase none, and the largest one live at the peak a stack of its own.
function withStacks() {
  const page = readPage('torch_async');
  const p = page.data.processes[0], d = p.devices[0];
  const { live, bytes, phase } = liveAtPeak(d);
  const byPhase = Object.fromEntries(p.phase_names.map((n, k) => [k, { forward: 0, backward: 1, optimizer: 2 }[n]]));
  const stack = [];
  for (let i = 0; i < d.allocations.n; i++) {
    const s = byPhase[phase[i]];
    stack.push(s !== undefined ? s : i % 2 ? 3 : -1);
  }
  stack[live[0]] = 4;
  p.stacks = { frames: frames(FRAMES), stacks: STACKS };
  d.allocations.stack = stack;
  writePage(page, 'torch_async_stacks.html');
  return { d, live, bytes, stack };
}

async function open(file, viewport) {
  const page = await browser.context.newPage();
  if (viewport) await page.setViewportSize(viewport);
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('requestfailed', (r) => problems.push('request failed: ' + r.url()));
  await page.goto(pathToFileURL(join(work, file)).href);
  await page.waitForFunction(() => window.cumemtraceViewer && window.cumemtraceViewer.ready);
  return { page, problems };
}

test('stacks: the largest live allocation is listed with its file:line, its whole stack on load', async () => {
  const { live, bytes } = withStacks();
  const { page, problems } = await open('torch_async_stacks.html');
  const first = page.locator('#live-largest tbody tr').first();
  assert.equal(Number(await first.getAttribute('data-bytes')), bytes[live[0]]);
  assert.equal(Number(await first.getAttribute('data-alloc')), live[0]);
  // The innermost frame of the program's own code, not torch's or the native one under it.
  assert.equal(await first.getAttribute('data-frame'), '/home/user/model.py:123 in big_layer');
  assert.ok(await first.locator('td', { hasText: 'user/model.py:123 in big_layer' }).isVisible());
  // With no click, the whole stack of that allocation, innermost first.
  const shown = await page.$$eval('#stack-detail li', (lis) => lis.map((li) => li.textContent));
  assert.deepEqual(shown, STACKS[4].map((k) => {
    const [fn, file, line, kind] = FRAMES[k];
    return `${kind} ` + (line ? `${file}:${line} in ${fn}` : `${fn} in ${file}`);
  }));
  assert.equal(await page.locator('#stack-detail li.allocating').textContent(), 'python /home/user/model.py:123 in big_layer');
  // A click on another row shows its stack; an allocation outside any phase may have none.
  const rows = await page.$$eval('#live-largest tbody tr', (trs) => trs.map((tr) => [Number(tr.dataset.alloc), tr.dataset.frame || null]));
  const optimizer = rows.find(([, f]) => f === '/home/user/train.py:42 in train_step');
  assert.ok(optimizer, 'an optimizer allocation names the script\'s line, not torch\'s: ' + JSON.stringify(rows));
  await page.click(`#live-largest tr[data-alloc="${optimizer[0]}"]`);
  await page.waitForFunction((i) => document.getElementById('stack-detail').dataset.alloc === String(i), optimizer[0]);
  assert.match(await page.locator('#stack-detail').textContent(), /adam\.py:213 in step/);
  // The filter matches the allocating frame.
  await page.fill('#live-filter', 'big_layer');
  assert.deepEqual(await page.$$eval('#live-largest tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.alloc))), [live[0]]);
  await page.fill('#live-filter', '');
  assert.deepEqual(problems, []);
  await page.close();
});

test('stacks: the flame graph\'s root is the bytes live at the peak, each frame its allocations\' bytes', async () => {
  const { d, live, bytes, stack } = withStacks();
  const { page, problems } = await open('torch_async_stacks.html');
  await page.locator('#flame-graph').waitFor({ state: 'visible' });
  const f = await page.evaluate(() => window.cumemtraceViewer.flame());
  const liveBytes = live.reduce((s, i) => s + bytes[i], 0);
  assert.equal(liveBytes, d.peak_bytes, 'the live set at the peak step is the peak');
  assert.equal(f.rootBytes, d.peak_bytes);
  assert.equal(f.liveCount, live.length);
  const root = f.boxes[0];
  assert.equal(root.depth, 0);
  assert.equal(root.bytes, d.peak_bytes);
  assert.equal(root.x, 0);
  assert.ok(Math.abs(root.w - f.width) <= 1, `the root spans the graph (${root.w} of ${f.width} px)`);
  // Under the root: "(no stack)" and the outermost frame (train.py:80), bytes as computed here.
  const top = Object.fromEntries(f.boxes.filter((b) => b.depth === 1).map((b) => [b.label, b.bytes]));
  let none = 0;
  for (const i of live) if (stack[i] < 0) none += bytes[i];
  const want = { '/home/user/train.py:80 in <module>': liveBytes - none };
  if (none) want['(no stack)'] = none;
  assert.deepEqual(top, want);
  // Widths follow bytes: each depth-1 box is its share of the root's width.
  for (const b of f.boxes.filter((x) => x.depth === 1)) {
    assert.ok(Math.abs(b.w - f.width * b.bytes / liveBytes) <= 2, JSON.stringify(b));
  }
  // model.py:17 (forward) holds exactly the live forward allocations' bytes.
  let forward = 0;
  for (const i of live) if (stack[i] === 0) forward += bytes[i];
  const fwd = f.boxes.filter((b) => b.label === '/home/user/model.py:17 in forward');
  assert.equal(fwd.length, forward ? 1 : 0);
  if (forward) assert.equal(fwd[0].bytes, forward);
  // Hover: the frame and its bytes.
  const box = page.locator('#flame-graph .flame-box[data-label="/home/user/train.py:42 in train_step"]');
  await box.hover();
  await page.locator('#tooltip').waitFor({ state: 'visible' });
  const tip = await page.locator('#tooltip').textContent();
  assert.match(tip, /train\.py:42 in train_step/);
  const tb = Number(await box.getAttribute('data-bytes'));
  assert.ok(tip.includes(tb.toLocaleString('en-US') + ' B'), tip);
  // Click: that frame fills the width; a click on it again backs out.
  await box.click();
  await page.waitForFunction(() => window.cumemtraceViewer.flame().focus === '/home/user/train.py:42 in train_step');
  const zoomed = await page.evaluate(() => window.cumemtraceViewer.flame());
  const focused = zoomed.boxes.find((b) => b.label === '/home/user/train.py:42 in train_step');
  assert.ok(Math.abs(focused.w - zoomed.width) <= 1);
  assert.ok(zoomed.boxes.every((b) => b.depth <= 2 || b.w <= zoomed.width + 1));
  assert.ok(await page.locator('#flame-reset').isVisible());
  await page.screenshot({ path: join(work, 'stacks_flame_zoomed.png'), fullPage: true });
  await page.click('#flame-reset');
  await page.waitForFunction(() => window.cumemtraceViewer.flame().focus === 'all live allocations');
  await page.locator('#flame').screenshot({ path: join(work, 'stacks_flame.png') });
  await page.locator('#selection').screenshot({ path: join(work, 'stacks_largest.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('stacks: no sideways scrolling at 1280x800, with long frames shown', async () => {
  withStacks();
  const { page, problems } = await open('torch_async_stacks.html', { width: 1280, height: 800 });
  const { scroll, width } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth,
  }));
  assert.ok(scroll <= width, `the page is ${scroll} px wide in a ${width} px window`);
  await page.screenshot({ path: join(work, 'stacks_1280.png'), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

// Frames are the traced program's strings: a function or file may be called anything.
const HOSTILE = [
  ['<script>window.pwned=3</script>', '/home/user/<img src=x onerror="window.pwned=4">.py', 7, 'python'],
  ['-->', '/home/user/end<!--.py', 9, 'python'],
  ['line\u2028separator\u2029end', '/home/user/' + 'very_long_directory_name/'.repeat(12) + 'x.py', 11, 'python'],
  ['&lt;b&gt;', '</script><script>window.pwned=5</script>', 0, 'native'],
];

test('stacks: hostile frame names render as text, never as markup (stack column in base64)', async () => {
  const page0 = readPage('cuda_phases');
  const p = page0.data.processes[0], d = p.devices[0];
  const { live } = liveAtPeak(d);
  // With the engine's allocating frame per stack, which the page names rather than its own
  // choice (that would be frame 0 of the first stack: a Python file of the program's own).
  p.stacks = { frames: frames(HOSTILE), stacks: [[0, 1, 2], [3, 2]], user_frame: [1, 3] };
  // The other spelling of a column: base64 int32, as the engine writes its columns.
  const stack = new Int32Array(d.allocations.n).map((_, i) => i % 2);
  d.allocations.stack = b64(stack);
  writePage(page0, 'hostile_stacks.html');
  const { page, problems } = await open('hostile_stacks.html', { width: 1280, height: 800 });
  const labels = await page.$$eval('#flame-graph .flame-box', (bs) => bs.map((b) => b.dataset.label));
  for (const [fn, file, line] of HOSTILE.slice(0, 3)) assert.ok(labels.includes(`${file}:${line} in ${fn}`), fn);
  assert.ok(labels.includes('&lt;b&gt; in </script><script>window.pwned=5</script>'), JSON.stringify(labels));
  const text = await page.locator('#flame-graph').textContent();
  assert.ok(text.includes('<script>window.pwned=3</script>') && text.includes('-->'), text);
  const named = await page.$$eval('#live-largest tbody tr', (trs) => [...new Set(trs.map((tr) => tr.dataset.frame))].sort());
  assert.deepEqual(named, ['/home/user/end<!--.py:9 in -->', '&lt;b&gt; in </script><script>window.pwned=5</script>'].sort());
  const detail = await page.locator('#stack-detail').textContent();
  assert.ok(detail.includes('line\u2028separator\u2029end'), detail);
  assert.equal(live.length > 0, true);
  assert.equal(await page.evaluate(() => window.pwned), undefined, 'no name ran as script');
  assert.equal(await page.locator('img').count(), 0, 'no name became an element');
  assert.equal(await page.locator('script').count(), 2, 'the data and the viewer, nothing else');
  const { scroll, width } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth,
  }));
  assert.ok(scroll <= width, `the page is ${scroll} px wide in a ${width} px window`);
  assert.deepEqual(problems, []);
  await page.close();
});

test('stacks: a page without stacks shows none of it, and no error', async () => {
  const { page, problems } = await open('torch_async.html');
  assert.equal(await page.evaluate(() => window.cumemtraceViewer.flame()), null);
  assert.equal(await page.locator('#flame').isVisible(), false);
  assert.equal(await page.locator('#stack-detail').count(), 0);
  const headers = await page.$$eval('#live-largest th', (ths) => ths.map((th) => th.textContent));
  assert.ok(!headers.some((h) => h.startsWith('allocated by')), JSON.stringify(headers));
  assert.ok(await page.locator('#live-largest tbody tr').count() > 0);
  assert.deepEqual(problems, []);
  await page.close();
});
