// Allocation stacks (run --stacks) in the viewer: the allocating frame in the table of the
// largest live allocations, an allocation's whole stack, and the flame graph of the bytes live
// at the peak. The pages are real exports of golden traces (run_browser_test.sh makes them)
// with stacks added here in the layout WriteViewerHtml gives them (docs/exports.md): per
// process "stacks" (columnar frames, each stack a list of frame indices, innermost first) and
// per device an allocation column "stack" (-1: none). Expected figures are computed here from
// the page's own columns, not by the viewer. Run through CTest: viewer_browser_test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { launchBrowser, openViewer } from './browser.mjs';
import { readPage as readPageOf, writePage as writePageOf, column, b64 } from './page_data.mjs';

const work = process.env.CUMEMTRACE_VIEWER_WORK;
assert.ok(work, 'CUMEMTRACE_VIEWER_WORK is not set: run through run_browser_test.sh');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser.close(); });

const readPage = (name) => readPageOf(work, name);
const writePage = (page, file) => writePageOf(work, page, file);

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

// The stack table `run --stacks=python` would give the golden run's script
// (integration_tests/gpu/torch_train.py, with torch in a virtual environment), innermost first:
// each allocation's Python stack with the caching allocator's native frame inside it.
function frames(list) {
  return {
    function: list.map((f) => f[0]), file: list.map((f) => f[1]), line: list.map((f) => f[2]), kind: list.map((f) => f[3]),
  };
}
const TORCH = '/opt/venv/lib/python3.12/site-packages/torch';
const SCRIPT = '/home/user/torch_train.py';
const FRAMES = [
  ['<module>', SCRIPT, 65, 'python'],                                       // 0
  ['main', SCRIPT, 31, 'python'],                                           // 1 model.to(device)
  ['to', TORCH + '/nn/modules/module.py', 1369, 'python'],                  // 2
  ['_apply', TORCH + '/nn/modules/module.py', 942, 'python'],               // 3
  ['convert', TORCH + '/nn/modules/module.py', 1355, 'python'],             // 4
  ['main', SCRIPT, 39, 'python'],                                           // 5 forward
  ['_wrapped_call_impl', TORCH + '/nn/modules/module.py', 1773, 'python'],  // 6
  ['forward', TORCH + '/nn/modules/container.py', 250, 'python'],           // 7
  ['forward', TORCH + '/nn/modules/linear.py', 125, 'python'],              // 8
  ['main', SCRIPT, 42, 'python'],                                           // 9 backward
  ['backward', TORCH + '/_tensor.py', 648, 'python'],                       // 10
  ['_engine_run_backward', TORCH + '/autograd/graph.py', 824, 'python'],    // 11
  ['main', SCRIPT, 45, 'python'],                                           // 12 optimizer
  ['wrapper', TORCH + '/optim/optimizer.py', 493, 'python'],                // 13
  ['step', TORCH + '/optim/adam.py', 247, 'python'],                        // 14
  ['_init_group', TORCH + '/optim/adam.py', 161, 'python'],                 // 15
  ['0x7f3a1c2d4e10', TORCH + '/lib/libc10_cuda.so', 0, 'native'],           // 16
  ['main', SCRIPT, 33, 'python'],                                           // 17 x = torch.randn
  ['_multi_tensor_adam', TORCH + '/optim/adam.py', 525, 'python'],          // 18
  ['0x7f3a0b1c2d30', '/usr/local/cuda/lib64/libcublasLt.so.13', 0, 'native'],  // 19
];
const STACKS = [
  [16, 4, 3, 3, 2, 1, 0],    // weights
  [16, 8, 7, 6, 5, 0],       // forward
  [16, 11, 10, 9, 0],        // backward
  [16, 15, 14, 13, 12, 0],   // optimizer state
  [16, 18, 14, 13, 12, 0],   // optimizer temporaries
  [16, 17, 0],               // the input
  [19, 8, 7, 6, 5, 0],       // the largest live allocation: cuBLAS' workspace, in forward
];
const label = (k) => {
  const [fn, file, line] = FRAMES[k];
  return line ? `${file}:${line} in ${fn}` : `${fn} in ${file}`;
};

// torch_async.html with stacks: each allocation gets its phase's stack, some outside any phase
// none, and the largest one live at the peak a stack of its own.
function withStacks() {
  const page = readPage('torch_async');
  const p = page.data.processes[0], d = p.devices[0];
  const { live, bytes, phase } = liveAtPeak(d);
  const stack = [];
  for (let i = 0; i < d.allocations.n; i++) {
    const name = p.phase_names[phase[i]];
    stack.push(name === 'forward' ? 1 : name === 'backward' ? 2 : name === 'optimizer' ? 3 + (i % 2)
      : i % 7 === 3 ? -1 : i % 5 === 0 ? 5 : 0);
  }
  stack[live[0]] = 6;
  p.stacks = { frames: frames(FRAMES), stacks: STACKS };
  d.allocations.stack = stack;
  writePage(page, 'torch_async_stacks.html');
  return { d, live, bytes, stack };
}

const open = (file, viewport) => openViewer(browser, join(work, file), viewport);

