// What memtrace's pages (report.js, job.js) share: how they write bytes and times, and make text.
'use strict';

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n), u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return u === 0 ? v + ' B' : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2) + ' ' + units[u];
}
function duration(ns) {
  if (ns < 1e3) return ns + ' ns';
  if (ns < 1e6) return (ns / 1e3).toFixed(1) + ' us';
  if (ns < 1e9) return (ns / 1e6).toFixed(1) + ' ms';
  return (ns / 1e9).toFixed(3) + ' s';
}
function text(tag, content, cls) {
  const e = document.createElement(tag);
  e.textContent = content;
  if (cls) e.className = cls;
  return e;
}
