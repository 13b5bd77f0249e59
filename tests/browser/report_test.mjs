// The HTML report in headless Chromium (Debian's chromium, driven by puppeteer-core from npm):
// pages of the steps and training-loop samples load with no console error; the peak they show is
// `memtrace peak --json`'s; hovering an allocation shows its stack; the flame graph at the peak
// sums to the peak; zooming into a step shows the allocations that step made (counted from
// `memtrace export --format jsonl`). The PyTorch training sample (the stand-in PyTorch) shows its
// allocated layer, with Python frames; a run of five processes gets the job page, each process
// linked to a page of its own with its own peak; a job of 256 ranks gets a small job page with the
// outlier first. Screenshots of the pages are left in OUT.
//   node report_test.mjs MEMTRACE SAMPLES_DIR OUT PYTHON
//   node report_test.mjs --time PAGE.html   (load time of one page, for the 100M-event figure;
//                                            its screenshot beside it)
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);
const puppeteer = require(path.join(path.dirname(new URL(import.meta.url).pathname), '../../analysis/exports/html/node_modules/puppeteer-core'));

const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
let failures = 0;
function check(ok, what) {
  console.log((ok ? 'ok      ' : 'FAILED  ') + what);
  if (!ok) failures++;
}

async function browser() {
  return puppeteer.launch({ executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--allow-file-access-from-files'] });
}

// Opens PAGE_FILE and waits until it has drawn; the console's errors and the page's exceptions.
async function open(b, pageFile) {
  const page = await b.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  const started = Date.now();
  await page.goto(pathToFileURL(pageFile).href, { waitUntil: 'load' });
  await page.waitForFunction(() => window.memtrace && window.memtrace.ready, { timeout: 60000 });
  return { page, errors, ms: Date.now() - started };
}

function run(memtrace, args, options = {}) {
  return execFileSync(memtrace, args, { encoding: 'utf8', maxBuffer: 1 << 30, ...options });
}

// Records COMMAND and writes its page; the page's path and the traces' folder.
function record(memtrace, name, command, out, options = [], env = {}) {
  const dir = path.join(out, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  run(memtrace, ['run', '--sim', ...options, '-o', path.join(dir, 'traces'), '--', ...command],
    { env: { ...process.env, MEMTRACE_SIM_CONTEXT_BYTES: '0', ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  const pageFile = path.join(dir, name + '.html');
  run(memtrace, ['html', path.join(dir, 'traces'), '-o', pageFile], { stdio: 'ignore' });
  return { dir, pageFile };
}

async function samplePage(b, memtrace, name, command, out, options = []) {
  const { dir, pageFile } = record(memtrace, name, command, out, options);
  const peak = JSON.parse(run(memtrace, ['peak', '--json', path.join(dir, 'traces')]));
  const events = run(memtrace, ['export', '--format', 'jsonl', path.join(dir, 'traces')])
    .split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const { page, errors } = await open(b, pageFile);
  console.log(`${name}: ${statSync(pageFile).size} bytes`);
  check(errors.length === 0, `${name}: no console errors ${errors.join(' | ')}`);

  // Live at the end: one row a site (the page's stacks split a site by line).
  const exitRows = await page.$$eval('#exit-sites tr', (rows) => rows.slice(1).map((r) => [...r.children].map((c) => c.textContent)));
  const exitSites = exitRows.filter((r) => r.length > 1).map((r) => r[0] + '/' + r[1] + '/' + r[2]);
  check(new Set(exitSites).size === exitSites.length, `${name}: live at the end, a row a site: ${exitSites.join(' | ')}`);
  if (name === 'train_loop') {
    check(exitSites.some((s) => s.includes('log_metrics')), `${name}: the leak is live at the end: ${exitSites.join(' | ')}`);
    const leak = await page.$eval('#findings .finding.leak', (e) => e.textContent);
    check(leak.includes('log_metrics') && leak.includes('2.00 MiB a step'), `${name}: the leak finding: ${leak}`);
  }

  // The peak shown is peak --json's.
  const device = peak.processes[0].devices[0];
  const shown = await page.$eval(`.peak[data-device="${device.device}"][data-layer="reserved"]`,
    (e) => ({ bytes: Number(e.dataset.peakBytes), text: e.textContent }));
  check(shown.bytes === device.peak_bytes, `${name}: the page's peak ${shown.bytes} (${shown.text}) is peak --json's ${device.peak_bytes}`);

  // The first screen's bar of who held the device is peak --by owner's, row by row.
  const owned = JSON.parse(run(memtrace, ['peak', '--json', '--by', 'owner', path.join(dir, 'traces')])).processes[0].devices[0];
  const bar = await page.$$eval(`.owner-bar[data-device="${owned.device}"] div`, (parts) => parts.map((d) => [d.dataset.owner, Number(d.dataset.bytes)]));
  const barTotal = bar.reduce((sum, [, b]) => sum + b, 0);
  check(barTotal === owned.owners_total_bytes && bar.map(([o]) => o).join('|') === owned.owners.map((o) => o.owner).join('|'),
    `${name}: who held the device at the peak, as peak --by owner says: ${bar.map(([o, b]) => o + ' ' + b).join(', ')}`);

  // The flame graph at the reserved peak sums to it.
  await page.evaluate((d) => window.memtrace.select(d, 'reserved'), device.device);
  const flameTotal = await page.evaluate(() => window.memtrace.flameTotal());
  check(flameTotal === device.peak_bytes, `${name}: the flame graph at the peak sums to ${flameTotal}, the peak`);
  const flameAttr = await page.$eval('#flame', (e) => Number(e.dataset.total));
  check(flameAttr === device.peak_bytes, `${name}: the flame graph says so on the page`);

  // Hovering an allocation shows its stack.
  // Below the findings and the leak table: scrolled to, clear of the sticky header.
  await page.$eval('#allocations', (e) => e.scrollIntoView({ block: 'center' }));
  const canvasWidths = await page.$eval('#allocations canvas', (c) => [c.width / devicePixelRatio, c.getBoundingClientRect().width]);
  check(Math.abs(canvasWidths[0] - canvasWidths[1]) < 1, `${name}: the allocations drawn at the width shown (${canvasWidths.join(' and ')})`);
  const inView = await page.evaluate(() => window.memtrace.inView());
  check(inView.length > 0, `${name}: ${inView.length} allocations drawn`);
  if (inView.length) {
    // The one drawn largest, hovered at its centre: a short allocation is a pixel wide, where the
    // mouse's whole-pixel position can fall beside it.
    const target = inView.reduce((a, b) => (b.width * b.height > a.width * a.height ? b : a));
    await page.mouse.move(target.x, target.y);
    const tip = await page.$eval('#tooltip', (e) => ({ hidden: e.hidden, text: e.innerText }));
    const stackData = await page.evaluate((s) => window.memtrace.data.processes[window.memtrace.state.process].stacks[s], target.span[5]);
    check(!tip.hidden && tip.text.includes(stackData.site) && stackData.frames.length > 0 && tip.text.includes('main'),
      `${name}: hovering an allocation shows its site and stack:\n${tip.text.split('\n').slice(0, 6).join('\n')}`);
  }

  // Zooming into a step shows that step's allocations.
  const steps = await page.evaluate(() => window.memtrace.data.processes[0].steps);
  if (steps.length >= 3) {
    const k = 1, t0 = steps[k], t1 = steps[k + 1];
    await page.evaluate((a, z) => window.memtrace.zoom(a, z), t0, t1);
    const made = await page.evaluate((a, z) => window.memtrace.inView().filter((d) => d.span[0] >= a && d.span[0] < z).length, t0, t1);
    const expected = events.filter((e) => e.op === 'alloc' && e.result === 0 && e.layer === 'reserved' && e.size > 0 &&
      e.t_ns >= t0 && e.t_ns < t1).length;
    check(made === expected && expected > 0, `${name}: zoomed into step ${k + 1}, ${made} allocations made there in view, the trace has ${expected}`);
    // The wheel zooms in around the cursor, and with shift pans.
    await page.$eval('#timeline', (e) => e.scrollIntoView({ block: 'center' }));
    const box = await page.$eval('#timeline .u-over', (e) => { const r = e.getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; });
    const before = await page.evaluate(() => (window.memtrace.state.window || [0, window.memtrace.data.processes[0].end_ns]).slice());
    await page.mouse.move(box.x, box.y);
    await page.mouse.wheel({ deltaY: -100 });
    const zoomed = await page.evaluate(() => (window.memtrace.state.window || [0, window.memtrace.data.processes[0].end_ns]).slice());
    check(zoomed[1] - zoomed[0] < before[1] - before[0], `${name}: the wheel zooms in (${Math.round(before[1] - before[0])} ns to ${Math.round(zoomed[1] - zoomed[0])} ns)`);
    await page.keyboard.down('Shift');
    await page.mouse.wheel({ deltaY: -100 });
    await page.keyboard.up('Shift');
    const panned = await page.evaluate(() => (window.memtrace.state.window || [0, window.memtrace.data.processes[0].end_ns]).slice());
    check(panned[0] < zoomed[0] && Math.abs((panned[1] - panned[0]) - (zoomed[1] - zoomed[0])) < 1,
      `${name}: shift+wheel pans, the width kept`);
    await page.evaluate(() => window.memtrace.choose(0));  // back to the first view, for the screenshot
  } else {
    check(true, `${name}: (no steps to zoom into)`);
  }
  await page.evaluate((d) => window.memtrace.select(d, 'reserved'), device.device);
  await page.screenshot({ path: path.join(out, name + '.png'), fullPage: true });
  console.log(`${name}: screenshot ${path.join(out, name + '.png')}`);
  await page.close();
}

const sources = path.join(path.dirname(new URL(import.meta.url).pathname), '../../samples/python');

// The stand-in PyTorch's training loop: the allocated layer first, its flame graph summing to its
// peak, Python frames in its stacks.
async function torchPage(b, memtrace, python, out) {
  const sim = path.join(path.dirname(path.dirname(memtrace)), 'lib/sim/torch/site-packages');
  const { dir, pageFile } = record(memtrace, 'torch_train', [python, path.join(sources, 'torch_train.py'), '--steps', '6', '--leak'],
    out, [], { PYTHONPATH: sim });
  const peak = JSON.parse(run(memtrace, ['peak', '--json', '--layer', 'allocated', path.join(dir, 'traces')]));
  const { page, errors } = await open(b, pageFile);
  check(errors.length === 0, `torch_train: no console errors ${errors.join(' | ')}`);
  const state = await page.evaluate(() => ({ ...window.memtrace.state }));
  check(state.layer === 'allocated', `torch_train: the allocated layer (PyTorch's tensors) is shown first`);
  const device = peak.processes[0].devices[0];
  const total = await page.evaluate(() => window.memtrace.flameTotal());
  check(total === device.peak_bytes, `torch_train: the flame graph at the allocated peak sums to ${total}, peak --json --layer allocated's ${device.peak_bytes}`);
  const pythonFrames = await page.evaluate(() => window.memtrace.data.processes[0].frames.some((f) => f.python && f.label.includes('torch_train.py')));
  check(pythonFrames, 'torch_train: its stacks have the Python frames of torch_train.py');
  // The first screen (issue 31, item 5): the findings first, the leak among them with its line; the
  // timeline opened on where memory changed; one row a site live at the end, in the tensors' layer.
  const first = await page.evaluate(() => {
    const findings = [...document.querySelectorAll('#findings .finding')].map((f) => ({ kind: f.dataset.kind, text: f.textContent }));
    const top = (id) => document.getElementById(id).getBoundingClientRect().top;
    const rows = [...document.querySelectorAll('#exit-sites tr')].slice(1).map((r) => [...r.children].map((c) => c.textContent));
    const p = window.memtrace.data.processes[0];
    return { findings, findingsTop: top('findings'), timelineTop: top('timeline'), growthTop: top('growth'),
      allocationsTop: top('allocations'), rows, window: window.memtrace.state.window, first: p.first_change_ns,
      last: p.last_change_ns, end: p.end_ns };
  });
  check(first.findings.length >= 2 && first.findings[0].kind === 'peak' && first.findings[1].kind === 'leak',
    `torch_train: the findings come first: ${first.findings.map((f) => f.kind).join(', ')}`);
  check(first.findings[1] && /torch_train\.py:\d+/.test(first.findings[1].text) && first.findings[1].text.includes('a step'),
    `torch_train: the leak finding names its line and its bytes a step: ${first.findings[1] && first.findings[1].text}`);
  check(first.findingsTop < first.timelineTop && first.growthTop < first.allocationsTop,
    'torch_train: findings above the timeline, the leak table above the allocations');
  check(first.window && first.window[0] <= first.first && first.window[1] >= first.last && first.window[1] - first.window[0] < first.end,
    `torch_train: the timeline opens on where memory changed (${first.first} to ${first.last} ns of ${first.end}): ${first.window}`);
  // Python frees the leaked tensors at exit: nothing of the cache is listed as live in their place.
  check(first.rows.every((r) => r.length === 1 || r[2] === 'allocated'),
    `torch_train: live at the end, in the allocated layer only: ${first.rows.map((r) => r.join('/')).join(' | ')}`);
  await page.screenshot({ path: path.join(out, 'torch_train.png'), fullPage: true });
  await page.close();
}

// The peak a process's own page shows (its reserved layer's card), after opening PAGE_FILE.
async function pagePeak(b, pageFile) {
  const { page, errors } = await open(b, pageFile);
  const shown = await page.evaluate(() => {
    const p = window.memtrace.data.processes[0];
    const card = document.querySelector('.peak[data-layer="reserved"]');
    const back = document.getElementById('job-link');
    return { pid: p.pid, rank: p.rank, bytes: card ? Number(card.dataset.peakBytes) : -1, back: back ? back.href : '' };
  });
  await page.close();
  return { ...shown, errors };
}

// Five processes (workers forked and spawned): the job page, a row each, each linked to its own
// page, which shows that process's peak.
async function processesPage(b, memtrace, python, out) {
  const { dir, pageFile } = record(memtrace, 'workers', [python, path.join(sources, 'workers.py')], out);
  const peak = JSON.parse(run(memtrace, ['peak', '--json', path.join(dir, 'traces')]));
  const { page, errors } = await open(b, pageFile);
  const links = await page.$$eval('#peaks a.process', (as) => as.map((a) => a.href));
  check(links.length === peak.processes.length && links.length === 5, `workers: ${links.length} processes linked for ${peak.processes.length}`);
  let matched = 0;
  for (const link of links) {
    const shown = await pagePeak(b, new URL(link).pathname);
    const expected = peak.processes.find((p) => p.pid === shown.pid);
    if (expected && expected.devices[0].peak_bytes === shown.bytes && shown.back === pathToFileURL(pageFile).href &&
        shown.errors.length === 0) matched++;
  }
  check(matched === links.length, `workers: each process's page shows its peak and links back (${matched} of ${links.length})`);
  const imbalance = await page.$eval('#imbalance', (e) => e.innerText);
  check(imbalance.includes('imbalance'), 'workers: the processes side by side, with the imbalance');
  check(errors.length === 0, `workers: no console errors ${errors.join(' | ')}`);
  await page.screenshot({ path: path.join(out, 'workers.png'), fullPage: true });
  await page.close();
}

// A job of 256 ranks, one of them (rank 77) leaking its way to a peak far above the others': the
// job page stays small, shows a row each in rank order, the imbalance as peak --json says it,
// rank 77 first among the peaks; hovering its row names it, and clicking it opens its own page.
async function jobPage(b, memtrace, samples, out) {
  const ranks = 256, outlier = 77;
  const loop = `for i in $(seq 0 ${ranks - 1}); do steps=2; leak=0; if [ $i = ${outlier} ]; then steps=9; leak=65536; fi; ` +
    `RANK=$i WORLD_SIZE=${ranks} ${path.join(samples, 'train_loop')} --steps $steps --leak-kib $leak & done; wait`;
  const { dir, pageFile } = record(memtrace, 'job', ['/bin/sh', '-c', loop], out);
  const peak = JSON.parse(run(memtrace, ['peak', '--json', path.join(dir, 'traces')]));
  const bytes = statSync(pageFile).size;
  const { page, errors, ms } = await open(b, pageFile);
  console.log(`job: ${ranks} ranks, the job page ${bytes} bytes, drawn in ${ms} ms`);
  check(errors.length === 0, `job: no console errors ${errors.join(' | ')}`);
  check(bytes < 1024 * 1024, `job: the page is small (${bytes} bytes for ${ranks} ranks)`);
  const shown = await page.evaluate(() => ({
    ranks: window.memtrace.data.processes.map((p) => p.rank),
    peaks: window.memtrace.data.processes.map((p) => p.peak_bytes),
    first: document.querySelector('#peaks tr:nth-child(2) td').innerText,
    imbalance: Number(document.getElementById('imbalance').dataset.imbalance),
    rows: document.querySelector('#heat canvas').height,
  }));
  check(shown.ranks.length === ranks && shown.ranks.every((r, i) => r === i), `job: ${shown.ranks.length} rows, in rank order`);
  const expected = peak.processes.map((p) => Math.max(0, ...p.devices.map((d) => d.peak_bytes)));
  check(shown.peaks.every((v, i) => v === expected[i]), 'job: every rank\'s peak is peak --json\'s');
  check(Math.abs(shown.imbalance - peak.all_processes.imbalance) < 1e-9,
    `job: the imbalance ${shown.imbalance} is peak --json's ${peak.all_processes.imbalance}`);
  check(shown.first === 'rank ' + outlier, `job: the outlier first among the peaks (${shown.first})`);
  const at = await page.evaluate((r) => window.memtrace.rowAt(r), outlier);
  await page.mouse.move(at.x, at.y);
  const tip = await page.$eval('#tooltip', (e) => ({ hidden: e.hidden, text: e.innerText }));
  check(!tip.hidden && tip.text.includes('rank ' + outlier + ' of ' + ranks), `job: hovering row ${outlier} names it: ${tip.text.split('\n')[0]}`);
  await page.screenshot({ path: path.join(out, 'job.png'), fullPage: false });
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.mouse.click(at.x, at.y)]);
  await page.waitForFunction(() => window.memtrace && window.memtrace.ready, { timeout: 60000 });
  const opened = await page.evaluate(() => ({ rank: window.memtrace.data.processes[0].rank,
    bytes: Number(document.querySelector('.peak[data-layer="reserved"]').dataset.peakBytes) }));
  check(opened.rank === outlier && opened.bytes === expected[outlier],
    `job: clicking row ${outlier} opens its page (rank ${opened.rank}, peak ${opened.bytes})`);
  await page.close();
}

const args = process.argv.slice(2);
const b = await browser();
try {
  if (args[0] === '--time') {
    const { page, errors, ms } = await open(b, args[1]);
    const drawnMs = await page.evaluate(() => performance.now());
    console.log(JSON.stringify({ page: args[1], bytes: statSync(args[1]).size, load_to_drawn_ms: ms, page_clock_ms: Math.round(drawnMs), errors }));
    await page.screenshot({ path: args[1].replace(/\.html$/, '') + '.png', fullPage: true });
  } else {
    const [memtrace, samples, out, python] = args;
    mkdirSync(out, { recursive: true });
    await samplePage(b, memtrace, 'steps', ['/usr/bin/env', 'MEMTRACE_SIM_CONTEXT_BYTES=0', path.join(samples, 'steps'), '--fragment'], out,
      ['--sim-capacity', '64MiB']);
    await samplePage(b, memtrace, 'train_loop', [path.join(samples, 'train_loop'), '--steps', '20', '--leak-kib', '2048'], out);
    await torchPage(b, memtrace, python, out);
    await processesPage(b, memtrace, python, out);
    await jobPage(b, memtrace, samples, out);
    console.log(failures ? `${failures} check(s) failed` : 'every check holds');
  }
} finally {
  await b.close();
}
process.exit(failures ? 1 : 0);
