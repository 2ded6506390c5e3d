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
    const windows = (p.iterations && p.iterations.windows_ns) || [];
    p.iterationStarts = Float64Array.from(windows, (w) => w[0]);
    for (const d of p.devices) {
      d.series = stepSeries(d.steps);
      d.time = d.series.time;
      d.busy = column(d.kernel_busy.fraction, Float32Array);
      d.alloc = null;  // decoded at the first click (allocations): not needed to draw
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
      lifetime: a.lifetime_class ? column(a.lifetime_class, Uint8Array) : null,
    };
    return d.alloc;
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
  function fmtTime(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + ' s';
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + ' µs';
    return ns.toFixed(0) + ' ns';
  }
  function fmtInt(n) { return Number(n).toLocaleString('en-US'); }
  const KINDS = ['UNKNOWN', 'PAGEABLE', 'PINNED', 'DEVICE', 'ARRAY', 'MANAGED', 'DEVICE_STATIC',
    'MANAGED_STATIC'];
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
  function table(headers, rows, attrs) {
    const t = el('table', attrs);
    t.append(el('thead', {}, el('tr', {}, ...headers.map((h) => el('th', {}, h)))));
    const body = el('tbody');
    for (const r of rows) body.append(el('tr', r.attrs || {}, ...r.cells.map((c) => el('td', {}, c))));
    t.append(body);
    return t;
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
  function drawAxes(ctx, g, yMax, t0, t1) {
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
    ctx.fillStyle = '#555';
    ctx.strokeStyle = '#ddd';
    ctx.lineWidth = 1;
    ctx.font = '11px system-ui, sans-serif';
    const byteStep = niceBytesStep(yMax, 4);
    for (let b = 0; b <= yMax; b += byteStep) {
      ctx.beginPath();
      ctx.moveTo(PAD.left, y(b));
      ctx.lineTo(PAD.left + g.plotW, y(b));
      ctx.stroke();
      ctx.fillText(fmtBytes(b), 4, y(b) + 4);
    }
    const timeStep = niceStep(t1 - t0, 8);
    for (let t = Math.ceil(t0 / timeStep) * timeStep; t <= t1; t += timeStep) {
      ctx.fillText(fmtTime(t), x(t) - 18, PAD.top + g.plotH + g.strip + 16);
      ctx.fillRect(x(t), PAD.top + g.plotH, 1, 4);
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
  function attachTimeInteraction(canvas, strip, onClick) {
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
    canvas.addEventListener('mousedown', (e) => {
      drag = { x: e.clientX, t0: state.t0, t1: state.t1, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      const dt = dx / plotW() * (drag.t1 - drag.t0);
      setView(drag.t0 - dt, drag.t1 - dt);
    });
    window.addEventListener('mouseup', (e) => {
      if (drag && !drag.moved && e.target === canvas && onClick) onClick(e);
      drag = null;
    });
  }

  // ==== report: one trace ===================================================================
  function reportApi() {
    // Where the peak marker of device slot `slot` is, in client coordinates (for tests).
    api.peakPoint = (slot) => {
      const chart = state.charts[slot], d = chart.device;
      if (d.peak_step === null) return null;
      const g = geometry(chart.canvas, KERNEL_STRIP), rect = chart.canvas.getBoundingClientRect();
      const yMax = Math.max(d.peak_bytes, 1) * 1.08;
      return {
        x: rect.left + PAD.left + (d.time[d.peak_step] - state.t0) / (state.t1 - state.t0) * g.plotW,
        y: rect.top + PAD.top + g.plotH - d.peak_bytes / yMax * g.plotH,
      };
    };
    api.iterationStarts = () => Array.from(state.process.iterationStarts);
  }

  function fullRange(p) {
    let end = p.duration_ns;
    for (const d of p.devices) if (d.time.length) end = Math.max(end, d.time[d.time.length - 1]);
    return [0, Math.max(end, 1)];
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
      attachTimeInteraction(canvas, KERNEL_STRIP, (e) => select(chart, e));
    });
  }

  // Phase bands: per pixel column, the phase of the outermost range that covers most of it.
  // Neighbouring columns of one phase make one rectangle, so a whole run of ten thousand
  // iterations draws as many rectangles as there are visible phase changes, at most one per
  // pixel.
  function drawPhaseBands(ctx, g, p, t0, t1) {
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
      if (phase[c] !== -2) {
        const x0 = PAD.left + c * g.plotW / w, x1 = PAD.left + e * g.plotW / w;
        ctx.fillStyle = phaseColor(phase[c], 0.13);
        ctx.fillRect(x0, PAD.top, x1 - x0, g.plotH);
        if (x1 - x0 > 48 && x0 >= lastLabelRight - 0.5) {
          ctx.fillStyle = phaseColor(phase[c], 0.9);
          ctx.fillText(phaseName(p, phase[c]), x0 + 3, PAD.top + 12, x1 - x0 - 6);
          lastLabelRight = x1;
        }
      }
      c = e;
    }
  }

  function drawReportChart(chart) {
    const p = state.process, d = chart.device;
    const { g, ctx } = beginChart(chart.canvas, KERNEL_STRIP);
    const { t0, t1 } = state;
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
    const yMax = Math.max(d.peak_bytes, 1) * 1.08;
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;

    clipToPlot(ctx, g);
    drawPhaseBands(ctx, g, p, t0, t1);
    // Memory in use: per device pixel column, the lowest and highest value.
    chart.drawn = { max: drawSeries(ctx, g, d.series, t0, t1, yMax, 'rgb(29, 78, 216)', 'rgba(37, 99, 235, 0.25)') };
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

  function showLive(slot, step, t) {
    const p = state.process, d = p.devices[slot], a = allocationsOf(d);
    state.selection = { slot, step, device: d.index };
    scheduleDraw();
    const panel = document.getElementById('selection');
    panel.replaceChildren(el('h2', {}, 'Live at an instant'));
    if (step < 0) {
      panel.append(el('p', {}, `GPU ${d.index} at ${fmtTime(t)}: nothing allocated yet.`));
      return;
    }
    const classNames = p.lifetime_classes || [];
    const groups = { phase: new Map(), api: new Map(), library: new Map(), lifetime: new Map() };
    const live = [];
    let total = 0;
    for (let i = 0; i < a.n; i++) {
      if (a.birth[i] > step || (a.death[i] !== NO_STEP && a.death[i] <= step)) continue;
      const b = a.bytes[i];
      total += b;
      live.push(i);
      const keys = {
        phase: phaseName(p, a.phase[i]) + '\u0000' + KINDS[a.kind[i]] + '\u0000' + a.phase[i],
        api: p.strings[a.api[i]] || '(unknown)',
        library: p.strings[a.library[i]] || '(not unwound)',
        lifetime: a.lifetime ? (a.lifetime[i] === NO_LIFETIME_CLASS ? '(unknown)' : classNames[a.lifetime[i]]) : null,
      };
      for (const k of Object.keys(groups)) {
        if (keys[k] === null) continue;
        const m = groups[k], g = m.get(keys[k]) || { count: 0, bytes: 0 };
        g.count++; g.bytes += b;
        m.set(keys[k], g);
      }
    }
    const isPeak = step === d.peak_step;
    panel.append(el('p', {}, `GPU ${d.index} at ${fmtTime(d.time[step])}` +
      (isPeak ? ' (the peak)' : '') + `: ${fmtInt(live.length)} live allocations, ` +
      `${fmtBytes(total)} (${fmtInt(total)} B).`));
    const sorted = (m) => [...m.entries()].sort((x, y) => y[1].bytes - x[1].bytes);
    const phaseRows = sorted(groups.phase).map(([key, g]) => {
      const [name, kind, index] = key.split('\u0000');
      return {
        attrs: { 'data-phase': name, 'data-kind': kind, 'data-count': g.count, 'data-bytes': g.bytes },
        cells: [swatch(phaseColor(+index, 0.8)), name, kind, fmtInt(g.count), fmtBytes(g.bytes)],
      };
    });
    const originRows = (m, attr) => sorted(m).map(([name, g]) => ({
      attrs: { [attr]: name, 'data-count': g.count, 'data-bytes': g.bytes },
      cells: [name, fmtInt(g.count), fmtBytes(g.bytes)],
    }));
    const grid = el('div', { class: 'grid' },
      el('div', {}, el('h3', {}, 'by phase of origin and kind'),
        table(['', 'phase', 'kind', 'count', 'bytes'], phaseRows, { id: 'live-by-phase' })),
      a.lifetime ? el('div', {}, el('h3', {}, 'by lifetime class'),
        table(['class', 'count', 'bytes'], originRows(groups.lifetime, 'data-class'), { id: 'live-by-lifetime' }))
        : el('div', {}, el('h3', {}, 'by lifetime class'),
          el('p', { class: 'muted' }, 'not in this file (the analysis kept no lifetimes)')),
      el('div', {}, el('h3', {}, 'by API'),
        table(['API', 'count', 'bytes'], originRows(groups.api, 'data-api'), { id: 'live-by-api' })),
      el('div', {}, el('h3', {}, 'by library'),
        table(['library', 'count', 'bytes'], originRows(groups.library, 'data-library'),
          { id: 'live-by-library' })));
    panel.append(grid);
    live.sort((x, y) => a.bytes[y] - a.bytes[x] || a.birth[x] - a.birth[y]);
    const largest = live.slice(0, 20).map((i) => ({
      cells: [fmtBytes(a.bytes[i]), phaseName(p, a.phase[i]), KINDS[a.kind[i]],
        a.lifetime ? (classNames[a.lifetime[i]] || '(unknown)') : '',
        p.strings[a.api[i]] || '(unknown)', p.strings[a.library[i]] || '(not unwound)',
        fmtTime(d.time[a.birth[i]])],
    }));
    panel.append(el('h3', {}, `largest ${largest.length} of ${fmtInt(live.length)}`),
      table(['bytes', 'phase', 'kind', 'lifetime', 'API', 'library', 'allocated at'], largest));
  }

  // ---- tables -----------------------------------------------------------------------------
  function spreadCells(s, fmt) {
    if (!s || !s.count) return ['–', '–'];
    return [fmt(s.median), `${fmt(s.min)} … ${fmt(s.max)}`];
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
            ...spreadCells(ph.time_ns, fmtTime), ph.warmup_ns === null ? '–' : fmtTime(ph.warmup_ns),
            ...spreadCells(dv.peak_above_entry_bytes, fmtSignedBytes),
            dv.warmup_peak_above_entry_bytes === null ? '–' : fmtSignedBytes(dv.warmup_peak_above_entry_bytes),
            ...spreadCells(dv.net_change_bytes, fmtSignedBytes),
            dv.warmup_net_change_bytes === null ? '–' : fmtSignedBytes(dv.warmup_net_change_bytes)],
        });
      }
    }
    const t = table(['phase', 'device', 'iterations', 'time median', 'min … max', 'warm-up',
      'rise above entry median', 'min … max', 'warm-up', 'net change median', 'min … max', 'warm-up'],
    rows, { id: 'iteration-table' });
    host.append(t, el('p', { class: 'muted hint' }, 'Medians are lower medians (an observed value) ' +
      'over iterations 2..N; rise above entry = peak − memory at the phase\'s entry; net change = ' +
      'exit − entry, summed over the phase\'s occurrences in the iteration.'));
  }

  function buildLifetimeTable(p) {
    const host = document.getElementById('lifetimes');
    host.replaceChildren(el('h2', {}, 'Lifetime classes at the peak'));
    const rows = [];
    for (const d of p.devices) {
      const l = d.lifetime_at_peak;
      if (!l || d.peak_step === null) continue;
      const order = p.lifetime_classes || Object.keys(l.bytes_by_class);
      for (const c of order) {
        const bytes = l.bytes_by_class[c] || 0;
        rows.push({
          attrs: { 'data-device': d.index, 'data-class': c, 'data-bytes': bytes },
          cells: [`GPU ${d.index}`, c, fmtBytes(bytes), fmtInt(bytes),
            (d.peak_bytes ? (100 * bytes / d.peak_bytes).toFixed(1) : '0') + ' %'],
        });
      }
      rows.push({
        attrs: { 'data-device': d.index, 'data-class': 'activation memory', 'data-bytes': l.activation_memory_bytes },
        cells: [`GPU ${d.index}`, el('b', {}, 'activation memory (peak − persistent)'),
          fmtBytes(l.activation_memory_bytes), fmtInt(l.activation_memory_bytes),
          (d.peak_bytes ? (100 * l.activation_memory_bytes / d.peak_bytes).toFixed(1) : '0') + ' %'],
      });
    }
    if (!rows.length) {
      host.append(el('p', { class: 'muted' }, 'No device memory was allocated.'));
      return;
    }
    host.append(table(['device', 'class', 'bytes', 'exact', 'of the peak'], rows, { id: 'lifetime-table' }),
      el('p', { class: 'muted hint' }, 'persistent: alive at the start of an iteration it was not born in ' +
        '(weights, optimizer state); activation: born in forward, freed in backward; gradient: born in ' +
        'backward, alive at the optimizer; temporary: born and freed in one phase occurrence. docs/phases.md.'));
  }

  function buildReportTables() {
    const p = state.process;
    const legend = document.getElementById('legend');
    legend.replaceChildren(...p.phase_names.map((name, i) => el('span', { class: 'legend-item' },
      swatch(phaseColor(i, 0.8)), name)));

    const phases = document.getElementById('phases');
    phases.replaceChildren(el('h2', {}, 'Phases'));
    if (!p.phases.length) {
      phases.append(el('p', { class: 'muted' }, 'No NVTX ranges were recorded.'));
    } else {
      const rows = [];
      for (const ph of p.phases) {
        for (const d of ph.devices) {
          rows.push({ cells: [ph.name, `GPU ${d.index}`, fmtInt(ph.occurrences), fmtTime(ph.total_ns),
            fmtBytes(d.bytes_at_entry), fmtBytes(d.peak_bytes), '+' + fmtBytes(d.peak_above_entry_bytes),
            ph.occurrences > 1 ? '+' + fmtBytes(d.first_above_entry_bytes) : '-',
            d.steady_above_entry_bytes == null ? '-' : '+' + fmtBytes(d.steady_above_entry_bytes),
            fmtBytes(d.allocated_bytes), fmtBytes(d.freed_bytes), fmtInt(d.failed_allocations)] });
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
        p.failed_allocations.map((f) => ({ cells: [fmtTime(f.time_ns), `GPU ${f.device}`, f.api,
          fmtBytes(f.requested_bytes), f.error_name, f.phase === null ? '(no phase)' : f.phase,
          fmtBytes(f.device_in_use_bytes), fmtBytes(f.device_free_bytes)] })),
        { id: 'failed-table' }));
    }
  }

  function showProcess(index) {
    state.process = decodeProcess(data.processes[index]);
    state.selection = null;
    const p = state.process;
    document.getElementById('title').textContent = `· ${p.label}` +
      (p.allocator_mode ? ` · allocator ${p.allocator_mode}` : '') +
      (data.truncated ? ' · trace cut short' : '');
    buildCharts();
    buildReportTables();
    document.getElementById('selection').replaceChildren(el('h2', {}, 'Live at an instant'),
      el('p', { class: 'muted' }, 'Click a chart (the red dot is the peak).'));
    state.full = fullRange(p);
    [state.t0, state.t1] = state.full;
    state.draw();
  }

  function startReport() {
    reportApi();
    state.draw = () => {
      for (const chart of state.charts) drawReportChart(chart);
      showRangeLabel();
    };
    const picker = document.getElementById('process');
    data.processes.forEach((p, i) => picker.append(el('option', { value: String(i) }, p.label)));
    picker.addEventListener('change', () => showProcess(+picker.value));
    if (!data.processes.length) {
      document.getElementById('charts').append(el('p', {}, 'This trace holds no traced process.'));
    } else {
      showProcess(0);
    }
  }

  // ==== compare: runs on one time axis ======================================================
  // Each run's time 0 is its first iteration start (align_ns; its trace start without
  // iterations), so the steady state of one run lies over the other's whatever each did
  // before (imports, model building, warm-up caches).
  function startCompare() {
    document.getElementById('process-picker').hidden = true;
    document.getElementById('interaction-hint').textContent = 'Wheel: zoom at the pointer. Drag: pan. ' +
      'Each pixel column shows the lowest and highest value of each run inside it, so no peak is hidden.';
    const runs = data.runs.map((r, i) => {
      const run = { ...r, color: seriesColor(i) };
      if (!r.found) return run;
      const s = stepSeries(r.steps);
      for (let k = 0; k < s.time.length; k++) s.time[k] -= r.align_ns;  // aligned time
      run.series = s;
      run.iterationStarts = Float64Array.from(r.iterations.windows_ns, (w) => w[0] - r.align_ns);
      run.peakTime = r.peak_time_ns === null ? null : r.peak_time_ns - r.align_ns;
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
    const legend = el('div', { id: 'compare-legend', class: 'legend-list' }, ...runs.map((r) => el('div',
      { class: 'legend-item', 'data-label': r.label },
      swatch(r.color), el('b', {}, r.label),
      r.found ? ` · ${r.process}, GPU ${r.device.index}${r.device.name ? ' (' + r.device.name + ')' : ''} · ` +
        `peak ${fmtBytes(r.peak_bytes)} at ${fmtTime(r.peakTime)} · t = 0 at its ${r.aligned_at}` +
        (r.iterations.count ? ` (${fmtTime(r.align_ns)} into the trace), ${r.iterations.count} iterations` : '')
        : ' · no device memory in this trace')));
    document.getElementById('charts').replaceChildren(el('div', { class: 'chart-box' },
      el('h2', {}, 'Device memory in use, aligned at the first iteration start'),
      el('p', { class: 'muted' }, 'Each run: its process and device with the highest peak. ' +
        '▲ under the axis: iteration starts, one row per run.'), legend, canvas));
    const chart = { canvas, drawn: null };
    state.charts = [chart];
    attachTimeInteraction(canvas, 0, null);
    const strip = 7 * shown.length;

    state.draw = () => {
      const { t0, t1 } = state;
      const { g, ctx } = beginChart(canvas, strip);
      const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
      const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
      clipToPlot(ctx, g);
      chart.drawn = runs.map((r) => (r.found
        ? { label: r.label, max: drawSeries(ctx, g, r.series, t0, t1, yMax, r.color, null) } : null));
      ctx.restore();
      drawAxes(ctx, g, yMax, t0, t1);
      shown.forEach((r, row) => drawIterationMarks(ctx, g, r.iterationStarts, t0, t1, r.color, row));
      ctx.font = '11px system-ui, sans-serif';
      for (const r of shown) {
        if (r.peakTime === null) continue;
        const px = x(r.peakTime), py = y(r.peak_bytes);
        if (px < PAD.left - 1 || px > PAD.left + g.plotW + 1) continue;
        ctx.fillStyle = r.color;
        ctx.beginPath();
        ctx.arc(px, py, 4, 0, 2 * Math.PI);
        ctx.fill();
        const label = `${r.label} peak ${fmtBytes(r.peak_bytes)}`;
        const tw = ctx.measureText(label).width;
        ctx.fillText(label, Math.min(px + 6, PAD.left + g.plotW - tw), Math.max(py - 6, PAD.top - 4));
      }
      showRangeLabel();
    };

    // Side by side: the figures `cumemtrace compare` prints, from the same report.
    const metric = (name, f, fmt = fmtBytes) => ({
      attrs: { 'data-metric': name },
      cells: [name, ...runs.map((r) => { const v = r.found ? f(r) : null; return v === null || v === undefined ? '–' : fmt(v); })],
    });
    const cls = (c) => (r) => r.lifetime_at_peak.bytes_by_class[c] || 0;
    const rows = [
      metric('peak', (r) => r.peak_bytes),
      metric('persistent at peak', cls('persistent')),
      metric('activation memory (peak − persistent)', (r) => r.lifetime_at_peak.activation_memory_bytes),
      metric('activation at peak', cls('activation')),
      metric('gradient at peak', cls('gradient')),
      metric('temporary at peak', cls('temporary')),
      metric('iterations', (r) => r.iterations.count, fmtInt),
      metric('iteration time (median, 2..N)', (r) => (r.iterations.duration_ns.count ? r.iterations.duration_ns.median : null), fmtTime),
    ];
    const phases = [];
    for (const r of shown) for (const ph of r.iterations.phases) if (!phases.includes(ph.phase)) phases.push(ph.phase);
    for (const name of phases) {
      const dev = (r) => {
        const ph = r.iterations.phases.find((q) => q.phase === name);
        return ph && ph.devices.find((dv) => dv.index === r.device.index);
      };
      rows.push(metric(`${name}: rise above entry (median)`, (r) => { const d = dev(r); return d && d.peak_above_entry_bytes.count ? d.peak_above_entry_bytes.median : null; }, fmtSignedBytes));
      rows.push(metric(`${name}: time (median)`, (r) => { const ph = r.iterations.phases.find((q) => q.phase === name); return ph && ph.time_ns.count ? ph.time_ns.median : null; }, fmtTime));
    }
    const host = document.getElementById('phases');
    host.replaceChildren(el('h2', {}, 'Side by side'),
      table(['', ...runs.map((r) => r.label)], rows, { id: 'compare-table' }));
    for (const id of ['legend', 'selection', 'iterations', 'lifetimes', 'failed']) document.getElementById(id).hidden = true;

    api.compare = () => runs.map((r) => ({
      label: r.label, found: r.found, align_ns: r.align_ns, aligned_at: r.aligned_at,
      pid: r.pid, device: r.found ? r.device.index : null, peak_bytes: r.peak_bytes,
      peak_time: r.peakTime, points: r.found ? r.series.time.length : 0,
      iteration_starts: r.found ? Array.from(r.iterationStarts) : [],
    }));
    [state.t0, state.t1] = state.full;
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
    const position = (v) => (numeric ? Number(v) : values.indexOf(v));
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
      grid.append(el('div', { class: 'chart-box' }, el('h2', {}, `${m.title} vs ${parameter}`), canvas));
      return { canvas, metric: m };
    });
    document.getElementById('charts').replaceChildren(legend, grid);
    const yMax = Math.max(1, ...points.filter((p) => p.found).map((p) => p.peak_bytes)) * 1.08;

    function drawSweepChart({ canvas, metric }) {
      const { g, ctx } = beginChart(canvas, 0);
      const x = (v) => PAD.left + (v - x0) / (x1 - x0) * g.plotW;
      const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;
      ctx.fillStyle = '#555';
      ctx.strokeStyle = '#ddd';
      ctx.lineWidth = 1;
      ctx.font = '11px system-ui, sans-serif';
      const byteStep = niceBytesStep(yMax, 4);
      for (let b = 0; b <= yMax; b += byteStep) {
        ctx.beginPath(); ctx.moveTo(PAD.left, y(b)); ctx.lineTo(PAD.left + g.plotW, y(b)); ctx.stroke();
        ctx.fillText(fmtBytes(b), 4, y(b) + 4);
      }
      for (const v of values) {
        const px = x(position(v)), text = String(v), tw = ctx.measureText(text).width;
        ctx.fillText(text, px - tw / 2, PAD.top + g.plotH + 16);
        ctx.fillRect(px, PAD.top + g.plotH, 1, 4);
      }
      ctx.fillText(parameter, PAD.left + g.plotW - ctx.measureText(parameter).width, PAD.top + g.plotH + 30);
      labels.forEach((label, li) => {
        const mine = points.filter((p) => p.label === label && p.found)
          .sort((a, b) => position(a.value) - position(b.value));
        ctx.strokeStyle = ctx.fillStyle = seriesColor(li);
        ctx.lineWidth = 2;
        ctx.beginPath();
        mine.forEach((p, k) => (k ? ctx.lineTo : ctx.moveTo).call(ctx, x(position(p.value)), y(p[metric.key])));
        ctx.stroke();
        for (const p of mine) {  // a hollow marker: the run exited with an error
          ctx.beginPath();
          ctx.arc(x(position(p.value)), y(p[metric.key]), 4, 0, 2 * Math.PI);
          if (p.exit_status === 0) ctx.fill(); else { ctx.fillStyle = '#fff'; ctx.fill(); ctx.stroke(); ctx.fillStyle = seriesColor(li); }
        }
      });
    }
    state.draw = () => charts.forEach(drawSweepChart);

    const rows = points.map((p) => ({
      attrs: { 'data-label': p.label, 'data-value': p.value, 'data-exit-status': p.exit_status,
        'data-peak-bytes': p.found ? p.peak_bytes : '', 'data-persistent-bytes': p.found ? p.persistent_bytes : '',
        'data-activation-bytes': p.found ? p.activation_memory_bytes : '' },
      cells: [p.label || '(unlabeled)', p.value, p.exit_status === 0 ? '0' : `${p.exit_status} (failed)`,
        ...(p.found ? [fmtBytes(p.peak_bytes), fmtBytes(p.persistent_bytes), fmtBytes(p.activation_memory_bytes),
          fmtInt(p.iterations)] : ['no device memory', '–', '–', '–'])],
    }));
    document.getElementById('phases').replaceChildren(el('h2', {}, 'Points'),
      table(['label', parameter, 'exit', 'peak', 'persistent', 'activation', 'iterations'], rows, { id: 'sweep-table' }),
      el('p', { class: 'muted hint' }, 'persistent: live at the peak and alive across iterations (weights, ' +
        'optimizer state); activation memory = peak − persistent. Each point is the traced process and ' +
        'device with the highest peak of its run.'));
    for (const id of ['legend', 'selection', 'iterations', 'lifetimes', 'failed']) document.getElementById(id).hidden = true;
    api.sweep = () => ({
      parameter, numeric, labels,
      points: points.map((p) => ({ label: p.label, value: p.value, x: position(p.value), exit_status: p.exit_status,
        found: p.found, peak_bytes: p.peak_bytes, persistent_bytes: p.persistent_bytes,
        activation_memory_bytes: p.activation_memory_bytes })),
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
