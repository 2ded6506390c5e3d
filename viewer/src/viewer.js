// cumemtrace viewer: draws the data that WriteViewerHtml, WriteCompareViewerHtml and
// WriteSweepViewerHtml (collector/engine/export_html.cc) embed in #cumemtrace-data
// ("cumemtrace.viewer/1", docs/exports.md). Its "mode" picks the page: one trace ("report",
// also when absent), runs on one time axis ("compare"), or memory against a parameter
// ("sweep"). No network, no libraries: the page must open from disk, anywhere, years from now.
'use strict';
(function () {
  const started = performance.now();
  const data = JSON.parse(document.getElementById('cumemtrace-data').textContent);
  const mode = data.mode || 'report';

  // ---- data -------------------------------------------------------------------------------
  // Big columns are base64 typed arrays. Uint8Array.fromBase64 decodes natively (Chromium 140,
  // Firefox 133, Safari 18.2); older browsers take the atob loop.
  function column(b64, Type) {
    let bytes;
    if (typeof Uint8Array.fromBase64 === 'function') {
      bytes = Uint8Array.fromBase64(b64);
    } else {
      const text = atob(b64);
      bytes = new Uint8Array(text.length);
      for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    }
    return new Type(bytes.buffer, bytes.byteOffset, bytes.byteLength / Type.BYTES_PER_ELEMENT);
  }
  const NO_STEP = 0xffffffff;
  const NO_LIFETIME_CLASS = 0xff;

  // A memory step series with its min/max pyramid, ready to draw.
  function stepSeries(steps) {
    const time = column(steps.time_ns, Float64Array), bytes = column(steps.bytes, Float64Array);
    return { time, bytes, pyramid: buildPyramid(bytes) };
  }

  function decodeProcess(p) {
    if (p.decoded) return p;
    const r = p.ranges;
    p.range = {
      n: r.n, start: column(r.start_ns, Float64Array), end: column(r.end_ns, Float64Array),
      phase: column(r.phase, Int32Array), depth: column(r.depth, Uint8Array),
    };
    p.bands = outermostRanges(p.range);
    p.stackTable = decodeStacks(p.stacks);
    p.attributionTable = decodeAttributions(p.attributions, p.strings || []);
    const windows = (p.iterations && p.iterations.windows_ns) || [];
    p.iterationStarts = Float64Array.from(windows, (w) => w[0]);
    for (const d of p.devices) {
      d.series = stepSeries(d.steps);
      d.time = d.series.time;
      d.busy = column(d.kernel_busy.fraction, Float32Array);
      d.cat = decodeCategories(d.categories);
      d.alloc = null;  // decoded at the first click (allocations): not needed to draw
      d.process = p;
    }
    p.decoded = true;
    return p;
  }

  function allocationsOf(d) {
    if (d.alloc) return d.alloc;
    const a = d.allocations;
    d.alloc = {
      n: a.n, birth: column(a.birth_step, Uint32Array), death: column(a.death_step, Uint32Array),
      bytes: column(a.bytes, Float64Array), phase: column(a.phase, Int32Array),
      api: column(a.api, Uint32Array), library: column(a.library, Uint32Array),
      kind: column(a.kind, Uint8Array),
      // Classes only where the report gives them (training phases; lifetime_at_peak null
      // otherwise), so that the live set and the lifetime table say the same thing.
      lifetime: a.lifetime_class && d.lifetime_at_peak ? column(a.lifetime_class, Uint8Array) : null,
      // Index into the process' stacks (-1: none); a JSON array, or base64 int32 as the
      // other columns are.
      stack: a.stack === undefined || a.stack === null ? null
        : Array.isArray(a.stack) ? Int32Array.from(a.stack, (v) => (Number.isInteger(v) ? v : -1))
          : column(a.stack, Int32Array),
      // With `run --modules` / `--ops`: index into the process' attributions (0: none).
      attr: attributionColumn(a.attribution, a.n, d.process.attributionTable),
    };
    return d.alloc;
  }
  // An allocation column of indices into the process' attributions, base64 uint32 or a JSON
  // array; null without the table or when not n long, an index out of the table none.
  function attributionColumn(v, n, table) {
    if (v === undefined || v === null || !table) return null;
    const c = Array.isArray(v) ? Uint32Array.from(v, (x) => (Number.isInteger(x) && x >= 0 ? x : 0))
      : column(v, Uint32Array);
    if (c.length !== n) return null;
    for (let i = 0; i < n; i++) if (c[i] >= table.n) c[i] = 0;
    return c;
  }
  // "attributions": the process' distinct attributions as columns of indices into its strings
  // (module, operator, inner_operator, forward_operator; 0: none) and `backward` (0 or 1); [0]
  // is none. Few: JSON arrays. A malformed entry names nothing rather than being trusted.
  function decodeAttributions(t, strings) {
    if (!t || typeof t !== 'object' || !Array.isArray(t.module)) return null;
    const n = t.module.length;
    const ids = (v) => Uint32Array.from({ length: n }, (_, i) => {
      const x = Array.isArray(v) ? v[i] : 0;
      return Number.isInteger(x) && x > 0 && x < strings.length ? x : 0;
    });
    return { n, module: ids(t.module), operator: ids(t.operator), inner: ids(t.inner_operator),
      forward: ids(t.forward_operator),
      backward: Uint8Array.from({ length: n }, (_, i) => (Array.isArray(t.backward) && t.backward[i] ? 1 : 0)) };
  }

  // ---- stacks (run --stacks) ----------------------------------------------------------------
  // "stacks": {"frames": {"function", "file", "line", "kind"} as columns, "stacks": lists of
  // frame indices, innermost first}. Frames are the traced program's strings (any bytes a
  // function or file may be called): they only ever reach the page as text nodes. Absent
  // when the trace has no stacks; a malformed index is dropped rather than trusted.
  function decodeStacks(s) {
    if (!s || typeof s !== 'object' || !s.frames || !Array.isArray(s.stacks)) return null;
    const f = s.frames, fn = f.function || [], file = f.file || [], line = f.line || [], kind = f.kind || [];
    const text = (v) => (v === undefined || v === null ? '' : String(v));
    const frames = [];
    for (let i = 0; i < fn.length; i++) {
      const fr = { fn: text(fn[i]), file: text(file[i]), line: Number.isFinite(Number(line[i])) ? Number(line[i]) : 0,
        kind: kind[i] === 'python' ? 'python' : 'native' };
      fr.label = frameLabel(fr, false);
      fr.short = frameLabel(fr, true);
      fr.system = isSystemFrame(fr);
      // Frames equal in all but their index are one box of the flame graph.
      fr.key = `${fr.kind}\u0000${fr.fn}\u0000${fr.file}\u0000${fr.line}`;
      frames.push(fr);
    }
    const stacks = s.stacks.map((st) => (Array.isArray(st)
      ? st.filter((k) => Number.isInteger(k) && k >= 0 && k < frames.length) : []));
    // The engine's choice of each stack's allocating frame (the one the text summary names),
    // when the data carries it.
    const given = Array.isArray(s.user_frame) && s.user_frame.length === stacks.length ? s.user_frame : null;
    const userFrames = new Map();
    if (given) given.forEach((k, i) => { if (Number.isInteger(k) && k >= 0 && k < frames.length) userFrames.set(i, frames[k]); });
    return { frames, stacks, userFrames };
  }
  // "file:line in function"; an unsymbolized native frame is its address in its module.
  // `short`: the file's last two path components, for a table cell.
  function frameLabel(fr, short) {
    let file = fr.file;
    if (short) { const parts = file.split(/[\/\\]/); file = parts.slice(-2).join('/'); }
    const fn = fr.fn || '(unknown function)';
    if (fr.line > 0 && file) return `${file}:${fr.line} in ${fn}`;
    if (file) return `${fn} in ${file}`;
    return fn;
  }
  // Frames of the interpreter, the standard library, installed packages (torch) and the CUDA,
  // C and C++ runtimes: what the program runs on, not where it asked for memory. The same
  // rule as the engine's IsUserPythonFile and IsUserNativeModule (collector/engine/stacks.cc).
  const RUNTIME_LIBRARIES = ['libcuda.', 'libcudart', 'libcupti', 'libcublas', 'libcudnn', 'libnccl', 'libc10',
    'libtorch', 'libc.so', 'libstdc++', 'libgcc', 'libpython', 'libcumemtrace', 'ld-linux'];
  function isSystemFrame(fr) {
    const file = fr.file;
    if (fr.kind === 'python') {
      return !file || file.startsWith('<frozen') || file.includes('/site-packages/') ||
        file.includes('/dist-packages/') || file.includes('/lib/python3');
    }
    const name = file.slice(file.lastIndexOf('/') + 1);
    return !name || RUNTIME_LIBRARIES.some((l) => name.startsWith(l));
  }
  // The frames of allocation i (indices, innermost first), or null.
  function stackOf(p, a, i) {
    const T = p.stackTable;
    if (!T || !a.stack) return null;
    const s = a.stack[i];
    return s >= 0 && s < T.stacks.length && T.stacks[s].length ? T.stacks[s] : null;
  }
  const NO_STACK = { label: '(no stack)', short: '(no stack)' };
  // The line that asked for the memory: the engine's choice when the data has it, else its
  // rule: the innermost Python frame of the program's own files; else the innermost Python
  // frame; else the innermost native frame outside the runtime libraries; else the innermost.
  // null without a stack.
  function userFrame(p, a, i) {
    const frames = stackOf(p, a, i);
    if (!frames) return null;
    const T = p.stackTable, s = a.stack[i];
    if (!T.userFrames.has(s)) {
      const F = frames.map((k) => T.frames[k]);
      const python = (f) => f.kind === 'python';
      T.userFrames.set(s, F.find((f) => python(f) && !f.system) || F.find(python) ||
        F.find((f) => !python(f) && !f.system) || F[0]);
    }
    return T.userFrames.get(s);
  }

  // The outermost NVTX ranges (depth 0), which the phase bands draw, with the running maximum
  // of their ends: ranges are sorted by start, so the first one that can reach into a view is
  // found by binary search on that maximum.
  function outermostRanges(r) {
    const idx = [];
    for (let i = 0; i < r.n; i++) if (r.depth[i] === 0) idx.push(i);
    const start = new Float64Array(idx.length), end = new Float64Array(idx.length);
    const phase = new Int32Array(idx.length), endMax = new Float64Array(idx.length);
    let m = -Infinity;
    idx.forEach((i, k) => {
      start[k] = r.start[i]; end[k] = r.end[i]; phase[k] = r.phase[i];
      m = Math.max(m, end[k]);
      endMax[k] = m;
    });
    return { n: idx.length, start, end, phase, endMax };
  }

  // ---- formatting -------------------------------------------------------------------------
  function fmtBytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let u = 0;
    while (Math.abs(b) >= 1024 && u < units.length - 1) { b /= 1024; u++; }
    if (u === 0) return b + ' B';
    return (Math.abs(b) >= 100 ? b.toFixed(0) : Math.abs(b) >= 10 ? b.toFixed(1) : b.toFixed(2)) +
      ' ' + units[u];
  }
  function fmtSignedBytes(b) { return (b > 0 ? '+' : b < 0 ? '−' : '') + fmtBytes(Math.abs(b)); }
  // Without trailing zeros: "1.5 s", not "1.500 s".
  function trimZeros(text) { return text.includes('.') ? text.replace(/\.?0+$/, '') : text; }
  function fmtTime(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return trimZeros((ns / 1e9).toFixed(3)) + ' s';
    if (a >= 1e6) return trimZeros((ns / 1e6).toFixed(3)) + ' ms';
    if (a >= 1e3) return trimZeros((ns / 1e3).toFixed(1)) + ' µs';
    return ns.toFixed(0) + ' ns';
  }
  // Axis labels: one unit for the whole axis (the largest value's), with as many decimals as
  // the step between ticks needs, trailing zeros dropped.
  function axisFormatter(maxAbs, step, units) {
    let k = 0;
    while (k + 1 < units.length && maxAbs >= units[k + 1][0]) k++;
    const [scale, name] = units[k];
    const decimals = Math.max(0, Math.min(6, Math.ceil(-Math.log10(step / scale) - 1e-9)));
    return (v) => trimZeros((v / scale).toFixed(decimals)) + ' ' + name;
  }
  const TIME_UNITS = [[1, 'ns'], [1e3, 'µs'], [1e6, 'ms'], [1e9, 's']];
  const BYTE_UNITS = [[1, 'B'], [1024, 'KiB'], [1024 ** 2, 'MiB'], [1024 ** 3, 'GiB'], [1024 ** 4, 'TiB']];
  function fmtInt(n) { return Number(n).toLocaleString('en-US'); }
  // Lifetime classes as shown: "activation" by its definition, so that the only figure called
  // activation is activation memory (peak − persistent).
  const CLASS_LABELS = { activation: 'born in forward, freed in backward' };
  // 8 and 9: PyTorch's tensors and segments, through the allocator bridge (engine.h).
  const KINDS = ['UNKNOWN', 'PAGEABLE', 'PINNED', 'DEVICE', 'ARRAY', 'MANAGED', 'DEVICE_STATIC',
    'MANAGED_STATIC', 'TORCH_ALLOCATED', 'TORCH_RESERVED'];
  const TORCH_ALLOCATED = 8;
  function kindName(k) { return KINDS[k] || `kind ${k}`; }
  // PyTorch's caching allocator kept and no bridge to it: the trace sees segments, not tensors.
  function segmentsOnly(p) {
    return p.allocator_mode === 'native' && !p.devices.some((d) => allocationsOf(d).kind.includes(TORCH_ALLOCATED));
  }
  // Allocations and ranges index p.phase_names; p.phases is the summary's per-phase table.
  function phaseName(p, i) { return i >= 0 && i < p.phase_names.length ? p.phase_names[i] : '(no phase)'; }
  function phaseColor(i, alpha) {
    if (i < 0) return `hsla(0, 0%, 55%, ${alpha})`;
    return `hsla(${(i * 137.508 + 200) % 360}, 65%, 50%, ${alpha})`;
  }
  // Runs of a compare page and labels of a sweep: colors far apart, readable on white.
  const SERIES_COLORS = ['#1d4ed8', '#dc2626', '#059669', '#9333ea', '#d97706', '#0891b2', '#4b5563', '#db2777'];
  function seriesColor(i) { return SERIES_COLORS[i % SERIES_COLORS.length]; }
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  // A sortable cell: shows `text`, sorts by `key` (a number).
  function num(text, key) { return { text, key }; }
  // A table whose headers sort it (click: descending, again: ascending), inside a box that
  // scrolls sideways itself when it is too wide, so that the page never does.
  function table(headers, rows, attrs) {
    const t = el('table', Object.assign({ class: 'sortable' }, attrs || {}));
    t.append(el('thead', {}, el('tr', {}, ...headers.map((h) => el('th', { title: h ? 'sort by ' + h : '' }, h)))));
    const body = el('tbody');
    for (const r of rows) {
      body.append(el('tr', r.attrs || {}, ...r.cells.map((c) => {
        if (c && typeof c === 'object' && !(c instanceof Node) && 'key' in c) {
          return el('td', { 'data-sort': String(c.key) }, c.text);
        }
        return el('td', {}, c);
      })));
    }
    t.append(body);
    t.querySelectorAll('th').forEach((th, col) => th.addEventListener('click', () => sortTable(t, col, th)));
    return el('div', { class: 'table-wrap' }, t);
  }
  function sortTable(t, col, th) {
    const descending = th.dataset.order !== 'desc';
    t.querySelectorAll('th').forEach((h) => delete h.dataset.order);
    th.dataset.order = descending ? 'desc' : 'asc';
    const body = t.tBodies[0];
    const key = (tr) => {
      const td = tr.cells[col];
      if (!td) return '';
      if (td.dataset.sort !== undefined) return Number(td.dataset.sort);
      const text = td.textContent.trim(), n = Number(text.replace(/,/g, ''));
      return text !== '' && Number.isFinite(n) ? n : text.toLowerCase();
    };
    const rows = [...body.rows].map((tr, i) => ({ tr, k: key(tr), i }));
    rows.sort((a, b) => {
      let c = 0;
      if (typeof a.k === 'number' && typeof b.k === 'number') c = a.k - b.k;
      else c = String(a.k).localeCompare(String(b.k));
      return (descending ? -c : c) || a.i - b.i;
    });
    for (const r of rows) body.append(r.tr);
  }
  function swatch(color) { return el('span', { class: 'swatch', style: `background:${color}` }); }

  // ---- search -----------------------------------------------------------------------------
  function lowerBound(a, x, lo = 0, hi = a.length) {  // first index in [lo, hi) with a[i] >= x
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  function upperBound(a, x, lo = 0, hi = a.length) {  // first index in [lo, hi) with a[i] > x
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] <= x) lo = m + 1; else hi = m; }
    return lo;
  }

  // ---- min/max pyramid --------------------------------------------------------------------
  // Level k holds the min and max of each block of 2^(BASE_SHIFT + k) consecutive values, so
  // the extremes of any index range take O(log n) lookups: a redraw costs O(pixels · log n)
  // whatever the number of steps, and still shows every peak. Built once, in one pass plus
  // halvings (about a quarter of the values' memory with 16-value base blocks).
  const PYRAMID_BASE = 16;
  function buildPyramid(values) {
    const levels = [];
    let n = Math.floor(values.length / PYRAMID_BASE);
    if (n === 0) return levels;
    let min = new Float64Array(n), max = new Float64Array(n);
    for (let b = 0, i = 0; b < n; b++) {
      let lo = values[i], hi = lo;
      for (const end = i + PYRAMID_BASE; i < end; i++) {
        const v = values[i];
        if (v < lo) lo = v; else if (v > hi) hi = v;
      }
      min[b] = lo; max[b] = hi;
    }
    levels.push({ min, max });
    while (n > 1) {
      const up = Math.ceil(n / 2), upMin = new Float64Array(up), upMax = new Float64Array(up);
      for (let b = 0; b < up; b++) {
        const l = 2 * b, r = Math.min(2 * b + 1, n - 1);  // an odd last block stands alone
        upMin[b] = Math.min(min[l], min[r]);
        upMax[b] = Math.max(max[l], max[r]);
      }
      levels.push({ min: upMin, max: upMax });
      min = upMin; max = upMax; n = up;
    }
    return levels;
  }
  // Min and max of values[i0..i1), merged into out = [lo, hi].
  function rangeMinMax(values, levels, i0, i1, out) {
    let lo = out[0], hi = out[1];
    const a = Math.min(i1, Math.ceil(i0 / PYRAMID_BASE) * PYRAMID_BASE);
    const b = Math.max(a, Math.floor(i1 / PYRAMID_BASE) * PYRAMID_BASE);
    for (let i = i0; i < a; i++) { const v = values[i]; if (v < lo) lo = v; if (v > hi) hi = v; }
    for (let i = b; i < i1; i++) { const v = values[i]; if (v < lo) lo = v; if (v > hi) hi = v; }
    // Blocks [x, y) of level k; an odd end is taken alone, the rest halves into level k + 1.
    let x = a / PYRAMID_BASE, y = b / PYRAMID_BASE;
    for (let k = 0; x < y; k++) {
      const L = levels[k];
      if (x % 2) { if (L.min[x] < lo) lo = L.min[x]; if (L.max[x] > hi) hi = L.max[x]; x++; }
      if (y % 2) { y--; if (L.min[y] < lo) lo = L.min[y]; if (L.max[y] > hi) hi = L.max[y]; }
      x /= 2; y /= 2;
    }
    out[0] = lo; out[1] = hi;
  }

  // Min and max of a step series over each of `w` columns of [t0, t1]. Column c covers
  // [t0 + c·span/w, t0 + (c+1)·span/w) (the last one includes t1): it holds the value carried
  // in at its left edge and every value set inside it, so a peak that lasts a nanosecond
  // still shows.
  function downsample(series, t0, t1, w) {
    const { time, bytes, pyramid } = series;
    const min = new Float64Array(w), max = new Float64Array(w);
    const step = (t1 - t0) / w, out = [0, 0];
    let i = lowerBound(time, t0);
    let carried = i > 0 ? bytes[i - 1] : 0;
    for (let c = 0; c < w; c++) {
      const end = c === w - 1 ? upperBound(time, t1, i) : lowerBound(time, t0 + (c + 1) * step, i);
      out[0] = out[1] = carried;
      if (end > i) {
        rangeMinMax(bytes, pyramid, i, end, out);
        carried = bytes[end - 1];
        i = end;
      }
      min[c] = out[0]; max[c] = out[1];
    }
    return { min, max };
  }

  // ---- view state shared by the time charts -----------------------------------------------
  const state = {
    t0: 0, t1: 1, full: [0, 1], charts: [], draw: () => {},
    process: null, selection: null,  // report mode
    runs: null,                      // compare mode
  };
  const api = {
    ready: false, firstRenderMs: null, lastDrawMs: null, mode,
    view: () => ({ t0: state.t0, t1: state.t1 }),
    setView: (t0, t1) => setView(t0, t1),
    selection: () => state.selection,
    // The downsampling the charts draw with, on any series (tests check it against a scan).
    downsample: (time, bytes, t0, t1, w) => downsample(
      { time: Float64Array.from(time), bytes: Float64Array.from(bytes), pyramid: buildPyramid(Float64Array.from(bytes)) },
      t0, t1, w),
    // What the last frame drew per chart (and per series on a compare page): the highest
    // column maximum, so tests see a peak survive the downsampling.
    drawn: () => state.charts.map((c) => c.drawn),
  };
  window.cumemtraceViewer = api;

  function setView(t0, t1) {
    const [f0, f1] = state.full;
    const span = Math.min(Math.max(t1 - t0, 1000), f1 - f0 || 1);  // at least 1 µs
    t0 = Math.max(f0 - span * 0.02, Math.min(t0, f1 + span * 0.02 - span));
    state.t0 = t0;
    state.t1 = t0 + span;
    scheduleDraw();
  }
  let drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      const t = performance.now();
      state.draw();
      api.lastDrawMs = performance.now() - t;  // the drawing alone, without the frame's wait
    });
  }
  function showRangeLabel() {
    document.getElementById('range').textContent =
      `showing ${fmtTime(state.t0)} – ${fmtTime(state.t1)} (${fmtTime(state.t1 - state.t0)})`;
  }

  // ---- chart primitives -------------------------------------------------------------------
  const PAD = { left: 70, right: 12, top: 18, bottom: 34 };
  const KERNEL_STRIP = 10;

  function geometry(canvas, strip) {
    const dpr = window.devicePixelRatio || 1;
    const cssW = canvas.clientWidth, cssH = canvas.clientHeight;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
    }
    const plotW = Math.max(10, cssW - PAD.left - PAD.right);
    const plotH = Math.max(10, cssH - PAD.top - PAD.bottom - strip);
    return { dpr, cssW, cssH, plotW, plotH, strip };
  }
  function niceStep(span, target) {
    const raw = span / target, pow = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return m * pow;
    return 10 * pow;
  }
  function niceBytesStep(max, target) {
    const raw = max / target;
    let unit = 1;
    while (unit * 1024 <= raw) unit *= 1024;
    return niceStep(raw / unit, 1) * unit;
  }
  function beginChart(canvas, strip) {
    const g = geometry(canvas, strip);
    const ctx = canvas.getContext('2d');
    ctx.setTransform(g.dpr, 0, 0, g.dpr, 0, 0);
    ctx.clearRect(0, 0, g.cssW, g.cssH);
    return { g, ctx };
  }
  function clipToPlot(ctx, g) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(PAD.left, PAD.top, g.plotW, g.plotH);
    ctx.clip();
  }
  // Byte gridlines on the left and time labels below, for a time chart of [t0, t1].
  // `markRows`: rows of iteration marks under the axis, which the time labels go below.
  function drawAxes(ctx, g, yMax, t0, t1, markRows = 1) {
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
    ctx.fillStyle = '#555';
    ctx.strokeStyle = '#ddd';
    ctx.lineWidth = 1;
    ctx.font = '11px system-ui, sans-serif';
    drawByteGrid(ctx, g, yMax);
    const timeStep = niceStep(t1 - t0, Math.max(2, Math.floor(g.plotW / 110)));
    const label = axisFormatter(Math.max(Math.abs(t0), Math.abs(t1)), timeStep, TIME_UNITS);
    for (let k = Math.ceil(t0 / timeStep); k * timeStep <= t1; k++) {
      const t = k * timeStep, text = label(t), tw = ctx.measureText(text).width;
      ctx.fillText(text, Math.max(2, Math.min(x(t) - tw / 2, g.cssW - tw - 2)),
        PAD.top + g.plotH + g.strip + 7 * markRows + 11);
      ctx.fillRect(x(t), PAD.top + g.plotH, 1, 4);
    }
  }
  // Byte gridlines and labels, in one unit.
  function drawByteGrid(ctx, g, yMax, yOf) {
    const y = yOf || ((b) => PAD.top + g.plotH - b / yMax * g.plotH);
    const byteStep = niceBytesStep(yMax, 4);
    const label = axisFormatter(yMax, byteStep, BYTE_UNITS);
    for (let b = 0; b <= yMax; b += byteStep) {
      ctx.beginPath();
      ctx.moveTo(PAD.left, y(b));
      ctx.lineTo(PAD.left + g.plotW, y(b));
      ctx.stroke();
      ctx.fillText(label(b), 4, y(b) + 4);
    }
  }
  // A step series as per-device-pixel columns from min to max, under a filled envelope
  // (`fill` null: the columns only). Returns the highest value drawn.
  function drawSeries(ctx, g, series, t0, t1, yMax, stroke, fill) {
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
    const w = Math.max(1, Math.round(g.plotW * g.dpr));
    const { min, max } = downsample(series, t0, t1, w);
    const colX = (c) => PAD.left + (c + 0.5) / g.dpr;
    if (fill) {
      ctx.beginPath();
      ctx.moveTo(colX(0), y(0));
      for (let c = 0; c < w; c++) ctx.lineTo(colX(c), y(max[c]));
      ctx.lineTo(colX(w - 1), y(0));
      ctx.closePath();
      ctx.fillStyle = fill;
      ctx.fill();
    }
    ctx.beginPath();
    let highest = 0;
    for (let c = 0; c < w; c++) {
      ctx.moveTo(colX(c), y(min[c]));
      ctx.lineTo(colX(c), y(max[c]) - 0.5);
      if (max[c] > highest) highest = max[c];
    }
    ctx.lineWidth = (fill ? 1 : 1.5) / g.dpr;
    ctx.strokeStyle = stroke;
    ctx.stroke();
    return highest;
  }
  // Iteration boundaries (window starts, sorted) as ticks on the time axis, and as labeled
  // lines through the plot where they are far enough apart to read. At most one tick per
  // pixel, so ten thousand iterations cost what the pixels do.
  function drawIterationMarks(ctx, g, starts, t0, t1, color, row) {
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
    const first = lowerBound(starts, t0), last = upperBound(starts, t1);
    if (last <= first) return;
    const axisY = PAD.top + g.plotH + g.strip;
    ctx.fillStyle = color;
    ctx.strokeStyle = color;
    ctx.font = '10px system-ui, sans-serif';
    let lastPx = -Infinity, lastLabelPx = -Infinity;
    for (let k = first; k < last; k++) {
      const px = Math.round(x(starts[k]));
      if (px === lastPx) continue;
      // Lines and labels only where this boundary stands apart from both neighbours.
      const gap = Math.min(px - lastPx, k + 1 < starts.length ? x(starts[k + 1]) - px : Infinity);
      lastPx = px;
      ctx.beginPath();  // a small triangle under the axis, pointing up at the boundary
      ctx.moveTo(px, axisY + 1 + row * 7);
      ctx.lineTo(px - 3, axisY + 7 + row * 7);
      ctx.lineTo(px + 3, axisY + 7 + row * 7);
      ctx.fill();
      if (gap >= 6) {
        ctx.save();
        ctx.globalAlpha = 0.5;
        ctx.setLineDash([2, 3]);
        ctx.lineWidth = 1;
        ctx.beginPath();
        ctx.moveTo(px + 0.5, PAD.top);
        ctx.lineTo(px + 0.5, PAD.top + g.plotH);
        ctx.stroke();
        ctx.restore();
      }
      if (gap >= 44 && px - lastLabelPx >= 44) {
        ctx.fillText(k === 0 ? 'it 1 (warm-up)' : `it ${k + 1}`, px + 3, PAD.top + g.plotH - 4 - row * 12);
        lastLabelPx = px;
      }
    }
  }
  // Wheel: zoom at the pointer. Drag: select a time range and zoom to it. Shift+drag: pan.
  // Hover: `tooltip(t, event)` says what is there. Click: `onClick`.
  function attachTimeInteraction(canvas, strip, onClick, tooltip) {
    const plotW = () => geometry(canvas, strip).plotW;
    const timeAt = (clientX) => {
      const rect = canvas.getBoundingClientRect();
      return state.t0 + (clientX - rect.left - PAD.left) / plotW() * (state.t1 - state.t0);
    };
    canvas.addEventListener('wheel', (e) => {
      e.preventDefault();
      const t = timeAt(e.clientX);
      const factor = Math.pow(1.0015, e.deltaY);
      setView(t - (t - state.t0) * factor, t + (state.t1 - t) * factor);
    }, { passive: false });
    let drag = null;
    const box = el('div', { class: 'drag-box', hidden: '' });
    canvas.addEventListener('mousedown', (e) => {
      if (e.button !== 0) return;
      e.preventDefault();
      if (!box.parentNode && canvas.parentNode) canvas.parentNode.append(box);
      drag = { x: e.clientX, t0: state.t0, t1: state.t1, moved: false, pan: e.shiftKey, start: timeAt(e.clientX) };
      hideTooltip();
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      if (drag.pan) {
        const dt = dx / plotW() * (drag.t1 - drag.t0);
        setView(drag.t0 - dt, drag.t1 - dt);
        return;
      }
      // The selection: a band over the plot from the press to the pointer.
      const rect = canvas.getBoundingClientRect(), host = box.parentNode.getBoundingClientRect();
      const lo = Math.max(rect.left + PAD.left, Math.min(drag.x, e.clientX));
      const hi = Math.min(rect.left + PAD.left + plotW(), Math.max(drag.x, e.clientX));
      Object.assign(box.style, { left: (lo - host.left) + 'px', width: Math.max(0, hi - lo) + 'px',
        top: (rect.top - host.top + PAD.top) + 'px', height: (rect.height - PAD.top - PAD.bottom) + 'px' });
      box.hidden = false;
    });
    window.addEventListener('mouseup', (e) => {
      if (drag && drag.moved && !drag.pan) {
        const t = timeAt(e.clientX);
        box.hidden = true;
        if (Math.abs(t - drag.start) > 0) setView(Math.min(t, drag.start), Math.max(t, drag.start));
      } else if (drag && !drag.moved && e.target === canvas && onClick) {
        onClick(e);
      }
      drag = null;
    });
    if (tooltip) {
      canvas.addEventListener('mousemove', (e) => {
        if (drag) return;
        const rect = canvas.getBoundingClientRect(), px = e.clientX - rect.left;
        if (px < PAD.left || px > PAD.left + plotW()) { hideTooltip(); return; }
        showTooltip(e, tooltip(timeAt(e.clientX), e));
      });
      canvas.addEventListener('mouseleave', hideTooltip);
    }
  }
  let tooltipEl = null;
  function showTooltip(e, lines) {
    if (!lines || !lines.length) { hideTooltip(); return; }
    if (!tooltipEl) {
      tooltipEl = el('div', { id: 'tooltip', role: 'tooltip' });
      document.body.append(tooltipEl);
    }
    tooltipEl.replaceChildren(...lines.map((l) => el('div', {}, l)));
    tooltipEl.hidden = false;
    const w = tooltipEl.offsetWidth, h = tooltipEl.offsetHeight;
    const x = e.clientX + 14 + w > window.innerWidth ? e.clientX - 14 - w : e.clientX + 14;
    const y = e.clientY + 14 + h > window.innerHeight ? e.clientY - 14 - h : e.clientY + 14;
    tooltipEl.style.left = Math.max(0, x) + 'px';
    tooltipEl.style.top = Math.max(0, y) + 'px';
  }
  function hideTooltip() { if (tooltipEl) tooltipEl.hidden = true; }

  // Keyboard, as in Perfetto: W/S or +/− zoom at the view's middle, A/D or the arrows pan,
  // 0 shows the whole run; `extra` handles more keys (returns true when it took one).
  function attachKeyboard(extra) {
    window.addEventListener('keydown', (e) => {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const tag = (e.target && e.target.tagName) || '';
      if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') return;
      const span = state.t1 - state.t0, mid = (state.t0 + state.t1) / 2;
      const k = e.key;
      if (k === 'w' || k === 'W' || k === '+' || k === '=' || k === 'ArrowUp') {
        setView(mid - span * 0.35, mid + span * 0.35);
      } else if (k === 's' || k === 'S' || k === '-' || k === '−' || k === '_' || k === 'ArrowDown') {
        setView(mid - span * 0.7, mid + span * 0.7);
      } else if (k === 'a' || k === 'A' || k === 'ArrowLeft') {
        setView(state.t0 - span * 0.2, state.t1 - span * 0.2);
      } else if (k === 'd' || k === 'D' || k === 'ArrowRight') {
        setView(state.t0 + span * 0.2, state.t1 + span * 0.2);
      } else if (k === '0') {
        setView(...state.full);
      } else if (!(extra && extra(k))) {
        return;
      }
      e.preventDefault();
    });
  }

  // ==== report: one trace ===================================================================
  function reportApi() {
    // Where the peak marker of device slot `slot` is, in client coordinates (for tests).
    api.peakPoint = (slot) => {
      const chart = state.charts[slot], d = chart.device;
      if (d.peak_step === null) return null;
      const g = geometry(chart.canvas, KERNEL_STRIP), rect = chart.canvas.getBoundingClientRect();
      const yMax = chartYMax(d);
      return {
        x: rect.left + PAD.left + (d.time[d.peak_step] - state.t0) / (state.t1 - state.t0) * g.plotW,
        y: rect.top + PAD.top + g.plotH - d.peak_bytes / yMax * g.plotH,
      };
    };
    api.iterationStarts = () => Array.from(state.process.iterationStarts);
    api.full = () => state.full.slice();
    // Bytes live at `step` of device slot `slot` by the phase they were allocated in
    // (name → bytes), from the layers the chart draws.
    api.layersAt = (slot, step) => {
      const p = state.process, d = p.devices[slot], v = slotsAt(phaseLayers(p, d), allocationsOf(d), step);
      const out = {};
      v.forEach((b, k) => { if (b) out[k === 0 ? '(no phase)' : p.phase_names[k - 1]] = b; });
      return out;
    };
    api.hiddenPhases = () => [...state.hiddenPhases];
    // The category layers of device slot `slot` at its device or tensor peak ('device' or
    // 'tensor'), from the series the chart stacks: { layers: name → bytes, inUse, total, step }.
    api.categoriesAtPeak = (slot, which) => {
      const cat = state.process.devices[slot].cat;
      if (!cat) return null;
      const k = which === 'tensor' ? cat.tensorPeak : cat.devicePeak;
      return k === null ? null : categoryRow(cat, k);
    };
    // What the hover says at time t of chart `slot`: the point drawn in that column.
    api.stackAt = (slot, t) => {
      const chart = state.charts[slot];
      return chart.device.cat ? categoryRow(chart.device.cat, categoryPointAt(chart, t)) : null;
    };
    api.stackBy = () => state.stackBy;
  }

  function fullRange(p) {
    let end = p.duration_ns;
    for (const d of p.devices) if (d.time.length) end = Math.max(end, d.time[d.time.length - 1]);
    return [0, Math.max(end, 1)];
  }
  // The training iterations (and the peaks, wherever they are), with a little room: what the
  // page shows first. Start-up and tail stay one click away ("whole run").
  function iterationRange(p) {
    const w = (p.iterations && p.iterations.windows_ns) || [];
    if (!w.length) return null;
    let a = w[0][0], b = w[w.length - 1][1];
    for (const d of p.devices) {
      if (d.peak_step !== null) { a = Math.min(a, d.time[d.peak_step]); b = Math.max(b, d.time[d.peak_step]); }
    }
    const pad = (b - a) * 0.03;
    return [Math.max(state.full[0], a - pad), Math.min(state.full[1], b + pad)];
  }
  // The iteration holding time t (index), or -1.
  function iterationAt(p, t) {
    const w = (p.iterations && p.iterations.windows_ns) || [];
    const k = upperBound(p.iterationStarts, t) - 1;
    return k >= 0 && t <= w[k][1] ? k : -1;
  }
  function zoomToPeak() {
    const p = state.process;
    const d = p.devices.reduce((best, x) => (x.peak_step !== null && (!best || x.peak_bytes > best.peak_bytes) ? x : best), null);
    if (!d) return;
    const t = d.time[d.peak_step], k = iterationAt(p, t);
    if (k >= 0) {
      const [a, b] = p.iterations.windows_ns[k], pad = (b - a) * 0.05;
      setView(a - pad, b + pad);
    } else {
      const span = (state.full[1] - state.full[0]) * 0.05;
      setView(t - span / 2, t + span / 2);
    }
  }
  function zoomToIteration(k) {
    const w = state.process.iterations.windows_ns[k];
    if (!w) return;
    const pad = (w[1] - w[0]) * 0.05;
    setView(w[0] - pad, w[1] + pad);
  }

  // Phase names as shown: inferred phases (synthesized from the program's threads, not NVTX
  // ranges it marked) say so everywhere.
  function phaseLabel(p, i) {
    const name = phaseName(p, i);
    return p.inferredPhases && p.inferredPhases.has(name) ? name + ' (inferred)' : name;
  }
  // The phase running at time t: the outermost range that holds it, or null.
  function phaseRunningAt(p, t) {
    const b = p.bands;
    let found = null;
    for (let k = lowerBound(b.endMax, t); k < b.n && b.start[k] <= t; k++) {
      if (b.end[k] >= t) found = b.phase[k];
    }
    return found;
  }

  // ---- memory by the phase it was allocated in ---------------------------------------------
  // Each allocation adds its bytes to its phase at its birth step and takes them away at its
  // death step. Events are grouped by step (a counting sort), and every LAYER_CHECKPOINT
  // steps the running bytes per phase are kept (phases x steps / 64 numbers), so the bytes
  // per phase at any step cost at most LAYER_CHECKPOINT steps of events. Slot 0 is "(no phase)", slot k + 1 phase k.
  const LAYER_CHECKPOINT = 64;
  function phaseLayers(p, d) {
    if (d.layers) return d.layers;
    const a = allocationsOf(d), n = d.time.length, slots = p.phase_names.length + 1;
    const start = new Uint32Array(n + 1);
    for (let i = 0; i < a.n; i++) {
      if (a.birth[i] < n) start[a.birth[i] + 1]++;
      if (a.death[i] !== NO_STEP && a.death[i] < n) start[a.death[i] + 1]++;
    }
    for (let s = 0; s < n; s++) start[s + 1] += start[s];
    const events = new Int32Array(start[n]), fill = start.slice(0, n);
    for (let i = 0; i < a.n; i++) {  // i: a birth; ~i: a death
      if (a.birth[i] < n) events[fill[a.birth[i]]++] = i;
      if (a.death[i] !== NO_STEP && a.death[i] < n) events[fill[a.death[i]]++] = ~i;
    }
    const slotOf = (i) => (a.phase[i] >= 0 && a.phase[i] < slots - 1 ? a.phase[i] + 1 : 0);
    const checkpoints = new Float64Array((Math.floor(n / LAYER_CHECKPOINT) + 1) * slots);
    const v = new Float64Array(slots);
    for (let s = 0; s < n; s++) {
      if (s % LAYER_CHECKPOINT === 0) checkpoints.set(v, (s / LAYER_CHECKPOINT) * slots);
      for (let e = start[s]; e < start[s + 1]; e++) {
        const ev = events[e];
        if (ev >= 0) v[slotOf(ev)] += a.bytes[ev]; else v[slotOf(~ev)] -= a.bytes[~ev];
      }
    }
    d.layers = { start, events, checkpoints, slots, slotOf };
    return d.layers;
  }
  // Running bytes per slot after the events of `step` (into `out`, or a new array).
  function slotsAt(L, a, step, out) {
    const v = out || new Float64Array(L.slots);
    if (step < 0) { v.fill(0); return v; }
    const c = Math.floor(step / LAYER_CHECKPOINT);
    v.set(L.checkpoints.subarray(c * L.slots, (c + 1) * L.slots));
    for (let s = c * LAYER_CHECKPOINT; s <= step; s++) applyStep(L, a, s, v);
    return v;
  }
  function applyStep(L, a, s, v) {
    for (let e = L.start[s]; e < L.start[s + 1]; e++) {
      const ev = L.events[e];
      if (ev >= 0) v[L.slotOf(ev)] += a.bytes[ev]; else v[L.slotOf(~ev)] -= a.bytes[~ev];
    }
  }
  // Per pixel column, the bytes per slot at the column's highest step (so the stack reaches
  // the drawn maximum and a peak shows what it was made of). The highest step comes from the
  // pyramid's 16-step blocks, and the bytes per slot there from the nearest checkpoint: a
  // frame costs about steps/16 + 64 per column, not every step in view.
  function layerColumns(p, d, t0, t1, w) {
    const L = phaseLayers(p, d), a = allocationsOf(d), time = d.time, bytes = d.series.bytes;
    const base = d.series.pyramid.length ? d.series.pyramid[0] : null;
    const cols = new Float64Array(w * L.slots), v = new Float64Array(L.slots);
    const colStep = (t1 - t0) / w;
    let i = lowerBound(time, t0), carried = -2;
    for (let c = 0; c < w; c++) {
      const end = c === w - 1 ? upperBound(time, t1, i) : lowerBound(time, t0 + (c + 1) * colStep, i);
      if (end > i) {
        slotsAt(L, a, argMaxIn(bytes, base, i, end), v);
        carried = -2;
        i = end;
      } else if (carried !== i - 1) {  // nothing set inside: what was carried in from the left
        slotsAt(L, a, i - 1, v);
        carried = i - 1;
      }
      cols.set(v, c * L.slots);
    }
    return { cols, slots: L.slots };
  }
  // The index of the highest value of values[i0..i1) (the first of equals).
  function argMaxIn(values, base, i0, i1) {
    let best = i0, top = -Infinity;
    const scan = (lo, hi) => { for (let k = lo; k < hi; k++) if (values[k] > top) { top = values[k]; best = k; } };
    if (!base) { scan(i0, i1); return best; }
    const a = Math.min(i1, Math.ceil(i0 / PYRAMID_BASE) * PYRAMID_BASE);
    const b = Math.max(a, Math.floor(i1 / PYRAMID_BASE) * PYRAMID_BASE);
    scan(i0, a);
    let block = -1, blockTop = top;
    for (let k = a / PYRAMID_BASE; k < b / PYRAMID_BASE; k++) if (base.max[k] > blockTop) { blockTop = base.max[k]; block = k; }
    if (block >= 0) scan(block * PYRAMID_BASE, (block + 1) * PYRAMID_BASE);
    scan(b, i1);
    return best;
  }

  // ---- memory by category ------------------------------------------------------------------
  // What the memory is (docs/phases.md "Categories"): the layers the collector computed at the
  // device timeline's steps (docs/exports.md "categories"), with the report's own rules, so that
  // at the peaks they are the report's figures. One order and one colour per layer everywhere
  // (chart, legend, bar, table): the tensors by category, then the device memory PyTorch never
  // sees, then PyTorch's cache beyond its tensors, which lies above the memory in use.
  const CATEGORY_LAYERS = ['parameter', 'buffer', 'optimizer_state', 'gradient', 'input', 'activation',
    'temporary', 'workspace', 'autograd_other', 'not_torch', 'torch_cache'];
  const CATEGORY_RGB = {
    parameter: [29, 78, 216], buffer: [8, 145, 178], optimizer_state: [124, 58, 237], gradient: [217, 119, 6],
    input: [5, 150, 105], activation: [220, 38, 38], temporary: [244, 114, 182], workspace: [101, 163, 13],
    autograd_other: [161, 98, 7], not_torch: [75, 85, 99], torch_cache: [148, 163, 184],
  };
  // Named as `cumemtrace report` names them: the categories by their summary.json names.
  const CATEGORY_LABELS = { not_torch: 'not PyTorch\'s', torch_cache: 'PyTorch\'s cache' };
  const CATEGORY_NOTES = {
    not_torch: 'device memory PyTorch never sees: cuBLAS workspaces, NCCL, the program\'s own cudaMalloc',
    torch_cache: 'PyTorch\'s segments beyond its tensors (reserved − allocated): above the memory in use',
  };
  function categoryLabel(name) { return CATEGORY_LABELS[name] || name; }
  function categoryColor(name, alpha) {
    const [r, g, b] = CATEGORY_RGB[name] || [107, 114, 128];
    return `rgba(${r}, ${g}, ${b}, ${alpha})`;
  }
  function decodeCategories(c) {
    if (!c) return null;
    const cat = {
      layers: c.layers, width: c.layers.length, n: c.n, step: column(c.step, Uint32Array),
      time: column(c.time_ns, Float64Array), bytes: column(c.bytes, Float64Array),
      devicePeak: c.device_peak_point, tensorPeak: c.tensor_peak_point, figures: c.figures,
      sampled: c.sampled, maxPoints: c.max_points,
    };
    // Per point: the memory in use (every layer but the cache) and the whole stack.
    const cache = c.layers.indexOf('torch_cache');
    cat.inUse = new Float64Array(cat.n);
    cat.total = new Float64Array(cat.n);
    cat.top = 0;
    for (let k = 0; k < cat.n; k++) {
      for (let l = 0; l < cat.width; l++) {
        const b = cat.bytes[k * cat.width + l];
        cat.total[k] += b;
        if (l !== cache) cat.inUse[k] += b;
      }
      cat.top = Math.max(cat.top, cat.total[k]);
    }
    return cat;
  }
  // The point a chart column of times [a, b) shows: of the points inside, the one with the most
  // memory in use (the first of equals, so the peak's column shows the peak); else the last one
  // before (what was carried in); -1 before the first. `from`: a point index at or before a.
  function categoryPointIn(cat, a, b, last, from = 0) {
    let i = lowerBound(cat.time, a, from);
    const end = last ? upperBound(cat.time, b, i) : lowerBound(cat.time, b, i);
    if (end <= i) return { point: i - 1, next: i };
    let best = i;
    for (let k = i + 1; k < end; k++) if (cat.inUse[k] > cat.inUse[best]) best = k;
    return { point: best, next: end };
  }
  function categoryColumns(cat, t0, t1, w) {
    const points = new Int32Array(w), span = (t1 - t0) / w;
    let from = 0;
    for (let c = 0; c < w; c++) {
      const r = categoryPointIn(cat, t0 + c * span, t0 + (c + 1) * span, c === w - 1, from);
      points[c] = r.point;
      from = r.next;
    }
    return points;
  }
  // The layers at point k (name → bytes), with the memory in use and the whole stack.
  function categoryRow(cat, k) {
    const layers = {};
    cat.layers.forEach((name, l) => { layers[name] = k >= 0 ? cat.bytes[k * cat.width + l] : 0; });
    return { layers, inUse: k >= 0 ? cat.inUse[k] : 0, total: k >= 0 ? cat.total[k] : 0,
      time: k >= 0 ? cat.time[k] : null, step: k >= 0 ? cat.step[k] : null };
  }
  // The point drawn at time t on chart `chart` (its column), as the hover reads it.
  function categoryPointAt(chart, t) {
    const cat = chart.device.cat, g = geometry(chart.canvas, KERNEL_STRIP);
    const w = Math.max(1, Math.round(g.plotW * g.dpr)), span = (state.t1 - state.t0) / w;
    const c = Math.min(w - 1, Math.max(0, Math.floor((t - state.t0) / span)));
    return categoryPointIn(cat, state.t0 + c * span, state.t0 + (c + 1) * span, c === w - 1).point;
  }
  // The memory as stacked areas, one per category layer, bottom to top in the layers' order.
  function drawCategoryLayers(ctx, g, d, t0, t1, yMax) {
    const cat = d.cat, w = Math.max(1, Math.round(g.plotW * g.dpr));
    const points = categoryColumns(cat, t0, t1, w);
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
    const colX = (c) => PAD.left + (c + 0.5) / g.dpr;
    const base = new Float64Array(w);
    for (let l = 0; l < cat.width; l++) {
      const value = (c) => (points[c] >= 0 ? cat.bytes[points[c] * cat.width + l] : 0);
      let any = false;
      for (let c = 0; c < w && !any; c++) any = value(c) > 0;
      if (!any) continue;
      ctx.beginPath();
      ctx.moveTo(colX(0), y(base[0]));
      for (let c = 0; c < w; c++) ctx.lineTo(colX(c), y(base[c] + value(c)));
      for (let c = w - 1; c >= 0; c--) ctx.lineTo(colX(c), y(base[c]));
      ctx.closePath();
      ctx.fillStyle = categoryColor(cat.layers[l], cat.layers[l] === 'torch_cache' ? 0.45 : 0.7);
      ctx.fill();
      for (let c = 0; c < w; c++) base[c] += value(c);
    }
    let top = 0, inUseTop = 0, peakColumn = null;
    for (let c = 0; c < w; c++) {
      top = Math.max(top, base[c]);
      if (points[c] >= 0) inUseTop = Math.max(inUseTop, cat.inUse[points[c]]);
      if (cat.devicePeak !== null && points[c] === cat.devicePeak && !peakColumn) {
        peakColumn = categoryRow(cat, points[c]).layers;
      }
    }
    // What tests read: the highest stack and in-use drawn, and the layers drawn in the column
    // of the device peak (null when it is out of view).
    return { top, inUseTop, peakColumn };
  }
  function stackingByCategory(d) { return state.stackBy === 'category' && d.cat && d.cat.n > 0; }
  // The chart's byte scale: the peak, or the highest stack when the cache lies above it.
  function chartYMax(d) {
    return Math.max(d.peak_bytes, stackingByCategory(d) ? d.cat.top : 0, 1) * 1.08;
  }

  function buildCharts() {
    const p = state.process;
    const host = document.getElementById('charts');
    host.replaceChildren();
    state.charts = [];
    if (!p.devices.length) {
      host.append(el('p', { class: 'muted' }, 'No device memory was traced in this process.'));
      return;
    }
    p.devices.forEach((d, slot) => {
      const title = `GPU ${d.index}` + (d.name ? ` · ${d.name}` : '') +
        (d.total_memory_bytes ? ` (${fmtBytes(d.total_memory_bytes)})` : '');
      const peak = d.peak_time_ns === null ? 'no device memory allocated'
        : `peak ${fmtBytes(d.peak_bytes)} (${fmtInt(d.peak_bytes)} B) at ${fmtTime(d.peak_time_ns)}, ` +
          `${fmtInt(d.peak_live_allocations)} live allocations`;
      const iterations = p.iterationStarts.length
        ? ` · ${p.iterationStarts.length} iterations (▲ on the axis)` : '';
      const canvas = el('canvas', { class: 'chart', 'data-device': String(d.index) });
      const box = el('div', { class: 'chart-box' },
        el('h2', {}, title), el('p', { class: 'muted' }, peak,
          d.kernel_count ? ` · ${fmtInt(d.kernel_count)} kernels (strip: share of time busy)` : '',
          iterations),
        canvas);
      host.append(box);
      const chart = { canvas, device: d, slot, drawn: null };
      state.charts.push(chart);
      attachTimeInteraction(canvas, KERNEL_STRIP, (e) => select(chart, e), (t) => chartTooltip(chart, t));
    });
  }

  function chartTooltip(chart, t) {
    const p = state.process, d = chart.device;
    const step = upperBound(d.time, t) - 1;
    const byCategory = stackingByCategory(d);
    const lines = [`${fmtTime(t)} · GPU ${d.index}`];
    // By category, the figures are those of the point drawn in this pixel column (its highest
    // memory in use), so that the hover over a peak reads the peak.
    if (!byCategory) lines.push(`in use ${fmtBytes(step >= 0 ? d.series.bytes[step] : 0)}`);
    const running = phaseRunningAt(p, t), k = iterationAt(p, t);
    lines.push('running: ' + (running === null ? '(no phase)' : phaseLabel(p, running)) +
      (k >= 0 ? ` · iteration ${k + 1}${k === 0 ? ' (warm-up)' : ''}` : ''));
    if (byCategory) {
      const row = categoryRow(d.cat, categoryPointAt(chart, t));
      if (row.time !== null) lines.push(`by category, at ${fmtTime(row.time)}:`);
      for (const name of d.cat.layers) {
        if (row.layers[name] > 0) lines.push(`  ${categoryLabel(name)}: ${fmtBytes(row.layers[name])}`);
      }
      lines.push(row.total > row.inUse
        ? `total ${fmtBytes(row.total)}: in use ${fmtBytes(row.inUse)} + PyTorch's cache ${fmtBytes(row.total - row.inUse)}`
        : `total: in use ${fmtBytes(row.inUse)}`);
    } else if (step >= 0 && d.allocations.n) {
      const v = slotsAt(phaseLayers(p, d), allocationsOf(d), step);
      const parts = [...v].map((b, s) => [b, s]).filter(([b]) => b > 0).sort((x, y) => y[0] - x[0]).slice(0, 4);
      if (parts.length) {
        lines.push('allocated in: ' + parts.map(([b, s]) => `${phaseLabel(p, s - 1)} ${fmtBytes(b)}`).join(', '));
      }
    }
    lines.push('click: what was live then');
    return lines;
  }

  // Phase bands: per pixel column, the phase of the outermost range that covers most of it.
  // Neighbouring columns of one phase make one rectangle, so a whole run of ten thousand
  // iterations draws as many rectangles as there are visible phase changes, at most one per
  // pixel. `faint`: the memory itself is coloured by phase, the bands only hint.
  function drawPhaseBands(ctx, g, p, t0, t1, faint) {
    const bands = p.bands, w = Math.ceil(g.plotW), colT = (t1 - t0) / w;
    const best = new Float64Array(w), phase = new Int32Array(w).fill(-2);  // -2: no range
    for (let k = lowerBound(bands.endMax, t0); k < bands.n && bands.start[k] <= t1; k++) {
      const s = Math.max(bands.start[k], t0), e = Math.min(bands.end[k], t1);
      if (e < s) continue;
      const c0 = Math.max(0, Math.floor((s - t0) / colT)), c1 = Math.min(w - 1, Math.floor((e - t0) / colT));
      for (let c = c0; c <= c1; c++) {
        const cover = Math.min(e, t0 + (c + 1) * colT) - Math.max(s, t0 + c * colT) + 1e-9;
        if (cover > best[c]) { best[c] = cover; phase[c] = bands.phase[k]; }
      }
    }
    ctx.font = '11px system-ui, sans-serif';
    let lastLabelRight = -Infinity;
    for (let c = 0; c < w;) {
      let e = c + 1;
      while (e < w && phase[e] === phase[c]) e++;
      if (phase[c] !== -2 && !state.hiddenPhases.has(phase[c])) {
        const x0 = PAD.left + c * g.plotW / w, x1 = PAD.left + e * g.plotW / w;
        ctx.fillStyle = phaseColor(phase[c], faint ? 0.06 : 0.13);
        ctx.fillRect(x0, PAD.top, x1 - x0, g.plotH);
        if (x1 - x0 > 48 && x0 >= lastLabelRight - 0.5) {
          ctx.fillStyle = phaseColor(phase[c], 0.9);
          ctx.fillText(phaseLabel(p, phase[c]), x0 + 3, PAD.top + 12, x1 - x0 - 6);
          lastLabelRight = x1;
        }
      }
      c = e;
    }
  }

  // The memory in use as stacked areas, one per phase the bytes were allocated in.
  function drawLayers(ctx, g, p, d, t0, t1, yMax) {
    const w = Math.max(1, Math.round(g.plotW * g.dpr));
    const { cols, slots } = layerColumns(p, d, t0, t1, w);
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
    const colX = (c) => PAD.left + (c + 0.5) / g.dpr;
    const base = new Float64Array(w);
    // Bottom to top: "(no phase)" (mostly what the program set up before its phases), then
    // the phases in order.
    const order = [];
    for (let s = 0; s < slots; s++) order.push(s);
    for (const s of order) {
      const phase = s - 1;
      if (state.hiddenPhases.has(phase)) continue;
      let any = false;
      for (let c = 0; c < w; c++) if (cols[c * slots + s] > 0) { any = true; break; }
      if (!any) continue;
      ctx.beginPath();
      ctx.moveTo(colX(0), y(base[0]));
      for (let c = 0; c < w; c++) ctx.lineTo(colX(c), y(base[c] + Math.max(0, cols[c * slots + s])));
      for (let c = w - 1; c >= 0; c--) ctx.lineTo(colX(c), y(base[c]));
      ctx.closePath();
      ctx.fillStyle = phaseColor(phase, 0.55);
      ctx.fill();
      for (let c = 0; c < w; c++) base[c] += Math.max(0, cols[c * slots + s]);
    }
    let top = 0;
    for (let c = 0; c < w; c++) if (base[c] > top) top = base[c];
    return top;  // the highest stack drawn
  }

  function drawReportChart(chart) {
    const p = state.process, d = chart.device;
    const { g, ctx } = beginChart(chart.canvas, KERNEL_STRIP);
    const { t0, t1 } = state;
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
    const yMax = chartYMax(d);
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
    const byCategory = stackingByCategory(d);
    const layered = byCategory || (state.stackBy === 'phase' && d.allocations.n > 0);

    clipToPlot(ctx, g);
    drawPhaseBands(ctx, g, p, t0, t1, layered);
    const categories = byCategory ? drawCategoryLayers(ctx, g, d, t0, t1, yMax) : null;
    const layersMax = categories ? categories.top : layered ? drawLayers(ctx, g, p, d, t0, t1, yMax) : null;
    // Memory in use: per device pixel column, the lowest and highest value.
    chart.drawn = { max: drawSeries(ctx, g, d.series, t0, t1, yMax, 'rgb(29, 78, 216)',
      layered ? null : 'rgba(37, 99, 235, 0.25)'), layersMax, stackBy: byCategory ? 'category' : layered ? 'phase' : 'none',
      categories };
    ctx.restore();
    drawAxes(ctx, g, yMax, t0, t1);
    drawIterationMarks(ctx, g, p.iterationStarts, t0, t1, '#7c3aed', 0);

    // Kernel activity strip (share of each bin's time with a kernel running).
    const bins = d.busy.length, binW = Math.max(p.duration_ns, 1) / bins;
    if (d.kernel_count) {
      const top = PAD.top + g.plotH + 2;
      for (let b = Math.max(0, Math.floor(t0 / binW)); b < bins && b * binW <= t1; b++) {
        const f = Math.min(1, d.busy[b]);
        if (f <= 0) continue;
        ctx.fillStyle = `rgba(22, 163, 74, ${0.25 + 0.75 * f})`;
        const x0 = Math.max(PAD.left, x(b * binW));
        ctx.fillRect(x0, top, Math.max(1, x((b + 1) * binW) - x0), KERNEL_STRIP - 3);
      }
    }

    // Failed allocations.
    for (const f of p.failed_allocations) {
      if (f.device !== d.index || f.time_ns < t0 || f.time_ns > t1) continue;
      const fx = x(f.time_ns), fy = y(f.device_in_use_bytes);
      ctx.strokeStyle = '#dc2626';
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(fx - 5, fy - 5); ctx.lineTo(fx + 5, fy + 5);
      ctx.moveTo(fx + 5, fy - 5); ctx.lineTo(fx - 5, fy + 5);
      ctx.stroke();
    }

    // The peak.
    if (d.peak_step !== null) {
      const px = x(d.time[d.peak_step]), py = y(d.peak_bytes);
      if (px >= PAD.left - 1 && px <= PAD.left + g.plotW + 1) {
        ctx.fillStyle = '#dc2626';
        ctx.beginPath();
        ctx.arc(px, py, 4, 0, 2 * Math.PI);
        ctx.fill();
        ctx.font = '11px system-ui, sans-serif';
        const label = 'peak ' + fmtBytes(d.peak_bytes);
        const tw = ctx.measureText(label).width;
        ctx.fillText(label, Math.min(px + 6, PAD.left + g.plotW - tw), Math.max(py - 6, PAD.top - 4));
      }
    }

    // The selected instant.
    const s = state.selection;
    if (s && s.slot === chart.slot && s.step >= 0) {
      const sx = x(d.time[s.step]);
      ctx.strokeStyle = '#111';
      ctx.setLineDash([4, 3]);
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(sx, PAD.top);
      ctx.lineTo(sx, PAD.top + g.plotH);
      ctx.stroke();
      ctx.setLineDash([]);
    }
  }

  // ---- live set at an instant -------------------------------------------------------------
  function select(chart, e) {
    const d = chart.device;
    const g = geometry(chart.canvas, KERNEL_STRIP);
    const rect = chart.canvas.getBoundingClientRect();
    const px = e.clientX - rect.left;
    const t = state.t0 + (px - PAD.left) / g.plotW * (state.t1 - state.t0);
    let step;
    // Several steps can share a nanosecond: a click on the peak's marker means the peak.
    const peakX = d.peak_step === null ? Infinity
      : PAD.left + (d.time[d.peak_step] - state.t0) / (state.t1 - state.t0) * g.plotW;
    if (Math.abs(px - peakX) <= 6) step = d.peak_step;
    else step = upperBound(d.time, t) - 1;
    showLive(chart.slot, step, t);
  }

  // Parses the filter box: words match phase, kind, lifetime, API or library; ">1MiB",
  // "<=4 KiB" bound the size.
  const SIZE_UNITS = { b: 1, kib: 1024, kb: 1e3, mib: 1024 ** 2, mb: 1e6, gib: 1024 ** 3, gb: 1e9 };
  function parseFilter(text) {
    const words = [], sizes = [];
    const re = /([<>]=?)\s*([0-9.]+)\s*([kmg]i?b|b)?|(\S+)/gi;
    let m;
    while ((m = re.exec(text))) {
      if (m[1]) {
        const op = m[1], v = Number(m[2]) * (SIZE_UNITS[(m[3] || 'b').toLowerCase()] || 1);
        sizes.push((b) => (op === '>' ? b > v : op === '>=' ? b >= v : op === '<' ? b < v : b <= v));
      } else {
        words.push(m[4].toLowerCase());
      }
    }
    return { words, sizes };
  }

  function showLive(slot, step, t) {
    const p = state.process, d = p.devices[slot], a = allocationsOf(d);
    state.selection = { slot, step, device: d.index };
    scheduleDraw();
    const panel = document.getElementById('selection');
    const isPeak = step === d.peak_step && step !== null;
    panel.replaceChildren(el('h2', {}, isPeak ? `Live at the peak of GPU ${d.index}` : 'Live at an instant'));
    if (step < 0) {
      panel.append(el('p', {}, `GPU ${d.index} at ${fmtTime(t)}: nothing allocated yet.`));
      showFlame(p, d, a, [], 0, `on GPU ${d.index} at ${fmtTime(t)}`);
      return;
    }
    const classNames = p.lifetime_classes || [];
    const groups = { phase: new Map(), api: new Map(), library: new Map(), lifetime: new Map(), line: new Map() };
    const withStacks = Boolean(p.stackTable && a.stack);
    const live = [];
    let total = 0;
    for (let i = 0; i < a.n; i++) {
      if (a.birth[i] > step || (a.death[i] !== NO_STEP && a.death[i] <= step)) continue;
      const b = a.bytes[i];
      total += b;
      live.push(i);
      const keys = {
        phase: a.phase[i] + '\u0000' + kindName(a.kind[i]),
        api: p.strings[a.api[i]] || '(unknown)',
        library: p.strings[a.library[i]] || '(not unwound)',
        lifetime: a.lifetime ? (a.lifetime[i] === NO_LIFETIME_CLASS ? '(unknown)' : classNames[a.lifetime[i]]) : null,
        line: withStacks ? userFrame(p, a, i) || null : null,
      };
      if (withStacks && !keys.line) keys.line = NO_STACK;
      for (const k of Object.keys(groups)) {
        if (keys[k] === null) continue;
        const m = groups[k], g = m.get(keys[k]) || { count: 0, bytes: 0 };
        g.count++; g.bytes += b;
        m.set(keys[k], g);
      }
    }
    const at = d.time[step], running = phaseRunningAt(p, at), k = iterationAt(p, at);
    const when = `GPU ${d.index} at ${fmtTime(at)}` + (isPeak ? ' (the peak)' : '') +
      (running !== null ? `, while ${phaseLabel(p, running)} ran` : '') +
      (k >= 0 ? ` in iteration ${k + 1}${k === 0 ? ' (warm-up)' : ''}` : '');
    // The answer in one sentence: where the bytes came from, largest first.
    const byPhase = new Map();
    for (const i of live) byPhase.set(a.phase[i], (byPhase.get(a.phase[i]) || 0) + a.bytes[i]);
    const origin = [...byPhase.entries()].sort((x, y) => y[1] - x[1]).slice(0, 3)
      .map(([ph, b]) => `${fmtBytes(b)} (${total ? (100 * b / total).toFixed(0) : 0} %) allocated in ${phaseLabel(p, ph)}`);
    panel.append(el('p', { id: 'live-summary', class: 'answer' }, `${when}: ${fmtInt(live.length)} live allocations, ` +
      `${fmtBytes(total)} (${fmtInt(total)} B)` + (origin.length ? ' — ' + origin.join(', ') + '.' : '.')));
    const sorted = (m) => [...m.entries()].sort((x, y) => y[1].bytes - x[1].bytes);
    const phaseRows = sorted(groups.phase).map(([key, g]) => {
      const [index, kind] = key.split('\u0000');
      return {
        attrs: { 'data-phase': phaseName(p, +index), 'data-kind': kind, 'data-count': g.count, 'data-bytes': g.bytes },
        cells: [swatch(phaseColor(+index, 0.8)), phaseLabel(p, +index), kind, num(fmtInt(g.count), g.count), num(fmtBytes(g.bytes), g.bytes),
          num(total ? (100 * g.bytes / total).toFixed(1) + ' %' : '–', g.bytes)],
      };
    });
    const originRows = (m, attr, label = (x) => x) => sorted(m).map(([name, g]) => ({
      attrs: { [attr]: name, 'data-count': g.count, 'data-bytes': g.bytes },
      cells: [label(name), num(fmtInt(g.count), g.count), num(fmtBytes(g.bytes), g.bytes)],
    }));
    const grid = el('div', { class: 'grid' },
      el('div', {}, el('h3', {}, 'by the phase it was allocated in, and kind'),
        table(['', 'allocated in', 'kind', 'count', 'bytes', 'share'], phaseRows, { id: 'live-by-phase' })),
      a.lifetime ? el('div', {}, el('h3', {}, 'by lifetime class'),
        table(['class', 'count', 'bytes'], originRows(groups.lifetime, 'data-class', (n) => CLASS_LABELS[n] || n), { id: 'live-by-lifetime' }))
        : el('div', {}, el('h3', {}, 'by lifetime class'),
          el('p', { class: 'muted' }, d.lifetime_at_peak === null ? 'none: no forward and backward phases'
            : 'not in this file (the analysis kept no lifetimes)')),
      el('div', {}, el('h3', {}, 'by API'),
        table(['API', 'count', 'bytes'], originRows(groups.api, 'data-api'), { id: 'live-by-api' })),
      el('div', {}, el('h3', {}, 'by library'),
        table(['library', 'count', 'bytes'], originRows(groups.library, 'data-library'),
          { id: 'live-by-library' })),
      // With stacks: the lines of the program that made the live bytes (each allocation's
      // allocating frame, as the table below names it), the largest ten.
      withStacks ? el('div', {}, el('h3', {}, 'by allocating line'),
        table(['line', 'count', 'bytes'], sorted(groups.line).slice(0, 10).map(([f, g]) => ({
          attrs: { 'data-line': f.label, 'data-count': g.count, 'data-bytes': g.bytes },
          cells: [el('span', { class: 'frame', title: f.label }, f.short), num(fmtInt(g.count), g.count), num(fmtBytes(g.bytes), g.bytes)],
        })), { id: 'live-by-line' })) : '');
    live.sort((x, y) => a.bytes[y] - a.bytes[x] || a.birth[x] - a.birth[y]);
    const rowText = (i) => [phaseLabel(p, a.phase[i]), kindName(a.kind[i]),
      a.lifetime ? (CLASS_LABELS[classNames[a.lifetime[i]]] || classNames[a.lifetime[i]] || '(unknown)') : '',
      p.strings[a.api[i]] || '(unknown)', p.strings[a.library[i]] || '(not unwound)'];
    const LARGEST = 25;
    const filter = el('input', { id: 'live-filter', type: 'search', size: '38',
      placeholder: 'filter: forward cudaMalloc >1MiB', 'aria-label': 'filter the live allocations' });
    const largestHost = el('div', { id: 'largest' });
    const showLargest = () => {
      const { words, sizes } = parseFilter(filter.value);
      const match = live.filter((i) => {
        if (!sizes.every((f) => f(a.bytes[i]))) return false;
        if (!words.length) return true;
        const f = withStacks ? userFrame(p, a, i) : null;
        const text = (rowText(i).join(' ') + (f ? ' ' + f.label : '')).toLowerCase();
        return words.every((w) => text.includes(w));
      });
      let matched = 0;
      for (const i of match) matched += a.bytes[i];
      const rows = match.slice(0, LARGEST).map((i) => {
        const [phase, kind, lifetime, apiName, library] = rowText(i);
        const cells = [num(fmtBytes(a.bytes[i]), a.bytes[i]), phase, kind, lifetime, apiName, library,
          num(fmtTime(d.time[a.birth[i]]), d.time[a.birth[i]])];
        const attrs = { 'data-bytes': a.bytes[i], 'data-phase': phaseName(p, a.phase[i]), 'data-alloc': i };
        if (withStacks) {
          const f = userFrame(p, a, i);
          cells.push(f ? el('span', { class: 'frame', title: f.label }, f.short) : el('span', { class: 'muted' }, '(no stack)'));
          attrs.class = 'has-stack';
          attrs.title = 'click: its whole stack';
          if (f) attrs['data-frame'] = f.label;
        }
        return { attrs, cells };
      });
      largestHost.replaceChildren(
        el('h3', {}, `largest ${rows.length} of ${fmtInt(match.length)}` +
          (match.length !== live.length ? ` matching (${fmtBytes(matched)} of ${fmtBytes(total)})` : '')),
        table(['bytes', 'allocated in', 'kind', 'lifetime', 'API', 'library', 'allocated at',
          ...(withStacks ? ['allocated by (innermost frame of the program)'] : [])], rows, { id: 'live-largest' }));
    };
    filter.addEventListener('input', showLargest);
    showLargest();
    panel.append(grid, el('div', { class: 'filter-row' }, el('label', {}, 'Filter ', filter),
      el('span', { class: 'muted hint' }, ' words match phase, kind, lifetime, API, library' +
        (withStacks ? ', the allocating frame' : '') + '; >, <, >=, <= a size (1MiB, 512KiB)')),
    largestHost);
    if (withStacks) {
      // The whole stack of one allocation: the largest at first, then the row clicked.
      const detail = el('div', { id: 'stack-detail' });
      largestHost.addEventListener('click', (e) => {
        const tr = e.target.closest && e.target.closest('tr[data-alloc]');
        if (tr) showStack(p, d, a, +tr.dataset.alloc, detail);
      });
      panel.append(detail);
      if (live.length) showStack(p, d, a, live[0], detail);
    }
    showFlame(p, d, a, live, total, isPeak ? `at the peak of GPU ${d.index}` : `on GPU ${d.index} at ${fmtTime(at)}`);
  }

  // One allocation's stack, innermost frame first, the program's own frames in bold.
  function showStack(p, d, a, i, host) {
    const frames = stackOf(p, a, i), user = userFrame(p, a, i);
    const what = `${fmtBytes(a.bytes[i])} allocation (${phaseLabel(p, a.phase[i])}, ` +
      `${p.strings[a.api[i]] || '(unknown API)'}, allocated at ${fmtTime(d.time[a.birth[i]])})`;
    host.dataset.alloc = String(i);
    if (!frames) {
      host.replaceChildren(el('h3', {}, `Stack of the ${what}`), el('p', { class: 'muted' }, 'No stack was recorded for it.'));
      return;
    }
    const T = p.stackTable;
    host.replaceChildren(el('h3', {}, `Stack of the ${what}, innermost frame first`),
      el('ol', { class: 'stack-frames' }, ...frames.map((k) => {
        const f = T.frames[k];
        return el('li', { class: (f.system ? 'system' : 'user') + (f === user ? ' allocating' : ''), 'data-kind': f.kind },
          el('span', { class: 'frame-kind' }, f.kind), ' ', f.label);
      })),
      el('p', { class: 'muted hint' }, 'bold: the program\'s own code (not the interpreter, installed packages ' +
        'or the CUDA and C runtimes); the highlighted frame is the one the tables name.'));
  }

  // ---- flame graph of the live bytes by stack, by module, by operator ------------------------
  // The allocations of a live set merged along a path, outermost at the top (an icicle): each
  // box is reached by the same path from the top and is as wide as the bytes allocated below
  // it. By stack the path is the allocation's frames ("(no stack)" without one); by module
  // its module path split on '.', under the model (`<GPT>`) when the process named one
  // ("(no module)" outside every module); by operator forward or backward, then the outer
  // operator ("backward of <forward op>" when a backward tensor was linked to its forward
  // op), then the inner one.
  const FLAME_ROW = 18;
  const FLAME_BY = { stack: 'by stack', module: 'by module', operator: 'by operator' };
  const flameNode = (label, parent, extra) => Object.assign({ label, frame: null, parent, bytes: 0, count: 0,
    children: new Map(), depth: parent ? parent.depth + 1 : 0 }, extra || {});
  const flameChild = (n, key, label, extra) => {
    let c = n.children.get(key);
    if (!c) { c = flameNode(label, n, extra); n.children.set(key, c); }
    return c;
  };
  // The choices the device's allocations have data for, computed once per device.
  function flameChoices(p, a) {
    if (a.flameChoices) return a.flameChoices;
    const choices = [];
    if (p.stackTable && a.stack) choices.push('stack');
    const T = p.attributionTable, used = usedAttributions(a);
    if (T && used.some((e) => T.module[e])) choices.push('module');
    if (T && used.some((e) => T.operator[e] || T.inner[e] || T.backward[e])) choices.push('operator');
    a.flameChoices = choices;
    return choices;
  }
  // The attributions the device's allocations have (none apart).
  function usedAttributions(a) {
    if (a.usedAttributions) return a.usedAttributions;
    const used = [];
    if (a.attr) {
      const seen = new Uint8Array(a.attr.reduce((m, e) => Math.max(m, e), 0) + 1);
      for (let i = 0; i < a.n; i++) seen[a.attr[i]] = 1;
      for (let e = 1; e < seen.length; e++) if (seen[e]) used.push(e);
    }
    a.usedAttributions = used;
    return used;
  }
  function flameTree(p, d, a, live, by) {
    const root = flameNode('all live allocations', null, { path: '' });
    const add = (n, b, c) => { n.bytes += b; n.count += c; };
    if (by === 'module' || by === 'operator') {
      // The live bytes and count per attribution, then one path per attribution.
      const T = p.attributionTable, bytes = new Float64Array(T.n), count = new Uint32Array(T.n);
      for (const i of live) { bytes[a.attr[i]] += a.bytes[i]; count[a.attr[i]]++; }
      for (let e = 0; e < T.n; e++) {
        if (!count[e]) continue;
        add(root, bytes[e], count[e]);
        (by === 'module' ? modulePath : operatorPath)(p, d, a, e, root, (n) => add(n, bytes[e], count[e]));
      }
      return { root };
    }
    const S = p.stackTable;
    for (const i of live) {
      const b = a.bytes[i], frames = stackOf(p, a, i);
      add(root, b, 1);
      if (!frames) {
        add(flameChild(root, '', '(no stack)'), b, 1);
        continue;
      }
      let n = root;
      for (let k = frames.length - 1; k >= 0; k--) {
        const f = S.frames[frames[k]];
        n = flameChild(n, f.key, f.label, { frame: f });
        add(n, b, 1);
      }
    }
    return { root };
  }
  // The model: the one root module (`<GPT>`) the process named, as the report's module tree
  // has it (docs/design.md "Modules and operators"); several models stay separate trees.
  function moduleRoot(p, d, a) {
    if (a.moduleRoot !== undefined) return a.moduleRoot;
    const roots = new Set();
    const rows = (d.attribution && Array.isArray(d.attribution.by_module)) ? d.attribution.by_module : [];
    for (const r of rows) if (r && typeof r.module === 'string' && r.module[0] === '<') roots.add(r.module);
    for (const e of usedAttributions(a)) {
      const m = p.strings[p.attributionTable.module[e]];
      if (typeof m === 'string' && m[0] === '<') roots.add(m);
    }
    a.moduleRoot = roots.size === 1 ? [...roots][0] : null;
    return a.moduleRoot;
  }
  // By module: the model, then the path's segments; "(no module)" outside every module.
  function modulePath(p, d, a, e, root, add) {
    const model = moduleRoot(p, d, a), m = String(p.strings[p.attributionTable.module[e]] || '');
    if (!m) {
      add(flameChild(root, '\u0000none', '(no module)', { path: '(no module)', kind: 'none' }));
      return;
    }
    const segs = m[0] === '<' ? [m] : (model ? [model] : []).concat(m.split('.'));
    let n = root, path = '';
    for (let k = 0; k < segs.length; k++) {
      // The model's box is its name; below it each box's path is the module path to it.
      path = k === 0 && segs[k][0] === '<' ? '' : (path ? path + '.' : '') + segs[k];
      n = flameChild(n, segs[k], segs[k], { path: path || segs[k], kind: 'module' });
      add(n);
    }
  }
  // By operator: forward or backward, the outer operator ("backward of <forward op>" when a
  // backward tensor was linked to its forward op), the inner operator where it is another.
  function operatorPath(p, d, a, e, root, add) {
    const T = p.attributionTable, name = (id) => String(p.strings[id] || '');
    const backward = Boolean(T.backward[e]), op = name(T.operator[e]), inner = name(T.inner[e]);
    const forward = backward ? name(T.forward[e]) : '';
    if (!backward && !op && !inner) {
      add(flameChild(root, '\u0000none', '(no operator)', { path: '(no operator)', kind: 'none' }));
      return;
    }
    const side = backward ? 'backward' : 'forward';
    const top = flameChild(root, side, side, { path: side, kind: side });
    add(top);
    const outer = forward ? `backward of ${forward}` : (op || inner || '(no operator)');
    const n = flameChild(top, (forward ? '\u0001' : '\u0002') + outer, outer,
      { path: `${side} / ${outer}`, kind: side, nodes: new Set() });
    add(n);
    if (forward && op) n.nodes.add(op);  // the autograd nodes run for that forward op
    if (inner && op && inner !== op) {
      add(flameChild(n, inner, inner, { path: `${side} / ${outer} / ${inner}`, kind: side }));
    }
  }
  const hashOf = (text) => {
    let h = 0;
    for (let k = 0; k < text.length; k++) h = (h * 31 + text.charCodeAt(k)) >>> 0;
    return h;
  };
  function flameColor(n) {
    if (n.kind === 'module') return `hsl(${140 + hashOf(n.label) % 40}, 50%, ${n.depth <= 1 ? 72 : 78}%)`;
    if (n.kind === 'forward') return `hsl(${30 + hashOf(n.label) % 25}, 80%, ${n.depth <= 1 ? 66 : 76}%)`;
    if (n.kind === 'backward') return `hsl(${260 + hashOf(n.label) % 30}, 55%, ${n.depth <= 1 ? 72 : 80}%)`;
    if (!n.frame) return n.parent ? '#d1d5db' : '#e5e7eb';
    const light = n.frame.system ? 80 : 66;
    const h = hashOf(n.frame.fn);
    return n.frame.kind === 'python' ? `hsl(${20 + h % 35}, 85%, ${light}%)` : `hsl(${195 + h % 35}, 60%, ${light}%)`;
  }
  const FLAME_HINTS = {
    stack: 'Outermost frame at the top; each box is as wide as the bytes allocated below it. Hover: the frame and ' +
      'its bytes; ',
    module: 'The model at the top, each module below the one that holds it, as wide as the bytes its tensors hold ' +
      '(a backward tensor under the module of its forward op). Hover: the module path and its bytes; ',
    operator: 'Forward or backward, then the outermost operator the tensor was born in (backward of the forward op ' +
      'it was linked to), then the innermost one. Hover: the operator and its bytes; ',
  };
  function showFlame(p, d, a, live, total, when) {
    const host = document.getElementById('flame');
    const choices = flameChoices(p, a);
    if (!choices.length) {
      host.hidden = true;
      host.replaceChildren();
      api.flame = () => null;
      return;
    }
    host.hidden = false;
    // The choice stays as the instant changes; the first one the trace has data for at first.
    if (!choices.includes(state.flameBy)) state.flameBy = choices[0];
    const by = state.flameBy;
    const { root } = flameTree(p, d, a, live, by);
    const graph = el('div', { id: 'flame-graph', class: 'flame', 'data-by': by });
    const reset = el('button', { type: 'button', id: 'flame-reset', hidden: '' }, 'zoom out to all');
    const select = el('select', { id: 'flame-by', title: 'what the flame graph groups the live bytes by' },
      ...choices.map((c) => el('option', c === by ? { value: c, selected: '' } : { value: c }, FLAME_BY[c])));
    select.hidden = choices.length < 2;
    select.addEventListener('change', () => {
      state.flameBy = select.value;
      showFlame(p, d, a, live, total, when);
    });
    const title = el('h2', { id: 'flame-title' }, `Live ${when}, ${FLAME_BY[by]}`);
    host.replaceChildren(el('div', { class: 'flame-head' }, title, select),
      el('p', { class: 'muted hint' }, `${fmtBytes(total)} (${fmtInt(total)} B) in ${fmtInt(live.length)} allocations. ` +
        FLAME_HINTS[by] + 'click: zoom into it; click a bar above: back out. ', reset),
      graph);
    let boxes = [];
    let focus = root;
    const draw = () => {
      const width = graph.clientWidth || 1000;
      boxes = [];
      const out = [];
      // The path to the focus, full width; below it the focus' subtree to scale.
      const path = [];
      for (let n = focus; n; n = n.parent) path.unshift(n);
      const box = (n, x, w, row) => {
        const b = el('div', { class: 'flame-box' + (n.frame && !n.frame.system ? ' user' : ''),
          'data-node': String(boxes.length), 'data-bytes': String(n.bytes), 'data-depth': String(n.depth),
          'data-label': n.label, 'data-path': n.path === undefined ? n.label : n.path,
          style: `left:${(100 * x).toFixed(4)}%;width:${(100 * w).toFixed(4)}%;top:${row * FLAME_ROW}px;` +
            `background:${flameColor(n)}` }, n.frame ? n.frame.short : n.label);
        boxes.push(n);
        out.push(b);
      };
      path.forEach((n, row) => box(n, 0, 1, row));
      let rows = path.length;
      const base = focus.bytes || 1;
      const lay = (n, x, row) => {
        const kids = [...n.children.values()].sort((u, v) => v.bytes - u.bytes);
        let cx = x;
        for (const c of kids) {
          const w = c.bytes / base;
          if (w * width < 1 || out.length >= 4000) break;  // too thin to see, and so is the rest
          box(c, cx, w, row);
          rows = Math.max(rows, row + 1);
          lay(c, cx, row + 1);
          cx += w;
        }
      };
      lay(focus, 0, path.length);
      graph.style.height = rows * FLAME_ROW + 'px';
      graph.replaceChildren(...out);
      reset.hidden = focus === root;
      title.textContent = `Live ${when}, ${FLAME_BY[by]}` + (focus === root ? '' : `: ${focus.path || focus.label}`);
    };
    const nodeAt = (e) => {
      const b = e.target.closest && e.target.closest('.flame-box');
      return b ? boxes[+b.dataset.node] : null;
    };
    graph.addEventListener('mousemove', (e) => {
      const n = nodeAt(e);
      if (!n) { hideTooltip(); return; }
      const lines = [n.frame ? n.frame.label : n.kind === 'module' ? `module ${n.path}` : (n.path || n.label)];
      if (n.frame) lines.push(`${n.frame.kind} frame` + (n.frame.system ? ' (runtime or installed package)' : ' (the program\'s own)'));
      if (n.nodes && n.nodes.size) {
        lines.push(`autograd node${n.nodes.size > 1 ? 's' : ''}: ${[...n.nodes].join(', ')}`);
      }
      lines.push(`${fmtBytes(n.bytes)} (${fmtInt(n.bytes)} B), ${(100 * n.bytes / (root.bytes || 1)).toFixed(1)} % of the live bytes`,
        `${fmtInt(n.count)} allocation${n.count === 1 ? '' : 's'}`,
        n === focus ? (n.parent ? 'click: back out one level' : '') : 'click: zoom into it');
      showTooltip(e, lines.filter((l) => l));
    });
    graph.addEventListener('mouseleave', hideTooltip);
    graph.addEventListener('click', (e) => {
      const n = nodeAt(e);
      if (!n) return;
      focus = n === focus && n.parent ? n.parent : n;
      draw();
    });
    reset.addEventListener('click', () => { focus = root; draw(); });
    draw();
    api.flame = () => ({
      by, choices: choices.slice(), title: title.textContent,
      rootBytes: root.bytes, liveBytes: total, liveCount: live.length, focus: focus.label,
      focusPath: focus.path === undefined ? focus.label : focus.path,
      width: graph.clientWidth,
      boxes: [...graph.children].map((b) => ({ label: b.dataset.label, path: b.dataset.path,
        bytes: Number(b.dataset.bytes), depth: Number(b.dataset.depth), x: b.offsetLeft, w: b.offsetWidth,
        top: b.offsetTop })),
    });
  }

  // ---- tables -----------------------------------------------------------------------------
  function spreadCells(s, fmt) {
    if (!s || !s.count) return ['–', '–'];
    return [num(fmt(s.median), s.median), `${fmt(s.min)} … ${fmt(s.max)}`];
  }

  // Per phase over iterations 2..N (the warm-up apart), as summary.json's "iterations".
  function buildIterationTable(p) {
    const host = document.getElementById('iterations');
    host.replaceChildren(el('h2', {}, 'Iterations'));
    const it = p.iterations;
    if (!it || !it.count) {
      host.append(el('p', { class: 'muted' }, 'No iterations found' + (it && it.note ? `: ${it.note}.` : '.')));
      return;
    }
    const how = it.source === 'range' ? `the range ${it.range}` : `the repetition of ${it.range}`;
    host.append(el('p', {}, `${fmtInt(it.count)} iterations, from ${how}; the first (warm-up) ` +
      `took ${fmtTime(it.warmup_ns)}` + (it.duration_ns.count
        ? `, the others a median ${fmtTime(it.duration_ns.median)} (${fmtTime(it.duration_ns.min)} … ` +
          `${fmtTime(it.duration_ns.max)}).` : '.')));
    const rows = [];
    for (const ph of it.phases) {
      for (const dv of ph.devices) {
        rows.push({
          attrs: {
            'data-phase': ph.phase, 'data-device': dv.index,
            'data-time-median': ph.time_ns.median,
            'data-rise-median': dv.peak_above_entry_bytes.median,
            'data-net-median': dv.net_change_bytes.median,
          },
          cells: [ph.phase + (ph.inferred ? ' (inferred)' : ''), `GPU ${dv.index}`, fmtInt(ph.iterations_with_phase),
            ...spreadCells(ph.time_ns, fmtTime), ph.warmup_ns === null ? '–' : num(fmtTime(ph.warmup_ns), ph.warmup_ns),
            ...spreadCells(dv.peak_above_entry_bytes, fmtSignedBytes),
            dv.warmup_peak_above_entry_bytes === null ? '–' : num(fmtSignedBytes(dv.warmup_peak_above_entry_bytes), dv.warmup_peak_above_entry_bytes),
            ...spreadCells(dv.net_change_bytes, fmtSignedBytes),
            dv.warmup_net_change_bytes === null ? '–' : num(fmtSignedBytes(dv.warmup_net_change_bytes), dv.warmup_net_change_bytes)],
        });
      }
    }
    const t = table(['phase', 'device', 'its', 'time', 'min … max', 'warm-up',
      'rise', 'min … max', 'warm-up', 'net', 'min … max', 'warm-up'],
    rows, { id: 'iteration-table' });
    host.append(t, el('p', { class: 'muted hint' }, 'time, rise and net are lower medians (an observed value) ' +
      'over iterations 2..N, with their range; warm-up: iteration 1. rise = peak − memory at the phase\'s ' +
      'entry; net = exit − entry, summed over the phase\'s occurrences in the iteration.'));
  }

  // The lifetime classes of what was live at each peak, and the one activation figure:
  // activation memory = peak − persistent. The class the engine calls "activation" is shown
  // by its definition (born in forward, freed in backward) so that no two figures are both
  // called activation. Without training phases (a forward and a backward) the report gives
  // no classes (lifetime_at_peak null), and no activation figure is shown.
  function buildLifetimeTable(p) {
    const host = document.getElementById('lifetimes');
    host.replaceChildren(el('h2', {}, 'Lifetime classes at the peak'));
    if (!p.devices.some((d) => d.lifetime_at_peak)) {
      host.append(el('p', { class: 'muted', id: 'lifetime-none' }, 'This process has no forward and backward ' +
        'phases, so no lifetime classes (persistent, gradient, …) and no activation memory figure are given: ' +
        'they are defined by those phases (docs/phases.md).'));
      return;
    }
    const rows = [];
    for (const d of p.devices) {
      const l = d.lifetime_at_peak;
      if (!l || d.peak_step === null) continue;
      const order = p.lifetime_classes || Object.keys(l.bytes_by_class);
      for (const c of order) {
        const bytes = l.bytes_by_class[c] || 0;
        rows.push({
          attrs: { 'data-device': d.index, 'data-class': c, 'data-bytes': bytes },
          cells: [`GPU ${d.index}`, CLASS_LABELS[c] || c, num(fmtBytes(bytes), bytes), num(fmtInt(bytes), bytes),
            num((d.peak_bytes ? (100 * bytes / d.peak_bytes).toFixed(1) : '0') + ' %', bytes)],
        });
      }
      rows.push({
        attrs: { 'data-device': d.index, 'data-class': 'activation memory', 'data-bytes': l.activation_memory_bytes },
        cells: [`GPU ${d.index}`, el('b', {}, 'activation memory (peak − persistent)'),
          num(fmtBytes(l.activation_memory_bytes), l.activation_memory_bytes),
          num(fmtInt(l.activation_memory_bytes), l.activation_memory_bytes),
          num((d.peak_bytes ? (100 * l.activation_memory_bytes / d.peak_bytes).toFixed(1) : '0') + ' %', l.activation_memory_bytes)],
      });
    }
    if (!rows.length) {
      host.append(el('p', { class: 'muted' }, 'No device memory was allocated.'));
      return;
    }
    if (segmentsOnly(p)) {
      host.append(el('p', { class: 'answer', id: 'lifetime-segments' }, 'These are the classes of the segments ' +
        'PyTorch\'s caching allocator reserved and kept, not of tensors: activations in a kept segment count as ' +
        'persistent here, so activation memory reads low. The allocator bridge (or the async allocator) sees tensors.'));
    }
    host.append(table(['device', 'class', 'bytes', 'exact', 'of the peak'], rows, { id: 'lifetime-table' }),
      el('p', { class: 'muted hint' }, 'persistent: alive at the start of an iteration it was not born in ' +
        '(weights, optimizer state); born in forward, freed in backward (the class named "activation" ' +
        'in summary.json); gradient: born in backward, alive at the optimizer; temporary: born and freed ' +
        'in one phase occurrence; activation memory = peak − persistent: everything live at the peak ' +
        'that does not persist across iterations, the one activation figure. docs/phases.md.'));
  }

  // The legend: what the memory is coloured by (by category where the process has categories,
  // else by the phase it was allocated in), one entry per phase, coloured as its bands and
  // layers (a click hides or shows the phase's layer and bands), and the category layers.
  function buildLegend(p) {
    const legend = document.getElementById('legend');
    const hasCategories = p.devices.some((d) => d.cat && d.cat.n > 0);
    if (state.stackBy === null || (state.stackBy === 'category' && !hasCategories)) {
      state.stackBy = hasCategories ? 'category' : 'phase';
    }
    const pick = el('select', { id: 'stack-by', 'aria-label': 'colour the memory by' });
    const options = [['phase', 'the phase it was allocated in'], ['none', 'nothing (memory in use)']];
    if (hasCategories) options.unshift(['category', 'what it is (category)']);
    for (const [value, text] of options) pick.append(el('option', { value }, text));
    pick.value = state.stackBy;
    const toggle = el('label', { class: 'legend-toggle' }, 'colour memory by ', pick);
    const item = (i, name) => {
      const b = el('button', { type: 'button', class: 'legend-item', 'data-phase': name, 'aria-pressed': 'true',
        title: 'click: hide or show this phase' }, swatch(phaseColor(i, 0.8)), name);
      b.addEventListener('click', () => {
        if (state.hiddenPhases.has(i)) state.hiddenPhases.delete(i); else state.hiddenPhases.add(i);
        b.setAttribute('aria-pressed', String(!state.hiddenPhases.has(i)));
        b.classList.toggle('off', state.hiddenPhases.has(i));
        scheduleDraw();
      });
      return b;
    };
    // The layers any device has, in the one order.
    const present = CATEGORY_LAYERS.filter((name) => p.devices.some((d) => d.cat && d.cat.layers.includes(name)));
    const categories = el('div', { id: 'category-legend', class: 'legend-row' },
      el('span', { class: 'muted' }, 'layers, bottom to top:'),
      ...present.map((name) => el('span', { class: 'legend-item', 'data-category': name, title: CATEGORY_NOTES[name] || '' },
        swatch(categoryColor(name, name === 'torch_cache' ? 0.45 : 0.7)), categoryLabel(name))));
    categories.hidden = state.stackBy !== 'category';
    pick.addEventListener('change', () => {
      state.stackBy = pick.value;
      categories.hidden = state.stackBy !== 'category';
      scheduleDraw();
    });
    legend.replaceChildren(toggle, el('span', { class: 'muted' }, 'phases (bands):'),
      ...p.phase_names.map((name, i) => item(i, phaseLabel(p, i))), item(-1, '(no phase)'));
    if (present.length) legend.append(categories);
  }

  // The peaks' breakdown by category: the report's figures (summary.json's "categories", the
  // same numbers `cumemtrace report` prints), each category's own peak beside them, and what of
  // each the program's objects named and what was inferred.
  function buildCategoryTable(p) {
    const host = document.getElementById('categories');
    const devices = p.devices.filter((d) => d.cat);
    // Without categories, one line (no heading, chart or legend of them) that says why.
    host.replaceChildren(...(devices.length ? [el('h2', {}, 'What the memory is, by category')] : []));
    if (!devices.length) {
      host.append(el('p', { class: 'muted hint', id: 'categories-none' }, 'No categories for this process: it has ' +
        'no training phases (forward, backward, optimizer) and no tags from PyTorch\'s objects, as a CUDA ' +
        'program has none, so its memory is coloured by the phase it was allocated in (docs/phases.md).'));
      return;
    }
    for (const d of devices) {
      const f = d.cat.figures, box = el('div', { class: 'category-device', 'data-device': String(d.index) });
      const tensorPeak = f.tensor_peak;
      box.append(el('h3', {}, `GPU ${d.index}: device peak ${fmtBytes(d.peak_bytes)}` +
        (d.peak_time_ns === null ? '' : ` at ${fmtTime(d.peak_time_ns)}`) +
        ` · tensors' peak ${fmtBytes(tensorPeak.bytes)} at ${fmtTime(tensorPeak.time_ns)}`));
      const at = (name, which) => {
        if (name === 'not_torch') return f[which].not_torch_bytes;
        if (name === 'torch_cache') return f[which].torch_cache_bytes;
        return f.by_category[name][which].bytes;
      };
      // One bar per peak: the layers' shares of that instant's stack.
      for (const [which, label] of [['at_device_peak', 'at the device peak'], ['at_tensor_peak', 'at the tensors\' peak']]) {
        const parts = d.cat.layers.map((name) => [name, at(name, which)]);
        const sum = parts.reduce((n, [, b]) => n + b, 0);
        const bar = el('div', { class: 'stack-bar', 'data-peak': which });
        for (const [name, b] of parts) {
          if (b <= 0) continue;
          bar.append(el('span', { 'data-layer': name, title: `${categoryLabel(name)}: ${fmtBytes(b)} (${fmtInt(b)} B)`,
            style: `width:${(100 * b / Math.max(sum, 1)).toFixed(3)}%;` +
              `background:${categoryColor(name, name === 'torch_cache' ? 0.45 : 0.75)}` }));
        }
        box.append(el('div', { class: 'stack-bar-row' }, el('span', { class: 'stack-bar-label' }, label), bar,
          el('span', { class: 'muted' }, fmtBytes(sum))));
      }
      const rows = d.cat.layers.map((name) => {
        const c = f.by_category[name];
        const attrs = { 'data-layer': name, 'data-device-peak': String(at(name, 'at_device_peak')),
          'data-tensor-peak': String(at(name, 'at_tensor_peak')) };
        const bytes = (b) => num(fmtBytes(b), b);
        const label = el('span', { title: CATEGORY_NOTES[name] || '' }, swatch(categoryColor(name, 0.75)), ' ',
          categoryLabel(name));
        if (!c) {
          const libraries = name === 'not_torch' ? Object.entries(f.at_device_peak.not_torch_by_library)
            .map(([lib, b]) => `${lib.split('/').pop()} ${fmtBytes(b)}`).join(', ') : '';
          return { attrs, cells: [label, bytes(at(name, 'at_device_peak')), '-', '-', bytes(at(name, 'at_tensor_peak')),
            '-', '-', '-', libraries || (name === 'torch_cache' ? 'reserved − allocated' : '')] };
        }
        Object.assign(attrs, { 'data-own-peak': String(c.own_peak.bytes),
          'data-objects': String(c.at_device_peak.objects_bytes), 'data-inferred': String(c.at_device_peak.inferred_bytes),
          'data-own-objects': String(c.own_peak.objects_bytes) });
        const source = c.objects_allocations === 0 ? 'inferred' : c.objects_allocations === c.allocations ? 'objects'
          : `objects ${fmtInt(c.objects_allocations)} of ${fmtInt(c.allocations)}`;
        return { attrs, cells: [label, bytes(c.at_device_peak.bytes), bytes(c.at_device_peak.objects_bytes),
          bytes(c.at_device_peak.inferred_bytes), bytes(c.at_tensor_peak.bytes), bytes(c.own_peak.bytes),
          c.own_peak.time_ns === null ? '-' : num(fmtTime(c.own_peak.time_ns), c.own_peak.time_ns),
          num(fmtInt(c.allocations), c.allocations), source] };
      });
      box.append(table(['layer', 'at device peak', 'of it: objects', 'inferred', 'at tensors\' peak', 'own peak',
        'own peak at', 'allocations', 'from'], rows, { class: 'sortable category-table', 'data-device': String(d.index) }));
      const notes = [];
      const tags = p.categories ? p.categories.tags : 0;
      notes.push(tags === 0
        ? 'No tags from the program\'s objects: every category is inferred from the phases an allocation was born ' +
          'and freed in, as for a LibTorch program.'
        : `objects: named by the program's parameters, buffers, .grad and optimizer state (${fmtInt(tags)} tags` +
          (p.categories.tags_unmatched ? `, ${fmtInt(p.categories.tags_unmatched)} of them naming no live allocation` : '') +
          '); inferred: from the phases an allocation was born and freed in.');
      if (f.tensor_layer === 'async') notes.push('Tensors: the stream-ordered allocations (PyTorch on cudaMallocAsync).');
      if (f.tensor_layer === 'device') {
        notes.push('Tensors: every device allocation' + (p.allocator_mode === 'native'
          ? ': here the segments PyTorch\'s caching allocator keeps, not tensors (the allocator bridge sees tensors).' : '.'));
      }
      if (d.cat.sampled) {
        notes.push(`The chart's layers are ${fmtInt(d.cat.n)} points sampled from ${fmtInt(d.steps.n)} steps (each run ` +
          `of steps keeps its lowest and highest; at most ${fmtInt(d.cat.maxPoints)}, and both peaks exactly).`);
      }
      notes.push('Own peak: the category alone at its highest. docs/phases.md "Categories".');
      box.append(el('p', { class: 'muted hint' }, notes.join(' ')));
      host.append(box);
    }
  }

  function describeExit(e) {
    if (!e || e.how === 'unknown') return 'exit unknown (no exit record: the trace may be cut short)';
    if (e.how === 'killed') return `killed by signal ${e.signal}` + (e.core_dumped ? ' (core dumped)' : '');
    return `exit status ${e.code}`;
  }
  const ALLOCATOR_NOTES = {
    async: 'PyTorch on cudaMallocAsync: every tensor is an allocation here',
    native: 'PyTorch\'s own caching allocator kept: this trace sees the segments it reserves ' +
      '(cudaMalloc), not tensors; "allocated in" is where a segment was reserved',
    user: 'PYTORCH_CUDA_ALLOC_CONF was already set by the user',
  };
  function buildRunInfo(p) {
    const info = document.getElementById('run-info');
    const parts = [];
    const cmd = (p.command_line || []).join(' ');
    parts.push(el('span', {}, el('b', {}, 'command '), el('code', { id: 'run-command' }, cmd || '(unknown)')));
    parts.push(el('span', { id: 'run-exit' }, describeExit(p.exit)));
    parts.push(el('span', { id: 'run-allocator', title: ALLOCATOR_NOTES[p.allocator_mode] || '' },
      'allocator ' + (p.allocator_mode || 'not chosen by run')));
    parts.push(el('span', { id: 'run-phases' }, p.phases_inferred
      ? 'phases inferred from the program\'s threads (no NVTX phases), marked "(inferred)"'
      : p.phases.length ? 'phases from NVTX ranges' : 'no phases'));
    info.replaceChildren(...parts);
    if (p.allocator_mode === 'native') {
      info.append(el('p', { class: 'muted hint', id: 'allocator-note' }, (segmentsOnly(p) ? ALLOCATOR_NOTES.native
        : 'PyTorch\'s own caching allocator kept, and the allocator bridge attached: tensors are TORCH_ALLOCATED ' +
          'allocations, the segments holding them are not counted twice') + '.'));
    }
  }

  function buildReportTables() {
    const p = state.process;
    buildLegend(p);
    buildCategoryTable(p);

    const phases = document.getElementById('phases');
    phases.replaceChildren(el('h2', {}, 'Phases'));
    if (!p.phases.length) {
      phases.append(el('p', { class: 'muted' }, 'No NVTX ranges were recorded.'));
    } else {
      const rows = [];
      for (const ph of p.phases) {
        for (const d of ph.devices) {
          rows.push({ attrs: { 'data-phase': ph.name }, cells: [ph.name + (ph.inferred ? ' (inferred)' : ''), `GPU ${d.index}`,
            num(fmtInt(ph.occurrences), ph.occurrences), num(fmtTime(ph.total_ns), ph.total_ns),
            num(fmtBytes(d.bytes_at_entry), d.bytes_at_entry), num(fmtBytes(d.peak_bytes), d.peak_bytes),
            num('+' + fmtBytes(d.peak_above_entry_bytes), d.peak_above_entry_bytes),
            ph.occurrences > 1 ? num('+' + fmtBytes(d.first_above_entry_bytes), d.first_above_entry_bytes) : '-',
            d.steady_above_entry_bytes == null ? '-' : num('+' + fmtBytes(d.steady_above_entry_bytes), d.steady_above_entry_bytes),
            num(fmtBytes(d.allocated_bytes), d.allocated_bytes), num(fmtBytes(d.freed_bytes), d.freed_bytes),
            num(fmtInt(d.failed_allocations), d.failed_allocations)] });
        }
      }
      // At entry, peak and above entry come from one occurrence (the highest peak), so that
      // peak - at entry = above entry on every row.
      phases.append(table(['phase', 'device', 'n', 'time', 'highest: at entry', 'peak', 'above entry',
        'first: above', 'steady: above', 'allocated', 'freed', 'failed'], rows, { id: 'phase-table' }));
      phases.append(el('p', { class: 'muted hint' }, 'highest: the occurrence with the highest peak; ' +
        'first: the first occurrence (warm-up); steady: the median occurrence of the others.'));
    }
    buildIterationTable(p);
    buildLifetimeTable(p);

    const failed = document.getElementById('failed');
    failed.replaceChildren(el('h2', {}, 'Failed allocations'));
    if (!p.failed_allocations.length) {
      failed.append(el('p', { class: 'muted' }, 'None.'));
    } else {
      failed.append(table(['time', 'device', 'API', 'requested', 'error', 'phase', 'in use then', 'free then'],
        p.failed_allocations.map((f) => ({ cells: [num(fmtTime(f.time_ns), f.time_ns), `GPU ${f.device}`, f.api,
          num(fmtBytes(f.requested_bytes), f.requested_bytes), f.error_name, f.phase === null ? '(no phase)' : f.phase,
          num(fmtBytes(f.device_in_use_bytes), f.device_in_use_bytes), num(fmtBytes(f.device_free_bytes), f.device_free_bytes)] })),
        { id: 'failed-table' }));
    }
  }

  // The first out-of-memory: PyTorch's own OOM when there is one, else the first failure.
  function firstOutOfMemory(p) {
    const failures = p.failed_allocations || [];
    return failures.find((f) => f.post_mortem && f.api === 'PyTorch caching allocator') ||
      failures[0] || null;
  }

  // Why it did not fit and what would have let it (docs/oom.md).
  function postMortemBox(f) {
    const pm = f.post_mortem, box = el('div', { id: 'oom' });
    box.append(el('h2', {}, `Out of memory at ${fmtTime(f.time_ns)} on GPU ${f.device}`));
    if (!pm) return box;
    box.append(el('p', {}, `${f.api}: ${fmtBytes(pm.request_bytes)} requested. Why: ${pm.explanation}.`));
    const verdict = (w) => (w.fits ? 'yes' : `no, short by ${fmtBytes(w.short_by_bytes)}`);
    const items = [];
    if (pm.expandable_segments_on) items.push('expandable_segments:True: already on');
    else if (pm.expandable_segments) items.push(`expandable_segments:True: ${verdict(pm.expandable_segments)}`);
    if (pm.empty_cache) items.push(`empty_cache() just before: ${verdict(pm.empty_cache)}`);
    items.push(`a smaller request: up to ${fmtBytes(pm.largest_request_that_fits_bytes)}`);
    box.append(el('p', {}, 'Would have fit:'), el('ul', { id: 'oom-would-fit' }, ...items.map((t) => el('li', {}, t))));
    return box;
  }

  function buildViewControls(p) {
    const host = document.getElementById('view-buttons');
    const button = (id, text, title, f) => {
      const b = el('button', { type: 'button', id, title }, text);
      b.addEventListener('click', f);
      return b;
    };
    const items = [];
    const its = iterationRange(p);
    if (its) items.push(button('zoom-iterations', 'iterations', 'the training iterations (I)', () => setView(...iterationRange(p))));
    if (p.devices.some((d) => d.peak_step !== null)) items.push(button('zoom-peak', 'peak', 'the iteration (or moment) of the peak (P)', zoomToPeak));
    const n = p.iterationStarts.length;
    if (n) {
      const pick = el('select', { id: 'iteration-picker', 'aria-label': 'zoom to an iteration' },
        el('option', { value: '' }, 'iteration…'));
      for (let k = 0; k < Math.min(n, 5000); k++) pick.append(el('option', { value: String(k) }, `${k + 1}${k === 0 ? ' (warm-up)' : ''}`));
      pick.addEventListener('change', () => { if (pick.value !== '') zoomToIteration(+pick.value); });
      items.push(pick);
    }
    host.replaceChildren(...items);
  }

  function showProcess(index) {
    state.process = decodeProcess(data.processes[index]);
    state.selection = null;
    const p = state.process;
    p.inferredPhases = new Set(p.phases.filter((ph) => ph.inferred).map((ph) => ph.name));
    document.getElementById('title').textContent = `· ${p.label}` +
      (data.truncated ? ' · trace cut short' : '');
    buildRunInfo(p);
    buildCharts();
    buildReportTables();
    state.full = fullRange(p);
    [state.t0, state.t1] = iterationRange(p) || state.full;
    buildViewControls(p);
    // The answer without a click: the out-of-memory when there was one (what was live then and
    // why it did not fit), else the highest peak, and what was live then shown.
    let best = -1;
    p.devices.forEach((d, slot) => {
      if (d.peak_step !== null && (best < 0 || d.peak_bytes > p.devices[best].peak_bytes)) best = slot;
    });
    const oom = firstOutOfMemory(p);
    const oomSlot = oom ? p.devices.findIndex((d) => d.index === oom.device) : -1;
    if (oomSlot >= 0) {
      if (oom.time_ns < state.t0 || oom.time_ns > state.t1) [state.t0, state.t1] = state.full;
      const d = p.devices[oomSlot];
      showLive(oomSlot, upperBound(d.time, oom.time_ns) - 1, oom.time_ns);
      document.getElementById('selection').prepend(postMortemBox(oom));
    } else if (best >= 0) {
      showLive(best, p.devices[best].peak_step, p.devices[best].time[p.devices[best].peak_step]);
    } else {
      document.getElementById('selection').replaceChildren(el('h2', {}, 'Live at an instant'),
        el('p', { class: 'muted' }, 'No device memory was allocated.'));
    }
    state.draw();
  }

  function startReport() {
    reportApi();
    state.stackBy = null;  // by category where the process has categories (showProcess)
    state.hiddenPhases = new Set();
    state.draw = () => {
      for (const chart of state.charts) drawReportChart(chart);
      showRangeLabel();
    };
    attachKeyboard((k) => {
      if (k === 'p' || k === 'P') { zoomToPeak(); return true; }
      if ((k === 'i' || k === 'I') && state.process && iterationRange(state.process)) {
        setView(...iterationRange(state.process));
        return true;
      }
      return false;
    });
    const picker = document.getElementById('process');
    data.processes.forEach((p, i) => picker.append(el('option', { value: String(i) }, p.label)));
    picker.addEventListener('change', () => showProcess(+picker.value));
    if (data.processes.length < 2) document.getElementById('process-picker').hidden = true;
    if (!data.processes.length) {
      document.getElementById('charts').append(el('p', {}, 'This trace holds no traced process.'));
    } else {
      showProcess(0);
    }
  }

  // ==== compare: runs on one time axis ======================================================
  // Each run's time 0 is the start of its first steady-state iteration (iteration 2: the
  // warm-up apart; iteration 1 when it has only one; its trace start without iterations), so
  // the steady state of one run lies over the other's whatever each did before (imports,
  // model building, warm-up caches).
  function startCompare() {
    document.getElementById('process-picker').hidden = true;
    document.getElementById('interaction-hint').textContent = 'Wheel or W/S, +/−: zoom. A/D or arrows: pan. ' +
      'Drag: select a range and zoom to it; Shift+drag: pan. Click: each run\'s memory then. ' +
      'Each pixel column shows the lowest and highest value of each run inside it, so no peak is hidden.';
    const runs = data.runs.map((r, i) => {
      const run = { ...r, color: seriesColor(i), hidden: false };
      if (!r.found) return run;
      const w = r.iterations.windows_ns;
      if (w.length >= 2) {
        run.align_ns = w[1][0];
        run.aligned_at = 'first steady-state iteration (2)';
      } else if (w.length === 1) {
        run.align_ns = w[0][0];
        run.aligned_at = 'first iteration';
      }
      const s = stepSeries(r.steps);
      for (let k = 0; k < s.time.length; k++) s.time[k] -= run.align_ns;  // aligned time
      run.series = s;
      run.iterationStarts = Float64Array.from(w, (x) => x[0] - run.align_ns);
      run.peakTime = r.peak_time_ns === null ? null : r.peak_time_ns - run.align_ns;
      return run;
    });
    state.runs = runs;
    const shown = runs.filter((r) => r.found);
    document.getElementById('title').textContent = '· compare ' + runs.map((r) => r.label).join(' vs ');

    const yMax = Math.max(1, ...shown.map((r) => r.peak_bytes)) * 1.08;
    let f0 = 0, f1 = 1;
    for (const r of shown) {
      f0 = Math.min(f0, -r.align_ns);
      f1 = Math.max(f1, r.duration_ns - r.align_ns, r.series.time.length ? r.series.time[r.series.time.length - 1] : 0);
    }
    state.full = [f0, f1];

    const canvas = el('canvas', { class: 'chart compare' });
    const legend = el('div', { id: 'compare-legend', class: 'legend-list' }, ...runs.map((r) => {
      const item = el('button', { type: 'button', class: 'legend-item', 'data-label': r.label, title: 'click: hide or show this run' },
        swatch(r.color), el('b', {}, r.label),
        r.found ? ` · ${r.process}, GPU ${r.device.index}${r.device.name ? ' (' + r.device.name + ')' : ''} · ` +
          `peak ${fmtBytes(r.peak_bytes)} at ${fmtTime(r.peakTime)} · t = 0 at its ${r.aligned_at}` +
          (r.iterations.count ? ` (${fmtTime(r.align_ns)} into the trace), ${r.iterations.count} iterations` : '')
          : ' · no device memory in this trace');
      item.addEventListener('click', () => {
        r.hidden = !r.hidden;
        item.classList.toggle('off', r.hidden);
        scheduleDraw();
      });
      return item;
    }));
    document.getElementById('charts').replaceChildren(el('div', { class: 'chart-box' },
      el('h2', {}, 'Device memory in use, aligned at the first steady-state iteration'),
      el('p', { class: 'muted' }, 'Each run: its process and device with the highest peak. ' +
        '▲ under the axis: iteration starts, one row per run.'), legend, canvas));
    const chart = { canvas, drawn: null };
    state.charts = [chart];
    const valueAt = (r, t) => {
      const k = upperBound(r.series.time, t) - 1;
      return k >= 0 ? r.series.bytes[k] : 0;
    };
    const iterationOf = (r, t) => {
      const k = upperBound(r.iterationStarts, t) - 1;
      return k >= 0 && t <= r.iterations.windows_ns[k][1] - r.align_ns ? k : -1;
    };
    const strip = 7 * shown.length;
    attachTimeInteraction(canvas, strip, (e) => inspect(e), (t) => [`t = ${fmtTime(t)} (aligned)`,
      ...shown.filter((r) => !r.hidden).map((r) => {
        const k = iterationOf(r, t);
        return `${r.label}: ${fmtBytes(valueAt(r, t))}` + (k >= 0 ? ` · iteration ${k + 1}` : '');
      }), 'click: compare the runs then']);
    attachKeyboard(null);

    // Click: each run's memory at that aligned instant, and its difference from the first.
    function inspect(e) {
      const g = geometry(canvas, strip), rect = canvas.getBoundingClientRect();
      const t = state.t0 + (e.clientX - rect.left - PAD.left) / g.plotW * (state.t1 - state.t0);
      state.inspectAt = t;
      scheduleDraw();
      const base = shown[0];
      const rows = shown.map((r) => {
        const v = valueAt(r, t), k = iterationOf(r, t), diff = v - valueAt(base, t);
        return { attrs: { 'data-label': r.label, 'data-bytes': v },
          cells: [swatch(r.color), r.label, num(fmtBytes(v), v), num(r === base ? '–' : fmtSignedBytes(diff), diff),
            k >= 0 ? `${k + 1}${k === 0 ? ' (warm-up)' : ''}` : '–', fmtTime(t + r.align_ns)] };
      });
      const panel = document.getElementById('selection');
      panel.hidden = false;
      panel.replaceChildren(el('h2', {}, `At t = ${fmtTime(t)} (aligned)`),
        table(['', 'run', 'in use', `− ${base.label}`, 'iteration', 'into its trace'], rows, { id: 'compare-inspect' }));
    }

    state.draw = () => {
      const { t0, t1 } = state;
      const { g, ctx } = beginChart(canvas, strip);
      const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
      const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
      clipToPlot(ctx, g);
      chart.drawn = runs.map((r) => (r.found && !r.hidden
        ? { label: r.label, max: drawSeries(ctx, g, r.series, t0, t1, yMax, r.color, null) } : null));
      ctx.restore();
      drawAxes(ctx, g, yMax, t0, t1, shown.length);
      shown.forEach((r, row) => { if (!r.hidden) drawIterationMarks(ctx, g, r.iterationStarts, t0, t1, r.color, row); });
      ctx.font = '11px system-ui, sans-serif';
      const placed = [];  // label boxes drawn so far: a label that would overlap one moves down
      for (const r of shown) {
        if (r.peakTime === null || r.hidden) continue;
        const px = x(r.peakTime), py = y(r.peak_bytes);
        if (px < PAD.left - 1 || px > PAD.left + g.plotW + 1) continue;
        ctx.fillStyle = r.color;
        ctx.beginPath();
        ctx.arc(px, py, 4, 0, 2 * Math.PI);
        ctx.fill();
        const label = `${r.label} peak ${fmtBytes(r.peak_bytes)}`;
        const tw = ctx.measureText(label).width;
        const lx = Math.min(px + 6, PAD.left + g.plotW - tw);
        let ly = Math.max(py - 6, PAD.top + 8);
        while (placed.some((b) => lx < b.x + b.w && b.x < lx + tw && Math.abs(ly - b.y) < 13)) ly += 13;
        placed.push({ x: lx, y: ly, w: tw });
        ctx.fillText(label, lx, ly);
      }
      if (state.inspectAt !== undefined && state.inspectAt >= t0 && state.inspectAt <= t1) {
        ctx.strokeStyle = '#111';
        ctx.setLineDash([4, 3]);
        ctx.beginPath();
        ctx.moveTo(x(state.inspectAt), PAD.top);
        ctx.lineTo(x(state.inspectAt), PAD.top + g.plotH);
        ctx.stroke();
        ctx.setLineDash([]);
      }
      showRangeLabel();
    };

    // Side by side: the figures `cumemtrace compare` prints, from the same report, and each
    // run's difference from the first.
    const base = runs[0];
    const metric = (name, f, fmt = fmtBytes, fmtDiff = fmtSignedBytes) => {
      const values = runs.map((r) => { const v = r.found ? f(r) : null; return v === undefined ? null : v; });
      const cells = [name, ...values.map((v) => (v === null ? '–' : num(fmt(v), v)))];
      for (let i = 1; i < runs.length; i++) {
        const a = values[0], b = values[i];
        cells.push(a === null || b === null ? '–' : num(fmtDiff(b - a) + (a ? ` (${b - a >= 0 ? '+' : '−'}${Math.abs(100 * (b - a) / a).toFixed(1)} %)` : ''), b - a));
      }
      return { attrs: { 'data-metric': name }, cells };
    };
    const signedTime = (v) => (v > 0 ? '+' : v < 0 ? '−' : '') + fmtTime(Math.abs(v));
    const signedInt = (v) => (v > 0 ? '+' : v < 0 ? '−' : '') + fmtInt(Math.abs(v));
    const cls = (c) => (r) => r.lifetime_at_peak.bytes_by_class[c] || 0;
    const hasIterations = (r) => Boolean(r.lifetime_at_peak);  // training phases: classes given
    const rows = [
      metric('peak', (r) => r.peak_bytes),
      metric('persistent at peak', (r) => (hasIterations(r) ? cls('persistent')(r) : null)),
      metric('born in forward, freed in backward, at peak', (r) => (hasIterations(r) ? cls('activation')(r) : null)),
      metric('gradient at peak', (r) => (hasIterations(r) ? cls('gradient')(r) : null)),
      metric('temporary at peak', (r) => (hasIterations(r) ? cls('temporary')(r) : null)),
      metric('activation memory (peak − persistent)', (r) => (hasIterations(r) ? r.lifetime_at_peak.activation_memory_bytes : null)),
      metric('iterations', (r) => r.iterations.count, fmtInt, signedInt),
      metric('iteration time (median, 2..N)', (r) => (r.iterations.duration_ns.count ? r.iterations.duration_ns.median : null), fmtTime, signedTime),
    ];
    const phases = [];
    for (const r of shown) for (const ph of r.iterations.phases) if (!phases.includes(ph.phase)) phases.push(ph.phase);
    for (const name of phases) {
      const dev = (r) => {
        const ph = r.iterations.phases.find((q) => q.phase === name);
        return ph && ph.devices.find((dv) => dv.index === r.device.index);
      };
      rows.push(metric(`${name}: rise above entry (median)`, (r) => { const d = dev(r); return d && d.peak_above_entry_bytes.count ? d.peak_above_entry_bytes.median : null; }, fmtSignedBytes));
      rows.push(metric(`${name}: time (median)`, (r) => { const ph = r.iterations.phases.find((q) => q.phase === name); return ph && ph.time_ns.count ? ph.time_ns.median : null; }, fmtTime, signedTime));
    }
    const host = document.getElementById('phases');
    host.replaceChildren(el('h2', {}, 'Side by side'),
      table(['', ...runs.map((r) => r.label), ...runs.slice(1).map((r) => `${r.label} − ${base.label}`)], rows, { id: 'compare-table' }),
      el('p', { class: 'muted hint' }, 'Lifetime classes need forward and backward phases: "–" for a run without. ' +
        'activation memory = peak − persistent: everything live at the peak that does not persist across ' +
        'iterations.'));
    for (const id of ['legend', 'selection', 'iterations', 'lifetimes', 'failed']) document.getElementById(id).hidden = true;

    api.compare = () => runs.map((r) => ({
      label: r.label, found: r.found, align_ns: r.align_ns, aligned_at: r.aligned_at,
      pid: r.pid, device: r.found ? r.device.index : null, peak_bytes: r.peak_bytes,
      peak_time: r.peakTime, points: r.found ? r.series.time.length : 0,
      iteration_starts: r.found ? Array.from(r.iterationStarts) : [],
    }));
    // The steady state first: from the earliest aligned steady-state start (0 for a run with
    // two iterations or more) to the end of the iterations; the warm-ups are one click away.
    const ends = shown.filter((r) => r.iterations.count).map((r) => r.iterations.windows_ns[r.iterations.count - 1][1] - r.align_ns);
    if (ends.length) {
      const starts = shown.filter((r) => r.iterations.count).map((r) => r.iterationStarts[Math.min(1, r.iterationStarts.length - 1)]);
      const a = Math.min(...starts), b = Math.max(...ends), pad = (b - a) * 0.03;
      [state.t0, state.t1] = [Math.max(f0, a - pad), Math.min(f1, b + pad)];
    } else {
      [state.t0, state.t1] = state.full;
    }
    state.draw();
  }

  // ==== sweep: memory against a parameter ===================================================
  function startSweep() {
    document.getElementById('process-picker').hidden = true;
    document.getElementById('reset-zoom').hidden = true;
    document.getElementById('interaction-hint').hidden = true;
    const points = data.points;
    const labels = [...new Set(points.map((p) => p.label))];
    const values = [...new Set(points.map((p) => p.value))];
    // Numbers are placed to scale; anything else (names, "fp16") evenly, in the given order.
    const numeric = values.every((v) => v.trim() !== '' && Number.isFinite(Number(v)));
    // Depth-like parameters (all positive, spanning 8x or more: 1, 2, 4 … 256) on a log axis.
    const nums = numeric ? values.map(Number) : [];
    const log = numeric && nums.every((v) => v > 0) && Math.max(...nums) / Math.min(...nums) >= 8;
    const position = (v) => (numeric ? (log ? Math.log10(Number(v)) : Number(v)) : values.indexOf(v));
    const xs = values.map(position);
    let x0 = Math.min(...xs), x1 = Math.max(...xs);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    const pad = (x1 - x0) * 0.05;
    x0 -= pad; x1 += pad;
    const METRICS = [
      { key: 'peak_bytes', title: 'peak' },
      { key: 'persistent_bytes', title: 'persistent at the peak' },
      { key: 'activation_memory_bytes', title: 'activation memory (peak − persistent)' },
    ];
    const parameter = data.parameter;
    document.getElementById('title').textContent = `· sweep of ${parameter}`;
    const legend = el('div', { id: 'sweep-legend', class: 'legend-list' }, ...labels.map((l, i) =>
      el('span', { class: 'legend-item' }, swatch(seriesColor(i)), l || '(unlabeled)')));
    const grid = el('div', { class: 'sweep-grid' });
    const charts = METRICS.map((m) => {
      const canvas = el('canvas', { class: 'chart sweep', 'data-metric': m.key });
      grid.append(el('div', { class: 'chart-box' }, el('h2', {}, `${m.title} vs ${parameter}` + (log ? ' (log axis)' : '')), canvas));
      const chart = { canvas, metric: m, marks: [] };
      // Hover: the point's figures; click: its run's page.
      const near = (e) => {
        const rect = canvas.getBoundingClientRect(), mx = e.clientX - rect.left, my = e.clientY - rect.top;
        let best = null, bd = 100;
        for (const mk of chart.marks) {
          const dd = (mk.x - mx) ** 2 + (mk.y - my) ** 2;
          if (dd < bd) { bd = dd; best = mk; }
        }
        return best;
      };
      canvas.addEventListener('mousemove', (e) => {
        const mk = near(e);
        canvas.style.cursor = mk && mk.p.page ? 'pointer' : 'default';
        if (!mk) { hideTooltip(); return; }
        showTooltip(e, [`${mk.p.label || '(unlabeled)'} · ${parameter} = ${mk.p.value}`,
          `${m.title}: ${fmtBytes(mk.p[m.key])}`, mk.p.exit_status === 0 ? 'exit 0' : `exit ${mk.p.exit_status} (failed)`,
          mk.p.page ? 'click: open its run' : 'no page for this run']);
      });
      canvas.addEventListener('mouseleave', hideTooltip);
      canvas.addEventListener('click', (e) => { const mk = near(e); if (mk && mk.p.page) window.location.href = mk.p.page; });
      return chart;
    });
    document.getElementById('charts').replaceChildren(legend, grid);
    const yMax = Math.max(1, ...points.filter((p) => p.found).map((p) => p.peak_bytes)) * 1.08;

    function drawSweepChart(chart) {
      const { canvas, metric } = chart;
      chart.marks = [];
      const { g, ctx } = beginChart(canvas, 0);
      const x = (v) => PAD.left + (v - x0) / (x1 - x0) * g.plotW;
      const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
      ctx.fillStyle = '#555';
      ctx.strokeStyle = '#ddd';
      ctx.lineWidth = 1;
      ctx.font = '11px system-ui, sans-serif';
      drawByteGrid(ctx, g, yMax, y);
      for (const v of values) {
        const px = x(position(v)), text = String(v), tw = ctx.measureText(text).width;
        ctx.fillText(text, px - tw / 2, PAD.top + g.plotH + 16);
        ctx.fillRect(px, PAD.top + g.plotH, 1, 4);
      }
      ctx.fillText(parameter, PAD.left + g.plotW - ctx.measureText(parameter).width, PAD.top + g.plotH + 30);
      labels.forEach((label, li) => {
        // Persistent and activation memory are null for a run without training phases.
        const mine = points.filter((p) => p.label === label && p.found && p[metric.key] !== null)
          .sort((a, b) => position(a.value) - position(b.value));
        ctx.strokeStyle = ctx.fillStyle = seriesColor(li);
        ctx.lineWidth = 2;
        ctx.beginPath();
        mine.forEach((p, k) => (k ? ctx.lineTo : ctx.moveTo).call(ctx, x(position(p.value)), y(p[metric.key])));
        ctx.stroke();
        for (const p of mine) {  // a hollow marker: the run exited with an error
          chart.marks.push({ x: x(position(p.value)), y: y(p[metric.key]), p });
          ctx.beginPath();
          ctx.arc(x(position(p.value)), y(p[metric.key]), 4, 0, 2 * Math.PI);
          if (p.exit_status === 0) ctx.fill(); else { ctx.fillStyle = '#fff'; ctx.fill(); ctx.stroke(); ctx.fillStyle = seriesColor(li); }
        }
      });
    }
    state.draw = () => charts.forEach(drawSweepChart);

    const rows = points.map((p) => ({
      attrs: { 'data-label': p.label, 'data-value': p.value, 'data-exit-status': p.exit_status,
        'data-peak-bytes': p.found ? p.peak_bytes : '', 'data-persistent-bytes': p.found && p.persistent_bytes !== null ? p.persistent_bytes : '',
        'data-activation-bytes': p.found && p.activation_memory_bytes !== null ? p.activation_memory_bytes : '' },
      cells: [p.label || '(unlabeled)', numeric ? num(p.value, Number(p.value)) : p.value,
        p.exit_status === 0 ? '0' : `${p.exit_status} (failed)`,
        ...(p.found ? [num(fmtBytes(p.peak_bytes), p.peak_bytes),
          p.persistent_bytes === null ? '–' : num(fmtBytes(p.persistent_bytes), p.persistent_bytes),
          p.activation_memory_bytes === null ? '–' : num(fmtBytes(p.activation_memory_bytes), p.activation_memory_bytes),
          fmtInt(p.iterations)] : ['no device memory', '–', '–', '–']),
        p.page ? el('a', { href: p.page, class: 'run-link' }, 'report') : '–'],
    }));
    document.getElementById('phases').replaceChildren(el('h2', {}, 'Points'),
      table(['label', parameter, 'exit', 'peak', 'persistent', 'activation memory', 'iterations', 'run'], rows, { id: 'sweep-table' }),
      el('p', { class: 'muted hint' }, 'persistent: live at the peak and alive across iterations (weights, ' +
        'optimizer state); activation memory = peak − persistent (activations, gradients, temporaries); both ' +
        '"–" for a run without forward and backward phases. Each ' +
        'point is the traced process and device with the highest peak of its run; click a point to open its run.'));
    for (const id of ['legend', 'selection', 'iterations', 'lifetimes', 'failed']) document.getElementById(id).hidden = true;
    api.sweep = () => ({
      parameter, numeric, log, labels,
      points: points.map((p) => ({ label: p.label, value: p.value, x: position(p.value), exit_status: p.exit_status,
        found: p.found, peak_bytes: p.peak_bytes, persistent_bytes: p.persistent_bytes,
        activation_memory_bytes: p.activation_memory_bytes, page: p.page })),
    });
    state.draw();
  }

  // ---- start ------------------------------------------------------------------------------
  document.getElementById('reset-zoom').addEventListener('click', () => setView(...state.full));
  window.addEventListener('resize', scheduleDraw);
  if (mode === 'compare') startCompare();
  else if (mode === 'sweep') startSweep();
  else startReport();
  api.firstRenderMs = performance.now();
  api.scriptMs = performance.now() - started;
  api.ready = true;
})();
