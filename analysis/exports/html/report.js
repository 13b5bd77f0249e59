// memtrace's HTML report: draws the data memtrace embedded in this page (html_report.cpp). Nothing
// is fetched. window.memtrace exposes the state and a few actions, for people and for the tests.
(function () {
  'use strict';

  const data = JSON.parse(document.getElementById('memtrace-data').textContent);
  const $ = (id) => document.getElementById(id);
  const state = { process: 0, device: null, layer: 'reserved', window: null, at: null };
  let plot = null;
  let drawn = [];  // the allocations drawn now: {span, x0, x1, y0, y1} in canvas pixels
  let flameBoxes = [];
  let flameRoot = null;

  // ---- Formatting (bytes, duration and text: common.js) ---------------------------------------
  function colour(key) {
    let h = 0;
    for (let i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) >>> 0;
    return 'hsl(' + (h % 360) + ',55%,' + (55 + (h >> 9) % 15) + '%)';
  }
  function table(el, head, rows, numeric) {
    el.replaceChildren();
    const tr = document.createElement('tr');
    head.forEach((h, i) => { const th = text('th', h); if (numeric[i]) th.className = 'num'; tr.appendChild(th); });
    el.appendChild(tr);
    if (!rows.length) {
      const r = document.createElement('tr');
      r.className = 'empty';
      const td = text('td', 'none');
      td.colSpan = head.length;
      r.appendChild(td);
      el.appendChild(r);
    }
    for (const row of rows) {
      const r = document.createElement('tr');
      row.forEach((c, i) => { const td = text('td', c); if (numeric[i]) td.className = 'num'; r.appendChild(td); });
      el.appendChild(r);
    }
  }

  const proc = () => data.processes[state.process];
  const stackOf = (p, i) => p.stacks[i] || { site: '(no stack)', frames: [] };
  function deviceReport(p, device, layer) {
    return p.devices.find((d) => d.device === device && d.layer === layer);
  }

  // ---- Canvas coordinates --------------------------------------------------------------------
  // What was drawn is placed in CSS pixels at the width the canvas had then; the page may have
  // stretched it since (its CSS width is 100%): a point on screen maps through the ratio.
  function drawnPoint(canvas, clientX, clientY) {
    const r = canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    return { x: ((clientX - r.left) * canvas.width) / dpr / (r.width || 1),
      y: ((clientY - r.top) * canvas.height) / dpr / (r.height || 1) };
  }
  function clientPoint(canvas, x, y) {
    const r = canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    return { x: r.left + (x * dpr * r.width) / (canvas.width || 1), y: r.top + (y * dpr * r.height) / (canvas.height || 1) };
  }
  const canvasStale = (canvas) => {
    const shown = canvas.parentElement.clientWidth;
    return shown > 0 && Math.abs(canvas.width / (window.devicePixelRatio || 1) - shown) >= 1;
  };

  // ---- Tooltip -------------------------------------------------------------------------------
  const tip = $('tooltip');
  function showTip(ev, lines, stack) {
    tip.replaceChildren();
    for (const l of lines) tip.appendChild(text('div', l));
    if (stack) {
      const p = proc();
      for (const f of stack.frames) tip.appendChild(text('div', p.frames[f].label, p.frames[f].user ? 'user' : 'frame'));
      if (!stack.frames.length) tip.appendChild(text('div', '(no stack)', 'frame'));
    }
    tip.hidden = false;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = Math.max(0, x) + 'px';
    tip.style.top = Math.max(0, y) + 'px';
  }
  const hideTip = () => { tip.hidden = true; };

  // ---- Findings: the answers first --------------------------------------------------------------
  function findings(p) {
    const el = $('findings');
    el.replaceChildren();
    for (const f of p.findings || []) {
      const d = document.createElement('div');
      d.className = 'finding ' + f.kind;
      d.dataset.kind = f.kind;
      d.appendChild(text('b', f.title));
      d.appendChild(document.createTextNode(f.text));
      el.appendChild(d);
    }
  }

  // ---- Summary -------------------------------------------------------------------------------
  function summary(p) {
    const el = $('summary');
    el.replaceChildren();
    const card = (title, big, small, attrs) => {
      const c = document.createElement('div');
      c.className = 'card';
      c.appendChild(text('div', title, 'small'));
      if (big) {
        const b = text('div', big, 'big');
        for (const [k, v] of Object.entries(attrs || {})) b.setAttribute(k, v);
        c.appendChild(b);
      }
      if (small) c.appendChild(text('div', small, 'small'));
      el.appendChild(c);
    };
    for (const d of p.devices) {
      const where = 'at ' + duration(d.peak_ns) + (d.peak_step ? ', step ' + d.peak_step : '') +
        (d.peak_phase ? ', ' + d.peak_phase : '');
      card('device ' + d.device + ' ' + d.layer + ' peak', bytes(d.peak_bytes), where,
        { 'data-peak-bytes': d.peak_bytes, 'data-device': d.device, 'data-layer': d.layer, class: 'big peak' });
      const c = el.lastChild;
      c.classList.add('choice');
      c.title = 'Show this device and layer below';
      if (d.device === state.device && d.layer === state.layer) c.classList.add('chosen');
      c.addEventListener('click', () => select(d.device, d.layer));
      if (d.device_at_peak_bytes !== undefined)
        card('device ' + d.device + ' in use at the peak (nvidia-smi)', bytes(d.device_at_peak_bytes),
          bytes(d.device_at_peak_bytes - d.peak_bytes) + ' outside the reserved layer');
    }
    // The process last: how it ended, and how much was recorded (no headline of its own).
    card(p.heading, '', p.events.toLocaleString() + ' events over ' + duration(p.end_ns) + '; ' +
      (p.end_reason || '') + (p.exit_status !== undefined ? ' (exit status ' + p.exit_status + ')' : ''));
    if (!p.complete || p.problem) el.appendChild(text('div', 'Incomplete trace: ' + p.problem, 'card warning'));
    for (const n of p.notices || []) el.appendChild(text('div', n, 'card warning'));
  }

  // ---- Who held the device: at each device's reserved peak, every byte's owner ---------------
  function owners(p) {
    const el = $('owners');
    el.replaceChildren();
    const devices = p.devices.filter((d) => d.layer === 'reserved' && d.owners && d.owners.length);
    $('owners-section').hidden = !devices.length;
    for (const d of devices) {
      const total = d.owners.reduce((sum, o) => sum + o.bytes, 0) || 1;
      const heading = text('div', 'device ' + d.device + ': ' + bytes(total) + (d.device_at_peak_bytes !== undefined
        ? ' in use at the reserved peak (' + duration(d.peak_ns) + ')'
        : ' reserved at the peak (' + duration(d.peak_ns) + '; the device layer was not sampled)'), 'small');
      const bar = document.createElement('div');
      bar.className = 'owner-bar';
      bar.dataset.device = d.device;
      bar.dataset.total = total;
      const legend = document.createElement('div');
      legend.className = 'owner-legend';
      for (const o of d.owners) {
        const share = ((100 * o.bytes) / total).toFixed(1) + '%';
        const part = document.createElement('div');
        part.style.width = (100 * o.bytes) / total + '%';
        part.style.background = colour(o.owner);
        part.dataset.owner = o.owner;
        part.dataset.bytes = o.bytes;
        part.addEventListener('mousemove', (ev) => showTip(ev, [o.owner, bytes(o.bytes) + ' (' + share + ')'].concat(o.why ? [o.why] : [])));
        part.addEventListener('mouseleave', hideTip);
        bar.appendChild(part);
        const key = text('span', o.owner + ' ' + bytes(o.bytes) + ' (' + share + ')');
        key.style.setProperty('--swatch', colour(o.owner));
        legend.appendChild(key);
      }
      el.append(heading, bar, legend);
    }
  }

  // ---- Timeline ------------------------------------------------------------------------------
  function timeline(p) {
    const el = $('timeline');
    if (plot) { plot.destroy(); plot = null; }
    el.replaceChildren();
    const base = p.series.find((s) => s.layer === 'reserved' || s.layer === 'allocated') || p.series[0];
    if (!base) { el.appendChild(text('p', 'No device memory changed.', 'hint')); return; }
    const xs = base.t.map((t) => t / 1e9);
    // Every series on the first one's buckets (the heaps' free space has buckets of its own).
    // A sampled series ends at its last sample (the device layer is sampled after allocations:
    // past its last sample it knows nothing).
    const at = (s, t) => {
      let lo = 0, hi = s.t.length - 1;
      if (hi < 0 || t < s.t[0]) return null;
      if (s.layer === 'device in use (sampled)' && t > p.device_sampled_until_ns) return null;
      while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (s.t[mid] <= t) lo = mid; else hi = mid - 1; }
      return s.max[lo];
    };
    const series = [{}], values = [xs];
    for (const s of p.series) {
      const same = s === base || (s.layer !== 'device in use (sampled)' && s.t.length === base.t.length &&
        s.t[0] === base.t[0]);
      values.push(same ? s.max.slice() : base.t.map((t) => at(s, t)));
      series.push({
        label: 'device ' + s.device + ' ' + s.layer,
        stroke: s.layer === 'reserved' ? '#2f6fd6' : s.layer === 'allocated' ? '#d6642f'
          : s.layer === 'device in use (sampled)' ? '#1a7f37' : '#8a8a8a',
        dash: s.layer === 'free in heaps' ? [4, 4] : s.layer === 'device in use (sampled)' ? [8, 3] : undefined,
        width: 1.5,
        value: (u, v) => (v == null ? '-' : bytes(v)),
        paths: uPlot.paths.stepped({ align: 1 }),
      });
    }
    const marks = [];
    for (const d of p.devices) marks.push({ t: d.peak_ns / 1e9, colour: '#1a7f37', label: 'peak' });
    for (const o of p.ooms) marks.push({ t: o.t / 1e9, colour: '#c62828', label: 'out of memory' });
    const steps = p.steps.map((t) => t / 1e9);
    // Ranges nested at most two deep, a row each; a few thousand at most (the rest are steps).
    const ranges = p.ranges.filter((r) => r.depth <= 1).slice(0, 5000).map((r) => ({ ...r, row: r.depth }));
    const opts = {
      width: Math.max(400, el.clientWidth || 1000),
      height: 300,
      series,
      scales: { x: { time: false }, y: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
      axes: [
        { label: 'seconds', values: (u, vals) => vals.map((v) => +v.toFixed(6)) },
        { values: (u, vals) => vals.map(bytes), size: 80 },
      ],
      cursor: { drag: { x: true, y: false } },
      hooks: {
        drawClear: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          ctx.fillStyle = 'rgba(47,111,214,0.07)';
          for (let i = 0; i < steps.length; i += 2) {
            const x0 = u.valToPos(steps[i], 'x', true);
            const x1 = u.valToPos(i + 1 < steps.length ? steps[i + 1] : xs[xs.length - 1], 'x', true);
            ctx.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0), u.bbox.height);
          }
          ctx.restore();
        }],
        draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          for (const m of marks) {
            const x = u.valToPos(m.t, 'x', true);
            ctx.strokeStyle = m.colour;
            ctx.setLineDash([3, 3]);
            ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
          }
          // NVTX ranges (phases), outermost ones, as labelled bars along the top.
          ctx.setLineDash([]);
          ctx.font = '10px system-ui, sans-serif';
          for (const r of ranges) {
            const x0 = Math.max(u.bbox.left, u.valToPos(r.start / 1e9, 'x', true));
            const x1 = Math.min(u.bbox.left + u.bbox.width, u.valToPos(r.end / 1e9, 'x', true));
            if (x1 <= x0) continue;
            const y = u.bbox.top + r.row * 12 * devicePixelRatio;
            ctx.fillStyle = colour(r.name);
            ctx.globalAlpha = 0.35;
            ctx.fillRect(x0, y, Math.max(1, x1 - x0), 10 * devicePixelRatio);
            ctx.globalAlpha = 1;
            if (x1 - x0 > 40) { ctx.fillStyle = '#1d2330'; ctx.fillText(r.name, x0 + 2, y + 8 * devicePixelRatio); }
          }
          if (state.at !== null) {
            const x = u.valToPos(state.at / 1e9, 'x', true);
            ctx.strokeStyle = '#000';
            ctx.setLineDash([]);
            ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
          }
          ctx.restore();
        }],
        setScale: [(u, key) => {
          if (key !== 'x') return;
          state.window = [u.scales.x.min * 1e9, u.scales.x.max * 1e9];
          allocations(proc());
        }],
      },
    };
    plot = new uPlot(opts, values, el);
    if (state.window) plot.setScale('x', { min: state.window[0] / 1e9, max: state.window[1] / 1e9 });
    // The wheel zooms around the cursor; with shift (or sideways) it pans.
    plot.over.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const { min, max } = plot.scales.x, end = Math.max(p.end_ns / 1e9, max);
      let lo = min, hi = max;
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        const shift = (max - min) * 0.1 * Math.sign(ev.deltaX || ev.deltaY);
        lo = min + shift; hi = max + shift;
        if (lo < 0) { hi -= lo; lo = 0; }
        if (hi > end) { lo -= hi - end; hi = end; }
      } else {
        const at = plot.posToVal(ev.offsetX, 'x'), f = ev.deltaY < 0 ? 0.8 : 1.25;
        lo = Math.max(0, at - (at - min) * f); hi = Math.min(end, at + (max - at) * f);
      }
      if (hi > lo) plot.setScale('x', { min: lo, max: hi });
    }, { passive: false });
    // A click (not a drag) picks the moment the flame graph shows.
    let down = null;
    plot.over.addEventListener('mousedown', (ev) => { down = ev.clientX; });
    plot.over.addEventListener('mouseup', (ev) => {
      if (down !== null && Math.abs(ev.clientX - down) < 3) {
        const t = plot.posToVal(ev.offsetX, 'x') * 1e9;
        showAt(Math.max(0, t));
      }
      down = null;
    });
  }

  // ---- Allocations over time -----------------------------------------------------------------
  function layerSpans(p) {
    const layer = state.layer === 'allocated' ? 1 : 0;
    return p.largest.filter((a) => a[4] === layer && (state.device === null || a[3] === state.device));
  }
  // Each allocation gets the lowest place that is free for its whole life (first fit), as an
  // allocator would place it: one rectangle per allocation, stable while others come and go.
  function pack(spans, end) {
    const placed = [];
    let active = [];  // live ones, by their lowest place
    const order = spans.slice().sort((a, b) => a[0] - b[0]);
    for (const a of order) {
      const start = a[0];
      if (active.length && active.some((b) => b.end <= start)) active = active.filter((b) => b.end > start);
      let y = 0;
      for (const b of active) {
        if (b.y0 - y >= a[2]) break;
        y = Math.max(y, b.y1);
      }
      const item = { span: a, y0: y, y1: y + a[2], end: a[1] || end };
      let lo = 0, hi = active.length;  // kept in order by inserting in place
      while (lo < hi) { const mid = (lo + hi) >> 1; if (active[mid].y0 <= y) lo = mid + 1; else hi = mid; }
      active.splice(lo, 0, item);
      placed.push(item);
    }
    return placed;
  }
  let packed = null, packedKey = '';
  function allocations(p) {
    const el = $('allocations'), canvas = el.querySelector('canvas');
    const spans = layerSpans(p);
    const key = state.process + '/' + state.device + '/' + state.layer;
    if (key !== packedKey) { packed = pack(spans, p.end_ns); packedKey = key; }
    const width = el.clientWidth || 1000, height = 320, dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr; canvas.height = height * dpr;
    canvas.style.height = height + 'px';
    const ctx = canvas.getContext('2d');
    ctx.scale(dpr, dpr);
    ctx.clearRect(0, 0, width, height);
    const [t0, t1] = state.window || [0, Math.max(1, p.end_ns)];
    let top = 1;
    for (const it of packed) top = Math.max(top, it.y1);
    const left = 80, plotWidth = width - left - 10;
    const xOf = (t) => left + ((t - t0) / (t1 - t0)) * plotWidth;
    const yOf = (b) => height - 20 - (b / top) * (height - 30);
    drawn = [];
    for (const it of packed) {
      const a = it.span, end = a[1] || p.end_ns;
      if (end < t0 || a[0] > t1) continue;
      const x0 = Math.max(left, xOf(a[0])), x1 = Math.min(left + plotWidth, Math.max(xOf(end), x0 + 1));
      const y0 = yOf(it.y1), y1 = yOf(it.y0);
      ctx.fillStyle = colour(stackOf(p, a[5]).site);
      ctx.fillRect(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0));
      drawn.push({ span: a, x0, x1: Math.max(x1, x0 + 1), y0, y1: Math.max(y1, y0 + 1) });
    }
    ctx.fillStyle = '#5f6b7a';
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillText(bytes(top), 4, 14);
    ctx.fillText('0', 4, height - 22);
    ctx.fillText(duration(Math.round(t0)), left, height - 4);
    const endLabel = duration(Math.round(t1));
    ctx.fillText(endLabel, left + plotWidth - ctx.measureText(endLabel).width, height - 4);
    const kept = p.largest.length, seen = p.allocations_seen;
    $('allocations-title').textContent = 'Allocations over time (' + state.layer + ' layer' +
      (state.device !== null ? ', device ' + state.device : '') + ')';
    $('allocations-hint').textContent = (kept < seen ? 'The ' + kept.toLocaleString() + ' largest of ' +
      seen.toLocaleString() + ' allocations, one rectangle each; the smaller ones are in the totals above. '
      : 'Every allocation, one rectangle each, ') + 'placed where it fits for its whole life, coloured by site. ' +
      drawn.length.toLocaleString() + ' in view. Hover one for its stack.';
    el.dataset.inView = String(drawn.length);
  }
  function allocationAt(x, y) {
    for (let i = drawn.length - 1; i >= 0; i--) {
      const d = drawn[i];
      // Half a pixel either side: the mouse moves in whole pixels, a short allocation is one wide.
      if (x >= d.x0 - 0.5 && x <= d.x1 + 0.5 && y >= d.y0 && y <= d.y1) return d;
    }
    return null;
  }
  function describeAllocation(p, a) {
    const stack = stackOf(p, a[5]);
    return {
      lines: [stack.site, bytes(a[2]) + ' by ' + a[6] + ' on device ' + a[3] + ' (' + (a[4] ? 'allocated' : 'reserved') +
        ' layer), at 0x' + Number(a[7]).toString(16),
        'from ' + duration(a[0]) + (a[1] ? ' to ' + duration(a[1]) + ' (' + duration(a[1] - a[0]) + ')'
          : ', live at the end')],
      stack,
    };
  }

  // ---- Flame graph (an icicle: callers above callees) ----------------------------------------
  // ITEMS: [stack index, bytes, leaf name]; frames run outermost first from the root.
  function flameTree(p, items, rootName) {
    const root = { name: rootName, bytes: 0, children: new Map(), frame: null };
    for (const [stackIndex, n, leaf] of items) {
      root.bytes += n;
      let node = root;
      const frames = stackIndex === null ? [] : stackOf(p, stackIndex).frames.slice().reverse();
      // One box per function on a path, as flame graphs go (lines would split it into many).
      const path = frames.map((f) => ({ key: (p.frames[f].python ? 'p' : 'n') + p.frames[f].name, name: p.frames[f].name, frame: f }));
      if (leaf) path.push({ key: 'l' + leaf, name: leaf, frame: null });
      for (const step of path) {
        let child = node.children.get(step.key);
        if (!child) { child = { name: step.name, bytes: 0, children: new Map(), frame: step.frame }; node.children.set(step.key, child); }
        child.bytes += n;
        node = child;
      }
    }
    return root;
  }
  function flame(p, root, title, hint) {
    flameRoot = root;
    $('flame-title').textContent = title;
    $('flame-hint').textContent = hint;
    const el = $('flame'), canvas = el.querySelector('canvas');
    const rowHeight = 18;
    let depth = 0;
    (function measure(n, d) { depth = Math.max(depth, d); for (const c of n.children.values()) measure(c, d + 1); })(root, 1);
    const width = el.clientWidth || 1000, height = Math.max(60, depth * rowHeight + 4), dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr; canvas.height = height * dpr;
    canvas.style.height = height + 'px';
    const ctx = canvas.getContext('2d');
    ctx.scale(dpr, dpr);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px system-ui, sans-serif';
    flameBoxes = [];
    const total = Math.max(1, root.bytes);
    (function drawNode(n, x, d) {
      const w = (n.bytes / total) * width;
      if (w < 0.5) return;
      const y = d * rowHeight;
      const user = n.frame !== null && p.frames[n.frame].user;
      ctx.fillStyle = n === root ? '#d9dee7' : user ? colour(n.name) : '#c8ccd4';
      ctx.fillRect(x, y, Math.max(0.5, w - 1), rowHeight - 1);
      if (w > 40) {
        ctx.fillStyle = '#1d2330';
        const label = n.name + ' ' + bytes(n.bytes);
        ctx.save(); ctx.beginPath(); ctx.rect(x, y, w - 2, rowHeight); ctx.clip();
        ctx.fillText(label, x + 3, y + 13);
        ctx.restore();
      }
      flameBoxes.push({ node: n, x0: x, x1: x + w, y0: y, y1: y + rowHeight });
      let cx = x;
      const children = [...n.children.values()].sort((a, b) => b.bytes - a.bytes);
      for (const c of children) { drawNode(c, cx, d + 1); cx += (c.bytes / total) * width; }
    })(root, 0, 0);
    el.dataset.total = String(root.bytes);
  }
  function flameAtPeak(p) {
    const d = deviceReport(p, state.device, state.layer);
    if (!d) { flame(p, flameTree(p, [], 'nothing'), 'Live at the peak, by stack', ''); return; }
    const items = d.peak_sites.map((s) => [s.stack, s.bytes, s.api]);
    flame(p, flameTree(p, items, 'device ' + d.device + ' ' + d.layer + ' at its peak'),
      'Live at the peak, by stack (device ' + d.device + ', ' + d.layer + ' layer): ' + bytes(d.peak_bytes),
      'At ' + duration(d.peak_ns) + '. Your code in colour, libraries in grey. Click the timeline for another moment.');
  }
  // What was live at T: the allocations drawn one by one, and the rest of the layer in one box.
  function showAt(t) {
    const p = proc();
    state.at = t;
    if (plot) plot.redraw(false);
    const layer = state.layer === 'allocated' ? 1 : 0;
    const items = [];
    let kept = 0;
    for (const a of p.largest) {
      if (a[4] !== layer || (state.device !== null && a[3] !== state.device)) continue;
      if (a[0] <= t && (a[1] === 0 || a[1] > t)) { items.push([a[5], a[2], a[6]]); kept += a[2]; }
    }
    const s = p.series.find((x) => x.layer === state.layer && (state.device === null || x.device === state.device));
    let total = kept;
    if (s) {
      let i = 0;
      while (i + 1 < s.t.length && s.t[i + 1] <= t) i++;
      total = Math.max(kept, s.last[i]);
    }
    if (total > kept) items.push([null, total - kept, 'smaller allocations (not kept one by one)']);
    flame(p, flameTree(p, items, 'live at ' + duration(Math.round(t))),
      'Live at ' + duration(Math.round(t)) + ', by stack: about ' + bytes(total),
      'The total is the timeline\'s at that moment; allocations too small to be kept one by one are one box.');
  }

  // ---- Tables --------------------------------------------------------------------------------
  function tables(p) {
    const d = deviceReport(p, state.device, state.layer);
    // Sites as the text views group them (a helper's: one per calling function), named by their
    // largest stack's label.
    const bySite = new Map();
    for (const s of d ? d.peak_sites : []) {
      const stack = stackOf(p, s.stack), key = stack.group ? 'g' + stack.group : 's' + stack.site;
      const row = bySite.get(key) || { bytes: 0, count: 0, apis: new Set(), label: stack.site, largest: 0 };
      row.bytes += s.bytes; row.count += s.count; row.apis.add(s.api);
      if (s.bytes > row.largest) { row.largest = s.bytes; row.label = stack.site; }
      bySite.set(key, row);
    }
    const sites = [...bySite.values()].sort((a, b) => b.bytes - a.bytes).slice(0, 50);
    table($('sites'), ['site', 'live at the peak', 'allocations', 'API'],
      sites.map((r) => [r.label, bytes(r.bytes), r.count.toLocaleString(), [...r.apis].join(', ')]), [0, 1, 1, 0]);
    table($('growth'), ['site', 'device', 'layer', 'growth per step', 'from step', 'steps rising'],
      p.growth.map((g) => [g.site, g.device, g.layer, bytes(g.bytes_per_step), g.first_step,
        g.steps_rising + ' of ' + g.intervals]), [0, 1, 0, 1, 1, 1]);
    // One row per site (the page's stacks split a site by line), in the layer leaks are counted in:
    // PyTorch's tensors when recorded, its cache being no leak.
    const exitLayer = p.pytorch ? 'allocated' : 'reserved', exitRows = new Map();
    for (const dev of p.devices) {
      if (dev.layer !== exitLayer) continue;
      for (const s of dev.exit_sites) {
        const stack = stackOf(p, s.stack), key = (stack.group ? 'g' + stack.group : 's' + stack.site) + '/' + dev.device;
        const row = exitRows.get(key) || { site: stack.site, device: dev.device, bytes: 0, count: 0 };
        row.bytes += s.bytes; row.count += s.count;
        exitRows.set(key, row);
      }
    }
    const exit = [...exitRows.values()].sort((a, b) => b.bytes - a.bytes).slice(0, 50)
      .map((r) => [r.site, r.device, exitLayer, bytes(r.bytes), r.count]);
    table($('exit-sites'), ['site', 'device', 'layer', 'live at the end', 'allocations'], exit, [0, 1, 0, 1, 1]);
    table($('fragmentation'), ['when', 'time', 'device', 'reserved', 'allocated', 'free in heaps', 'largest free block',
      'fragmentation', 'request'],
    p.fragmentation.map((f) => [f.when, duration(f.t), f.device, bytes(f.reserved), bytes(f.allocated), bytes(f.free),
      bytes(f.largest_free), (100 * f.index).toFixed(0) + '%', f.request ? bytes(f.request) : '']),
    [0, 1, 1, 1, 1, 1, 1, 1, 1]);
    table($('ooms'), ['time', 'API', 'asked for', 'device', 'free then', 'device total'],
      p.ooms.map((o) => [duration(o.t), o.api, bytes(o.bytes), o.device, bytes(o.device_free), bytes(o.device_total)]),
      [1, 0, 1, 1, 1, 1]);
    const snaps = $('snapshots');
    snaps.replaceChildren();
    for (const s of p.snapshots) {
      const d = document.createElement('details');
      d.open = p.snapshots.length <= 2;
      d.appendChild(text('summary', 'Snapshot ' + s.file + (s.reason ? ' (' + s.reason + ')' : '')));
      if (s.diagnosis) d.appendChild(text('p', s.diagnosis, 'diagnosis'));
      d.appendChild(text('pre', s.text || ''));
      snaps.appendChild(d);
    }
    $('oom-section').hidden = !p.ooms.length && !p.snapshots.length;
    $('fragmentation-section').hidden = !p.fragmentation.length;
  }
  function ranks() {
    const rows = data.processes.map((p) => {
      const peaks = p.devices.filter((d) => d.layer === 'reserved').map((d) => d.peak_bytes);
      return [p.heading, bytes(Math.max(0, ...peaks)), p.events.toLocaleString()];
    });
    const all = data.processes.map((p) => Math.max(0, ...p.devices.filter((d) => d.layer === 'reserved').map((d) => d.peak_bytes)));
    if (all.length > 1) {
      const hi = Math.max(...all), lo = Math.min(...all);
      rows.push(['imbalance: largest peak minus smallest', bytes(hi - lo) + (lo ? ' (' + (hi / lo).toFixed(2) + 'x)' : ''), '']);
    }
    table($('ranks'), ['process', 'peak reserved', 'events'], rows, [0, 1, 1]);
    $('ranks-section').hidden = data.processes.length < 2;
  }

  // ---- Putting it together -------------------------------------------------------------------
  function choose(processIndex) {
    state.process = processIndex;
    const p = proc();
    const first = p.devices.find((d) => d.layer === 'allocated') || p.devices[0];
    state.device = first ? first.device : null;
    state.layer = first ? first.layer : 'reserved';
    // First in view: where memory changed, with a little either side (start-up before it and
    // shutdown after it are empty of changes).
    const changed = p.first_change_ns, settled = Math.max(p.last_change_ns || p.end_ns, changed);
    const margin = Math.max(1, (settled - changed) / 20);
    const lo = Math.max(0, changed - margin), hi = Math.min(p.end_ns, settled + margin);
    state.window = hi > lo && hi - lo < 0.9 * p.end_ns ? [lo, hi] : null;
    state.at = null;
    packedKey = '';
    for (const b of $('tabs').children) b.setAttribute('aria-selected', String(Number(b.dataset.index) === processIndex));
    render();
  }
  function render() {
    const p = proc();
    findings(p);
    summary(p);
    owners(p);
    timeline(p);
    allocations(p);
    if (state.at === null) flameAtPeak(p); else showAt(state.at);
    tables(p);
  }

  // Shows DEVICE's LAYER in the allocations, the flame graph and the tables.
  function select(device, layer) {
    state.device = device;
    state.layer = layer;
    state.at = null;
    packedKey = '';
    const p = proc();
    summary(p);
    allocations(p);
    flameAtPeak(p);
    tables(p);
    if (plot) plot.redraw(false);
  }

  function start() {
    $('version').textContent = data.version;
    const tabs = $('tabs');
    if (data.job) {  // one process of a job: its page is one of many, beside the job's
      const back = text('a', 'the job (' + data.job.processes + ' processes)');
      back.href = data.job.page;
      back.id = 'job-link';
      tabs.appendChild(back);
    }
    data.processes.forEach((p, i) => {
      const b = text('button', p.rank != null ? 'rank ' + p.rank : 'process ' + p.pid);
      b.title = p.heading;
      b.dataset.index = String(i);
      b.addEventListener('click', () => choose(i));
      tabs.appendChild(b);
    });
    const allocCanvas = $('allocations').querySelector('canvas');
    allocCanvas.addEventListener('mousemove', (ev) => {
      const at = drawnPoint(allocCanvas, ev.clientX, ev.clientY);
      const hit = allocationAt(at.x, at.y);
      if (!hit) return hideTip();
      const d = describeAllocation(proc(), hit.span);
      showTip(ev, d.lines, d.stack);
    });
    allocCanvas.addEventListener('mouseleave', hideTip);
    const flameCanvas = $('flame').querySelector('canvas');
    flameCanvas.addEventListener('mousemove', (ev) => {
      const { x, y } = drawnPoint(flameCanvas, ev.clientX, ev.clientY);
      const hit = flameBoxes.find((b) => x >= b.x0 && x < b.x1 && y >= b.y0 && y < b.y1);
      if (!hit) return hideTip();
      const p = proc(), share = flameRoot.bytes ? (100 * hit.node.bytes) / flameRoot.bytes : 0;
      showTip(ev, [hit.node.frame !== null ? p.frames[hit.node.frame].label : hit.node.name,
        bytes(hit.node.bytes) + ' (' + share.toFixed(1) + '%)']);
    });
    flameCanvas.addEventListener('mouseleave', hideTip);
    let resizing = null;
    window.addEventListener('resize', () => { clearTimeout(resizing); resizing = setTimeout(render, 100); });
    // The page can narrow without the window resizing (a scroll bar appears as the tables fill):
    // the canvases are drawn again at their new width rather than left stretched.
    new ResizeObserver(() => {
      const p = data.processes.length ? proc() : null;
      if (!p) return;
      if (canvasStale(allocCanvas)) allocations(p);
      if (canvasStale(flameCanvas)) { if (state.at === null) flameAtPeak(p); else showAt(state.at); }
    }).observe(document.body);
    ranks();
    if (data.processes.length) choose(0);
    else $('summary').appendChild(text('p', 'No process in this report.', 'hint'));
  }

  window.memtrace = {
    data, state,
    // Zooms the timeline and the allocations to [T0, T1] ns.
    zoom(t0, t1) { if (plot) plot.setScale('x', { min: t0 / 1e9, max: t1 / 1e9 }); },
    showAt,
    choose,
    select,
    flameTotal: () => (flameRoot ? flameRoot.bytes : 0),
    // The allocations in view: [start, end, bytes, device, layer, stack, api, address], and where
    // each one is drawn, in the page's coordinates: its centre (x, y) and its width and height.
    inView() {
      const canvas = $('allocations').querySelector('canvas');
      return drawn.map((d) => {
        const a = clientPoint(canvas, d.x0, d.y0), z = clientPoint(canvas, d.x1, d.y1);
        return { span: d.span, x: (a.x + z.x) / 2, y: (a.y + z.y) / 2, width: z.x - a.x, height: z.y - a.y };
      });
    },
  };
  start();
  window.memtrace.ready = true;  // drawn
})();