test('stacks: the largest live allocation is listed with its file:line, its whole stack on load', async () => {
  const { live, bytes } = withStacks();
  const { page, problems } = await open('torch_async_stacks.html');
  const first = page.locator('#live-largest tbody tr').first();
  assert.equal(Number(await first.getAttribute('data-bytes')), bytes[live[0]]);
  assert.equal(Number(await first.getAttribute('data-alloc')), live[0]);
  // The script's line, not cuBLAS' or torch's frames inside it.
  assert.equal(await first.getAttribute('data-frame'), label(5));
  assert.ok(await first.locator('td', { hasText: 'user/torch_train.py:39 in main' }).isVisible());
  // With no click, the whole stack of that allocation, innermost first.
  const shown = await page.$$eval('#stack-detail li', (lis) => lis.map((li) => li.textContent));
  assert.deepEqual(shown, STACKS[6].map((k) => `${FRAMES[k][3]} ${label(k)}`));
  assert.equal(await page.locator('#stack-detail li.allocating').textContent(), `python ${label(5)}`);
  // A click on another row shows its stack.
  const rows = await page.$$eval('#live-largest tbody tr', (trs) => trs.map((tr) => [Number(tr.dataset.alloc), tr.dataset.frame || null]));
  const optimizer = rows.find(([, f]) => f === label(12));
  assert.ok(optimizer, 'an optimizer allocation names the script\'s line, not torch\'s: ' + JSON.stringify(rows));
  await page.click(`#live-largest tr[data-alloc="${optimizer[0]}"]`);
  await page.waitForFunction((i) => document.getElementById('stack-detail').dataset.alloc === String(i), optimizer[0]);
  assert.match(await page.locator('#stack-detail').textContent(), /adam\.py:247 in step/);
  // The filter matches the allocating frame.
  await page.fill('#live-filter', 'torch_train.py:45');
  const phases = await page.$$eval('#live-largest tbody tr', (trs) => trs.map((tr) => tr.dataset.phase));
  assert.ok(phases.length > 0 && phases.every((ph) => ph === 'optimizer'), JSON.stringify(phases));
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
  // Under the root: "(no stack)" and the outermost frame, bytes as computed here.
  const top = Object.fromEntries(f.boxes.filter((b) => b.depth === 1).map((b) => [b.label, b.bytes]));
  let none = 0;
  for (const i of live) if (stack[i] < 0) none += bytes[i];
  assert.ok(none > 0, 'some live allocation has no stack');
  assert.deepEqual(top, { [label(0)]: liveBytes - none, '(no stack)': none });
  // Widths follow bytes: each depth-1 box is its share of the root's width.
  for (const b of f.boxes.filter((x) => x.depth === 1)) {
    assert.ok(Math.abs(b.w - f.width * b.bytes / liveBytes) <= 2, JSON.stringify(b));
  }
  // One level down, the script's lines: each the bytes of the live allocations made there.
  const want = {};
  for (const i of live) {
    if (stack[i] < 0) continue;
    const s = STACKS[stack[i]], k = label(s[s.length - 2]);
    want[k] = (want[k] || 0) + bytes[i];
  }
  const lines = Object.fromEntries(f.boxes.filter((b) => b.depth === 2).map((b) => [b.label, b.bytes]));
  for (const [k, b] of Object.entries(want)) {
    if (b / liveBytes * f.width >= 1) assert.equal(lines[k], b, k);
  }
  assert.ok(Object.keys(lines).length >= 4, JSON.stringify(lines));
  // The live set by allocating line: here each stack's line is the script's, one level down.
  const byLine = await page.$$eval('#live-by-line tbody tr', (trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.line, Number(tr.dataset.bytes)])));
  assert.deepEqual(byLine, { ...want, '(no stack)': none });
  // Hover: the frame and its bytes.
  const box = page.locator(`#flame-graph .flame-box[data-label="${label(12)}"]`);
  await box.hover();
  await page.locator('#tooltip').waitFor({ state: 'visible' });
  const tip = await page.locator('#tooltip').textContent();
  assert.ok(tip.includes(label(12)), tip);
  assert.ok(tip.includes(want[label(12)].toLocaleString('en-US') + ' B'), tip);
  // Click: that frame fills the width; the reset button backs out.
  await box.click();
  await page.waitForFunction((l) => window.cumemtraceViewer.flame().focus === l, label(12));
  const zoomed = await page.evaluate(() => window.cumemtraceViewer.flame());
  const focused = zoomed.boxes.find((b) => b.label === label(12));
  assert.ok(Math.abs(focused.w - zoomed.width) <= 1);
  assert.ok(zoomed.boxes.some((b) => b.label === label(14)), 'its callees are drawn');
  assert.ok(!zoomed.boxes.some((b) => b.label === label(5)), 'its siblings are not');
  assert.ok(await page.locator('#flame-reset').isVisible());
  await page.screenshot({ path: join(work, 'stacks_flame_zoomed.png'), fullPage: true });
  await page.click('#flame-reset');
  await page.waitForFunction(() => window.cumemtraceViewer.flame().focus === 'all live allocations');
  await page.mouse.move(0, 0);
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
  // For the README: the live set at the peak, its largest allocations with their lines, the
  // largest one's stack and the flame graph, in one picture.
  await page.fill('#live-filter', '>=32MiB');
  // Page coordinates: typing in the filter may have scrolled the window.
  const [top, bottom] = await page.evaluate(() => [
    document.getElementById('selection').getBoundingClientRect().top + window.scrollY,
    document.getElementById('flame').getBoundingClientRect().bottom + window.scrollY]);
  await page.screenshot({ path: join(work, 'stacks_readme.png'), fullPage: true,
    clip: { x: 0, y: top - 6, width: 1280, height: bottom - top + 12 } });
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
