// memtrace's job page: draws the data memtrace embedded (html_job.cpp): a heat map of every
// process's memory over time, the peaks with the imbalance, the outliers first, each process
// linked to its own page. Nothing is fetched. window.memtrace exposes the state, for the tests.
(function () {
  'use strict';

  const data = JSON.parse(document.getElementById('memtrace-data').textContent);
  const $ = (id) => document.getElementById(id);
  const processes = data.processes;

  // bytes, duration and text: common.js
  const name = (p) => (p.rank != null ? 'rank ' + p.rank : 'process ' + p.pid);

  // ---- The figures -------------------------------------------------------------------------
  const peaks = processes.map((p) => p.peak_bytes);
  const sorted = peaks.slice().sort((a, b) => a - b);
  const median = sorted.length ? (sorted.length % 2 ? sorted[(sorted.length - 1) / 2]
    : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2) : 0;
  const withPeak = peaks.filter((b) => b > 0);
  const mean = withPeak.length ? withPeak.reduce((a, b) => a + b, 0) / withPeak.length : 0;
  const largest = peaks.length ? peaks.indexOf(Math.max(...peaks)) : -1;
  const smallest = peaks.length ? peaks.indexOf(Math.min(...peaks)) : -1;
  // The outliers first: farthest from the median, then in rank order.
  const order = processes.map((_, i) => i).sort((a, b) =>
    Math.abs(peaks[b] - median) - Math.abs(peaks[a] - median) || a - b);

  function card(big, small) {
    const c = document.createElement('div');
    c.className = 'card';
    c.appendChild(text('div', big, 'big'));
    c.appendChild(text('div', small, 'small'));
    return c;
  }
  function summary() {
    const s = $('summary');
    s.replaceChildren();
    $('job-title').textContent = processes.length + ' processes';
    if (largest < 0) return;
    s.appendChild(card(bytes(peaks[largest]), 'the largest peak: ' + name(processes[largest])));
    s.appendChild(card(bytes(peaks[smallest]), 'the smallest peak: ' + name(processes[smallest])));
    s.appendChild(card(bytes(median), 'the median peak'));
    const imbalance = mean ? peaks[largest] / mean : 1;
    const c = card(imbalance.toFixed(2) + 'x', 'imbalance: the largest peak over the mean (' + bytes(mean) + ')');
    c.id = 'imbalance';
    c.dataset.imbalance = String(imbalance);
    s.appendChild(c);
  }

  // ---- The heat map ------------------------------------------------------------------------
  const rows = processes.map((p) => Uint8Array.from(atob(p.heat), (ch) => ch.charCodeAt(0)));
  // Dark blue through green to yellow, as heat maps go; 0 is the page's band colour.
  const stops = [[243, 245, 249], [60, 80, 160], [40, 150, 140], [120, 200, 80], [250, 220, 40]];
  function colour(v) {
    if (v === 0) return stops[0];
    const x = (v / 255) * (stops.length - 2), i = Math.min(stops.length - 3, Math.floor(x)), f = x - i;
    return stops[i + 1].map((c, k) => Math.round(c + (stops[i + 2][k] - c) * f));
  }
  let rowHeight = 1;
  function heat() {
    const canvas = $('heat').querySelector('canvas');
    const width = Math.max(200, Math.floor($('heat').clientWidth));
    rowHeight = Math.max(1, Math.min(14, Math.floor(640 / Math.max(1, processes.length))));
    const height = Math.max(1, rowHeight * processes.length);
    canvas.width = width;
    canvas.height = height;
    canvas.style.height = height + 'px';
    const ctx = canvas.getContext('2d');
    const image = ctx.createImageData(width, height);
    processes.forEach((p, r) => {
      // Grey before it began and after it ended: on the job's time axis (html_job.cpp).
      const startColumn = (p.start_ns / data.span_ns) * data.columns;
      const endColumn = ((p.start_ns + p.end_ns) / data.span_ns) * data.columns;
      for (let x = 0; x < width; x++) {
        const column = Math.floor((x * data.columns) / width);
        const outside = column < Math.floor(startColumn) || column >= Math.ceil(endColumn);
        const rgb = outside ? [200, 200, 200] : colour(rows[r][column]);
        for (let y = r * rowHeight; y < (r + 1) * rowHeight; y++) {
          const at = (y * width + x) * 4;
          image.data[at] = rgb[0]; image.data[at + 1] = rgb[1]; image.data[at + 2] = rgb[2]; image.data[at + 3] = 255;
        }
      }
    });
    ctx.putImageData(image, 0, 0);
    const scale = document.createElement('canvas');
    scale.width = 200; scale.height = 1;
    const sctx = scale.getContext('2d');
    for (let x = 0; x < 200; x++) { const c = colour(Math.round((x / 199) * 255)); sctx.fillStyle = `rgb(${c})`; sctx.fillRect(x, 0, 1, 1); }
    $('heat-scale').replaceChildren(text('span', '0'), scale, text('span', bytes(data.scale_bytes) + ' over ' + duration(data.span_ns)));
  }
  // The process and the moment under the pointer.
  function at(ev) {
    const canvas = $('heat').querySelector('canvas');
    const r = canvas.getBoundingClientRect();
    const row = Math.floor((ev.clientY - r.top) / rowHeight);
    if (row < 0 || row >= processes.length) return null;
    const column = Math.min(data.columns - 1, Math.max(0, Math.floor(((ev.clientX - r.left) / r.width) * data.columns)));
    return { row, column };
  }
  const tip = $('tooltip');
  function showTip(ev, lines) {
    tip.replaceChildren(...lines.map((l) => text('div', l)));
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 8) + 'px';
  }

  // ---- The peaks ---------------------------------------------------------------------------
  function peaksTable() {
    const t = $('peaks');
    t.replaceChildren();
    const head = document.createElement('tr');
    ['process', 'host', 'peak reserved', 'against the median', 'peak at', 'live at the end', 'out of memory']
      .forEach((h, i) => head.appendChild(text('th', h, i >= 2 ? 'num' : '')));
    t.appendChild(head);
    for (const i of order) {
      const p = processes[i], tr = document.createElement('tr');
      tr.dataset.index = String(i);
      const cell = document.createElement('td');
      if (p.page) {
        const a = text('a', name(p), 'process');
        a.href = p.page;
        a.title = p.heading;
        cell.appendChild(a);
      } else {
        cell.textContent = name(p);
        cell.title = p.heading + ' (no page of its own: its summary was made without --html)';
      }
      tr.appendChild(cell);
      tr.appendChild(text('td', p.host));
      const against = median ? ((p.peak_bytes - median) / median) * 100 : 0;
      [bytes(p.peak_bytes), (against >= 0 ? '+' : '') + against.toFixed(1) + '%', duration(p.peak_ns),
        bytes(p.live_at_end_bytes), p.ooms ? String(p.ooms) : '']
        .forEach((v) => tr.appendChild(text('td', v, 'num')));
      t.appendChild(tr);
    }
  }

  function start() {
    $('version').textContent = data.version;
    summary();
    heat();
    peaksTable();
    const canvas = $('heat').querySelector('canvas');
    canvas.addEventListener('mousemove', (ev) => {
      const hit = at(ev);
      if (!hit) { tip.hidden = true; return; }
      const p = processes[hit.row];
      const t0 = (hit.column * data.span_ns) / data.columns, t1 = ((hit.column + 1) * data.span_ns) / data.columns;
      showTip(ev, [p.heading, 'up to ' + bytes((rows[hit.row][hit.column] / 255) * data.scale_bytes) +
        ' from ' + duration(Math.round(t0)) + ' to ' + duration(Math.round(t1)) + ' into the job', 'peak ' +
        bytes(p.peak_bytes) + ' at ' + duration(p.peak_ns) + ' into its run']);
    });
    canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
    canvas.addEventListener('click', (ev) => {
      const hit = at(ev);
      if (hit && processes[hit.row].page) window.location.href = processes[hit.row].page;
    });
    let resizing = null;
    window.addEventListener('resize', () => { clearTimeout(resizing); resizing = setTimeout(heat, 100); });
  }

  window.memtrace = {
    data, order, median,
    // Where row ROW of the heat map is drawn, in the page's coordinates (its middle).
    rowAt(row) {
      const r = $('heat').querySelector('canvas').getBoundingClientRect();
      return { x: r.left + r.width / 2, y: r.top + (row + 0.5) * rowHeight };
    },
  };
  start();
  window.memtrace.ready = true;  // drawn
})();
