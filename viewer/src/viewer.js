// cumemtrace viewer: draws the data that WriteViewerHtml (collector/engine/export_html.cc)
// embeds in #cumemtrace-data ("cumemtrace.viewer/1", docs/exports.md). No network, no
// libraries: the page must open from disk, anywhere, years from now.
'use strict';
(function () {
  const started = performance.now();
  const data = JSON.parse(document.getElementById('cumemtrace-data').textContent);

  // ---- data -------------------------------------------------------------------------------
  // Big columns are base64 typed arrays; decoding is one pass and the views share the bytes.
  function column(b64, Type) {
    const text = atob(b64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return new Type(bytes.buffer);
  }
  const NO_STEP = 0xffffffff;
  function decodeProcess(p) {
    if (p.decoded) return p;
    const r = p.ranges;
    p.range = {
      n: r.n, start: column(r.start_ns, Float64Array), end: column(r.end_ns, Float64Array),
      phase: column(r.phase, Int32Array), depth: column(r.depth, Uint8Array),
    };
    for (const d of p.devices) {
      d.time = column(d.steps.time_ns, Float64Array);
      d.bytes = column(d.steps.bytes, Float64Array);
      const a = d.allocations;
      d.alloc = {
        n: a.n, birth: column(a.birth_step, Uint32Array), death: column(a.death_step, Uint32Array),
        bytes: column(a.bytes, Float64Array), phase: column(a.phase, Int32Array),
        api: column(a.api, Uint32Array), library: column(a.library, Uint32Array),
        kind: column(a.kind, Uint8Array),
      };
      d.busy = column(d.kernel_busy.fraction, Float32Array);
    }
    p.decoded = true;
    return p;
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

  // ---- search -----------------------------------------------------------------------------
  function lowerBound(a, x) {  // first index with a[i] >= x
    let lo = 0, hi = a.length;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  function upperBound(a, x) {  // first index with a[i] > x
    let lo = 0, hi = a.length;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] <= x) lo = m + 1; else hi = m; }
    return lo;
  }

  // Min and max of a step series over each of `w` columns of [t0, t1]. A column holds the
  // value carried in at its left edge and every value set inside it, so a peak that lasts a
  // nanosecond still shows.
  function downsample(time, bytes, t0, t1, w) {
    const min = new Float64Array(w), max = new Float64Array(w);
    let i = lowerBound(time, t0);
    let cur = i > 0 ? bytes[i - 1] : 0;
    let lo = cur, hi = cur, col = 0;
    const scale = w / (t1 - t0);
    for (; i < time.length && time[i] <= t1; i++) {
      const c = Math.min(w - 1, Math.floor((time[i] - t0) * scale));
      while (col < c) { min[col] = lo; max[col] = hi; col++; lo = hi = cur; }
      cur = bytes[i];
      if (cur < lo) lo = cur;
      if (cur > hi) hi = cur;
    }
    while (col < w) { min[col] = lo; max[col] = hi; col++; lo = hi = cur; }
    return { min, max };
  }

  // ---- state ------------------------------------------------------------------------------
  const state = { process: null, t0: 0, t1: 1, selection: null, charts: [] };
  const api = {
    ready: false, firstRenderMs: null,
    view: () => ({ t0: state.t0, t1: state.t1 }),
    selection: () => state.selection,
    setView: (t0, t1) => setView(t0, t1),
    // Where the peak marker of device slot `slot` is, in client coordinates (for tests).
    peakPoint: (slot) => {
      const chart = state.charts[slot], d = chart.device;
      if (d.peak_step === null) return null;
      const g = geometry(chart), rect = chart.canvas.getBoundingClientRect();
      const yMax = Math.max(d.peak_bytes, 1) * 1.08;
      return {
        x: rect.left + PAD.left + (d.time[d.peak_step] - state.t0) / (state.t1 - state.t0) * g.plotW,
        y: rect.top + PAD.top + g.plotH - d.peak_bytes / yMax * g.plotH,
      };
    },
  };
  window.cumemtraceViewer = api;

  function fullRange(p) {
    let end = p.duration_ns;
    for (const d of p.devices) if (d.time.length) end = Math.max(end, d.time[d.time.length - 1]);
    return [0, Math.max(end, 1)];
  }
  function setView(t0, t1) {
    const [f0, f1] = fullRange(state.process);
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
    requestAnimationFrame(() => { drawPending = false; drawAll(); });
  }

  // ---- charts -----------------------------------------------------------------------------
  const PAD = { left: 70, right: 12, top: 18, bottom: 34 };
  const KERNEL_STRIP = 10;

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
      const canvas = el('canvas', { class: 'chart', 'data-device': String(d.index) });
      const box = el('div', { class: 'chart-box' },
        el('h2', {}, title), el('p', { class: 'muted' }, peak,
          d.kernel_count ? ` · ${fmtInt(d.kernel_count)} kernels (strip: share of time busy)` : ''),
        canvas);
      host.append(box);
      const chart = { canvas, device: d, slot };
      state.charts.push(chart);
      attachInteraction(chart);
    });
  }

  function geometry(chart) {
    const c = chart.canvas;
    const dpr = window.devicePixelRatio || 1;
    const cssW = c.clientWidth, cssH = c.clientHeight;
    if (c.width !== Math.round(cssW * dpr) || c.height !== Math.round(cssH * dpr)) {
      c.width = Math.round(cssW * dpr);
      c.height = Math.round(cssH * dpr);
    }
    const plotW = Math.max(10, cssW - PAD.left - PAD.right);
    const plotH = Math.max(10, cssH - PAD.top - PAD.bottom - KERNEL_STRIP);
    return { dpr, cssW, cssH, plotW, plotH };
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

  function drawChart(chart) {
    const p = state.process, d = chart.device;
    const g = geometry(chart);
    const ctx = chart.canvas.getContext('2d');
    ctx.setTransform(g.dpr, 0, 0, g.dpr, 0, 0);
    ctx.clearRect(0, 0, g.cssW, g.cssH);
    const { t0, t1 } = state;
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * g.plotW;
    const yMax = Math.max(d.peak_bytes, 1) * 1.08;
    const y = (b) => PAD.top + g.plotH - b / yMax * g.plotH;

    // Phase bands: the outermost NVTX ranges of each thread.
    const r = p.range;
    ctx.save();
    ctx.beginPath();
    ctx.rect(PAD.left, PAD.top, g.plotW, g.plotH);
    ctx.clip();
    let lastRight = -Infinity;
    for (let i = 0; i < r.n; i++) {
      if (r.depth[i] !== 0 || r.end[i] < t0 || r.start[i] > t1) continue;
      const x0 = x(r.start[i]), x1 = Math.max(x(r.end[i]), x0 + 1);
      ctx.fillStyle = phaseColor(r.phase[i], 0.13);
      ctx.fillRect(x0, PAD.top, x1 - x0, g.plotH);
      if (x1 - x0 > 48 && x0 > lastRight) {
        ctx.fillStyle = phaseColor(r.phase[i], 0.9);
        ctx.font = '11px system-ui, sans-serif';
        ctx.fillText(phaseName(p, r.phase[i]), Math.max(x0, PAD.left) + 3, PAD.top + 12, x1 - x0 - 6);
        lastRight = x1;
      }
    }

    // Memory in use: per device pixel column, the lowest and highest value.
    const w = Math.max(1, Math.round(g.plotW * g.dpr));
    const { min, max } = downsample(d.time, d.bytes, t0, t1, w);
    const colX = (c) => PAD.left + (c + 0.5) / g.dpr;
    ctx.beginPath();
    ctx.moveTo(colX(0), y(0));
    for (let c = 0; c < w; c++) ctx.lineTo(colX(c), y(max[c]));
    ctx.lineTo(colX(w - 1), y(0));
    ctx.closePath();
    ctx.fillStyle = 'rgba(37, 99, 235, 0.25)';
    ctx.fill();
    ctx.beginPath();
    for (let c = 0; c < w; c++) {
      ctx.moveTo(colX(c), y(min[c]));
      ctx.lineTo(colX(c), y(max[c]) - 0.5);
    }
    ctx.lineWidth = 1 / g.dpr;
    ctx.strokeStyle = 'rgb(29, 78, 216)';
    ctx.stroke();
    ctx.restore();

    // Axes.
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
      ctx.fillText(fmtTime(t), x(t) - 18, PAD.top + g.plotH + KERNEL_STRIP + 16);
      ctx.fillRect(x(t), PAD.top + g.plotH, 1, 4);
    }

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

  function drawAll() {
    for (const chart of state.charts) drawChart(chart);
    document.getElementById('range').textContent =
      `showing ${fmtTime(state.t0)} – ${fmtTime(state.t1)} (${fmtTime(state.t1 - state.t0)})`;
  }

  function attachInteraction(chart) {
    const c = chart.canvas;
    const timeAt = (clientX) => {
      const g = geometry(chart);
      const rect = c.getBoundingClientRect();
      return state.t0 + (clientX - rect.left - PAD.left) / g.plotW * (state.t1 - state.t0);
    };
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const t = timeAt(e.clientX);
      const factor = Math.pow(1.0015, e.deltaY);
      setView(t - (t - state.t0) * factor, t + (state.t1 - t) * factor);
    }, { passive: false });
    let drag = null;
    c.addEventListener('mousedown', (e) => {
      drag = { x: e.clientX, t0: state.t0, t1: state.t1, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      const g = geometry(chart);
      const dt = dx / g.plotW * (drag.t1 - drag.t0);
      setView(drag.t0 - dt, drag.t1 - dt);
    });
    window.addEventListener('mouseup', (e) => {
      if (drag && !drag.moved && e.target === c) select(chart, e);
      drag = null;
    });
  }

  // ---- live set at an instant -------------------------------------------------------------
  function select(chart, e) {
    const d = chart.device;
    const g = geometry(chart);
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
    const p = state.process, d = p.devices[slot], a = d.alloc;
    state.selection = { slot, step, device: d.index };
    scheduleDraw();
    const panel = document.getElementById('selection');
    panel.replaceChildren(el('h2', {}, 'Live at an instant'));
    if (step < 0) {
      panel.append(el('p', {}, `GPU ${d.index} at ${fmtTime(t)}: nothing allocated yet.`));
      return;
    }
    const groups = { phase: new Map(), api: new Map(), library: new Map() };
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
      };
      for (const k of Object.keys(groups)) {
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
        cells: [el('span', { class: 'swatch', style: `background:${phaseColor(+index, 0.8)}` }), name,
          kind, fmtInt(g.count), fmtBytes(g.bytes)],
      };
    });
    const originRows = (m, attr) => sorted(m).map(([name, g]) => ({
      attrs: { [attr]: name, 'data-count': g.count, 'data-bytes': g.bytes },
      cells: [name, fmtInt(g.count), fmtBytes(g.bytes)],
    }));
    const grid = el('div', { class: 'grid' },
      el('div', {}, el('h3', {}, 'by phase of origin and kind'),
        table(['', 'phase', 'kind', 'count', 'bytes'], phaseRows, { id: 'live-by-phase' })),
      el('div', {}, el('h3', {}, 'by API'),
        table(['API', 'count', 'bytes'], originRows(groups.api, 'data-api'), { id: 'live-by-api' })),
      el('div', {}, el('h3', {}, 'by library'),
        table(['library', 'count', 'bytes'], originRows(groups.library, 'data-library'),
          { id: 'live-by-library' })));
    panel.append(grid);
    live.sort((x, y) => a.bytes[y] - a.bytes[x] || a.birth[x] - a.birth[y]);
    const largest = live.slice(0, 20).map((i) => ({
      cells: [fmtBytes(a.bytes[i]), phaseName(p, a.phase[i]), KINDS[a.kind[i]],
        p.strings[a.api[i]] || '(unknown)', p.strings[a.library[i]] || '(not unwound)',
        fmtTime(d.time[a.birth[i]])],
    }));
    panel.append(el('h3', {}, `largest ${largest.length} of ${fmtInt(live.length)}`),
      table(['bytes', 'phase', 'kind', 'API', 'library', 'allocated at'], largest));
  }

  // ---- tables -----------------------------------------------------------------------------
  function buildTables() {
    const p = state.process;
    const legend = document.getElementById('legend');
    legend.replaceChildren(...p.phase_names.map((name, i) => el('span', { class: 'legend-item' },
      el('span', { class: 'swatch', style: `background:${phaseColor(i, 0.8)}` }), name)));

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
            fmtBytes(d.allocated_bytes), fmtBytes(d.freed_bytes), fmtInt(d.failed_allocations)] });
        }
      }
      phases.append(table(['phase', 'device', 'n', 'time', 'at entry', 'peak', 'above entry',
        'allocated', 'freed', 'failed'], rows, { id: 'phase-table' }));
    }

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

  // ---- start ------------------------------------------------------------------------------
  function showProcess(index) {
    state.process = decodeProcess(data.processes[index]);
    state.selection = null;
    const p = state.process;
    document.getElementById('title').textContent = `· ${p.label}` +
      (p.allocator_mode ? ` · allocator ${p.allocator_mode}` : '') +
      (data.truncated ? ' · trace cut short' : '');
    buildCharts();
    buildTables();
    document.getElementById('selection').replaceChildren(el('h2', {}, 'Live at an instant'),
      el('p', { class: 'muted' }, 'Click a chart (the red dot is the peak).'));
    const [f0, f1] = fullRange(p);
    state.t0 = f0;
    state.t1 = f1;
    drawAll();
  }

  const select_ = document.getElementById('process');
  data.processes.forEach((p, i) => select_.append(el('option', { value: String(i) }, p.label)));
  select_.addEventListener('change', () => showProcess(+select_.value));
  document.getElementById('reset-zoom').addEventListener('click', () => {
    const [f0, f1] = fullRange(state.process);
    setView(f0, f1);
  });
  window.addEventListener('resize', scheduleDraw);
  if (!data.processes.length) {
    document.getElementById('charts').append(el('p', {}, 'This trace holds no traced process.'));
  } else {
    showProcess(0);
  }
  api.firstRenderMs = performance.now();
  api.scriptMs = performance.now() - started;
  api.ready = true;
})();
