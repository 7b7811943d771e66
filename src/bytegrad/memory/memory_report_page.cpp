#include "bytegrad/memory/memory_report_page.h"

namespace bytegrad {

namespace {

// Plain HTML, CSS, SVG and JavaScript: no library, nothing fetched (the Content-Security-Policy forbids it,
// so a stray fetch would show as an error). The script records its own errors into #errors and the
// <html data-errors> attribute, and marks <body data-rendered="yes"> when every part is drawn: what the
// headless-Chromium test reads.
constexpr const char* kPage = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<script>
window.reportErrors = [];
window.onerror = function (message, source, line, column) {
  window.reportErrors.push(String(message) + ' (line ' + line + ':' + column + ')');
  document.documentElement.setAttribute('data-errors', String(window.reportErrors.length));
  var box = document.getElementById('errors');
  if (box) { box.textContent = 'Errors in this page: ' + window.reportErrors.join('; '); box.hidden = false; }
};
</script>
<style>
:root { --fg: #1d232b; --muted: #5c6670; --line: #d6dbe0; --bg: #ffffff; --panel: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; padding: 20px 28px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 0 0 2px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 10px; }
#errors { background: #fde8e8; color: #8a1111; border: 1px solid #e4a3a3; padding: 8px 10px; white-space: pre-wrap; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; padding: 0; margin: 8px 0; list-style: none; }
.legend li { display: flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; width: 13px; height: 13px; border-radius: 2px; border: 1px solid rgba(0,0,0,.25); vertical-align: -2px; }
.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; fill: var(--fg); }
svg .axis line, svg .axis path { stroke: #9aa4ae; }
svg .grid { stroke: #e3e7eb; }
#timeline { cursor: crosshair; display: block; }
.controls { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 14px; margin: 8px 0; }
.controls input[type=range] { flex: 1 1 420px; }
table { border-collapse: collapse; margin: 6px 0 4px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: right; vertical-align: top; white-space: nowrap; }
th { background: var(--panel); font-weight: 600; }
td.l, th.l { text-align: left; }
td .h { display: block; color: var(--muted); font-size: 12px; }
tr.mark-row { cursor: pointer; }
tr.mark-row:hover, tr.selected { background: #eef4fb; }
.num { font-variant-numeric: tabular-nums; }
.cols { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.share { display: inline-block; height: 10px; background: #8aa4c0; vertical-align: middle; }
#state-summary dl { display: grid; grid-template-columns: max-content max-content; gap: 2px 14px; margin: 0; }
#state-summary dt { color: var(--muted); }
#state-summary dd { margin: 0; }
.note { color: var(--muted); font-size: 12px; }
.scroll { max-height: 560px; overflow: auto; border: 1px solid var(--line); background: #fff; }
.wide { overflow-x: auto; }
.change { white-space: normal; width: 250px; font-size: 12px; color: var(--muted); }
.mark-label { font-weight: 600; }
#marks-table td, #marks-table th, #marks-category-table td, #marks-category-table th { padding: 3px 6px; }
</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <p class="sub" id="subtitle"></p>
  <p class="sub" id="overview"></p>
  <div id="errors" hidden></div>
  <ul class="legend" id="legend" aria-label="categories"></ul>
</header>

<section id="timeline-section">
  <h2>Timeline: allocated bytes by category, at every allocator event</h2>
  <p class="note">The stacked areas are the allocated bytes of each category after each event of the allocator's
  history (x: event index); the dashed line is the reserved bytes; the vertical lines are the marks; the red dot is
  the peak; red triangles under the axis are out-of-memory errors. Click the timeline, drag the slider or click a mark's row to see the allocator at that event.</p>
  <div id="timeline-box"></div>
  <div class="controls">
    <button type="button" id="prev-event">&#9664; event</button>
    <input type="range" id="event-slider" min="0" max="0" value="0" aria-label="event">
    <button type="button" id="next-event">event &#9654;</button>
    <label>mark <select id="mark-select"></select></label>
    <button type="button" id="peak-button">peak</button>
  </div>
</section>

<section id="state-section">
  <h2>The allocator at the chosen event</h2>
  <div class="cols">
    <div id="state-summary" class="panel"></div>
    <div id="state-categories"></div>
  </div>
  <p class="note">Each row is a segment (one cudaMalloc, or a mapped range of an expandable segment), drawn to
  scale against the largest; live blocks are coloured by their category at this event, free space is grey.
  Hover a block for its address, sizes, category and the op that allocated it.</p>
  <div id="segments" class="scroll"></div>
</section>

<section id="peak-section">
  <h2>The peak</h2>
  <div id="peak"></div>
</section>

<section id="marks-section">
  <h2>Marks</h2>
  <p class="note">Each figure as a plain integer (bytes, or a count for segments and blocks) with its human unit below.</p>
  <div id="marks-figures" class="wide"></div>
  <h2>Marks by category (allocated bytes)</h2>
  <div id="marks-categories" class="wide"></div>
</section>

<script type="application/json" id="report-data">@@DATA@@</script>
<script>
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('report-data').textContent);
  var COLORS = { parameter: '#4e79a7', buffer: '#76b7b2', gradient: '#f28e2b', optimizer_state: '#b07aa1',
                 workspace: '#9c755f', activation: '#59a14f', autograd_temporary: '#edc948', other: '#bab0ac' };
  var SVGNS = 'http://www.w3.org/2000/svg';
  var cats = D.categories, NC = cats.length;
  var ev = D.events, N = ev.action.length;
  var A = {};
  D.actions.forEach(function (name, i) { A[name] = i; });
  var base = BigInt(D.address_base);

  // ---------------------------------------------------------------------------------------- helpers
  function human(b) {  // as bytegrad's human_bytes: "512 B", "7.11 MiB"
    var m = Math.abs(b);
    if (m < 1024) return b + ' B';
    var units = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'], s = m / 1024, u = 0;
    while (s >= 1024 && u < 5) { s /= 1024; u++; }
    return (b < 0 ? '-' : '') + s.toFixed(2) + ' ' + units[u];
  }
  function hex(offset) { return '0x' + (base + BigInt(offset)).toString(16); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function swatch(c) { var s = el('span', { 'class': 'swatch' }); s.style.background = COLORS[cats[c]] || '#999'; return s; }
  // A cell with the exact integer and, for bytes, its human unit below.
  function figureCell(value, isBytes, attrs) {
    var td = el('td', attrs || {});
    td.className = 'num';
    td.appendChild(document.createTextNode(String(value)));
    if (isBytes) td.appendChild(el('span', { 'class': 'h' }, human(value)));
    return td;
  }
  function tagName(t) { return t < 0 ? '(allocated before recording)' : D.tags[t]; }

  // ------------------------------------------------------------------------- totals at every event
  // Replayed from the state before the history: allocated per category and reserved after each event.
  var initialBytes = new Array(NC).fill(0), initialReserved = 0;
  D.initial.blocks.forEach(function (b) { initialBytes[b[3]] += b[1]; });
  D.initial.segments.forEach(function (s) { initialReserved += s[1]; });
  var totals = [];  // totals[c][i]
  for (var c = 0; c < NC; c++) totals.push(new Float64Array(N));
  var allocatedAt = new Float64Array(N), reservedAt = new Float64Array(N);
  (function () {
    var bytes = initialBytes.slice(), reserved = initialReserved;
    for (var i = 0; i < N; i++) {
      var a = ev.action[i], size = ev.size[i];
      if (a === A.alloc) bytes[ev.category[i]] += size;
      else if (a === A.free_requested) bytes[ev.category[i]] -= size;
      else if (a === A.category) { bytes[ev.previous[i]] -= size; bytes[ev.category[i]] += size; }
      else if (a === A.segment_alloc || a === A.segment_map) reserved += size;
      else if (a === A.segment_free || a === A.segment_unmap) reserved -= size;
      var sum = 0;
      for (var c = 0; c < NC; c++) { totals[c][i] = bytes[c]; sum += bytes[c]; }
      allocatedAt[i] = sum;
      reservedAt[i] = reserved;
    }
  })();

  // ------------------------------------------------------------------------------- state replay
  function initialState() {
    var st = { segments: new Map(), blocks: new Map(), index: -1 };
    D.initial.segments.forEach(function (s) { st.segments.set(s[0], { address: s[0], size: s[1], expandable: s[2] }); });
    D.initial.blocks.forEach(function (b) {
      st.blocks.set(b[0], { address: b[0], size: b[1], requested: b[2], category: b[3], tag: b[4] });
    });
    return st;
  }
  function mapRange(st, address, size) {
    var range = { address: address, size: size, expandable: true };
    var next = st.segments.get(address + size);
    if (next && next.expandable) { range.size += next.size; st.segments.delete(next.address); }
    var prev = null;
    st.segments.forEach(function (s) { if (s.expandable && s.address + s.size === address) prev = s; });
    if (prev) { prev.size += range.size; return; }
    st.segments.set(address, range);
  }
  function unmapRange(st, address, size) {
    var whole = null;
    st.segments.forEach(function (s) { if (s.address <= address && address < s.address + s.size) whole = s; });
    if (!whole || address + size > whole.address + whole.size) return;
    st.segments.delete(whole.address);
    if (address > whole.address) st.segments.set(whole.address, { address: whole.address, size: address - whole.address, expandable: true });
    var end = address + size, wholeEnd = whole.address + whole.size;
    if (end < wholeEnd) st.segments.set(end, { address: end, size: wholeEnd - end, expandable: true });
  }
  function apply(st, i) {
    var a = ev.action[i], address = ev.address[i], size = ev.size[i];
    if (a === A.alloc) st.blocks.set(address, { address: address, size: size, requested: ev.requested[i], category: ev.category[i], tag: ev.tag[i] });
    else if (a === A.free_requested) st.blocks.delete(address);
    else if (a === A.category) { var b = st.blocks.get(address); if (b) b.category = ev.category[i]; }
    else if (a === A.segment_alloc) st.segments.set(address, { address: address, size: size, expandable: false });
    else if (a === A.segment_free) st.segments.delete(address);
    else if (a === A.segment_map) mapRange(st, address, size);
    else if (a === A.segment_unmap) unmapRange(st, address, size);
    st.index = i;
  }
  var cached = initialState();
  function stateAt(i) {
    if (i < cached.index) cached = initialState();
    for (var j = cached.index + 1; j <= i; j++) apply(cached, j);
    return cached;
  }

  // ---------------------------------------------------------------------------------- the header
  document.getElementById('title').textContent = D.title;
  document.getElementById('subtitle').textContent = D.subtitle;
  document.getElementById('overview').textContent = 'device ' + D.device + ' \u00b7 ' + N + ' allocator events \u00b7 ' +
      D.marks.length + ' marks \u00b7 peak ' + human(D.peak.allocated) + ' (' + D.peak.allocated + ' B) in ' + D.peak.phase;
  var legend = document.getElementById('legend');
  cats.forEach(function (name, c) {
    var li = el('li', { 'data-category': name });
    li.appendChild(swatch(c));
    li.appendChild(document.createTextNode(name));
    legend.appendChild(li);
  });

  // -------------------------------------------------------------------------------- the timeline
  var W = 1180, PH = 260, M = { left: 84, right: 16, top: 0, bottom: 34 };
  var PW = W - M.left - M.right;
  var maxY = 1;
  for (var i = 0; i < N; i++) maxY = Math.max(maxY, allocatedAt[i], reservedAt[i]);
  D.marks.forEach(function (m) { maxY = Math.max(maxY, m.figures.reserved); });
  var span = Math.max(N, 1);
  function xOf(i) { return M.left + (i + 0.5) / span * PW; }
  // The marks' labels above the plot: each in the lowest row where it does not run into an earlier label
  // (widths estimated at 6.3 px a character of the 11 px font); the plot starts under the highest row.
  var ROW = 14, MAXROWS = 12, rowEnd = [], rowsUsed = 1;
  var labels = D.marks.map(function (m) {
    if (m.event < 0) return null;
    var x = xOf(m.event), width = m.label.length * 6.3 + 4;
    var atEnd = x + 3 + width > W;  // near the right edge: the label ends at the line
    var left = atEnd ? x - 3 - width : x + 3, row = 0;
    while (row < MAXROWS - 1 && rowEnd[row] !== undefined && rowEnd[row] > left - 6) row++;
    rowEnd[row] = left + width;
    rowsUsed = Math.max(rowsUsed, row + 1);
    return { x: x, row: row, atEnd: atEnd };
  });
  M.top = 14 + rowsUsed * ROW;
  var H = M.top + PH + M.bottom;
  function yOf(v) { return M.top + PH - v / maxY * PH; }
  // A tick step: 1, 2 or 5 times a power of 1024 times a power of 10, aiming at about five ticks.
  function tickStep(max) {
    var raw = max / 5, unit = 1;
    while (raw / unit >= 1024) unit *= 1024;
    var scaled = raw / unit, p = Math.pow(10, Math.floor(Math.log10(Math.max(scaled, 1e-9))));
    var f = scaled / p, nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nice * p * unit;
  }
  // Columns: every event, or for long histories, per pixel the event with the most allocated bytes.
  var columns = [];
  var perPixel = Math.max(1, Math.ceil(N / PW));
  for (var s = 0; s < N; s += perPixel) {
    var best = s;
    for (var j = s; j < Math.min(N, s + perPixel); j++) if (allocatedAt[j] > allocatedAt[best]) best = j;
    columns.push({ from: s, to: Math.min(N, s + perPixel), event: best });
  }
  function xLeft(col) { return M.left + col.from / span * PW; }
  function xRight(col) { return M.left + col.to / span * PW; }

  var plot = svg('svg', { id: 'timeline', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'memory timeline' });
  var step = tickStep(maxY);
  for (var t = 0; t <= maxY + 1e-9; t += step) {
    plot.appendChild(svg('line', { 'class': 'grid', x1: M.left, x2: M.left + PW, y1: yOf(t), y2: yOf(t) }));
    var label = svg('text', { x: M.left - 6, y: yOf(t) + 4, 'text-anchor': 'end' });
    label.textContent = human(t);
    plot.appendChild(label);
  }
  // Stacked steps in precedence order from the bottom: parameters (which live longest) under gradients and
  // optimizer state, the transient parts on top.
  var lower = new Float64Array(columns.length);
  for (var c = 0; c < NC; c++) {
    var top = [], bottom = [];
    columns.forEach(function (col, k) {
      var v = lower[k] + totals[c][col.event];
      top.push(xLeft(col) + ',' + yOf(v), xRight(col) + ',' + yOf(v));
      bottom.push(xLeft(col) + ',' + yOf(lower[k]), xRight(col) + ',' + yOf(lower[k]));
      lower[k] = v;
    });
    if (!columns.length) continue;
    var poly = svg('polygon', { points: top.concat(bottom.reverse()).join(' '), fill: COLORS[cats[c]], 'fill-opacity': '0.9', 'data-category': cats[c] });
    var title = svg('title');
    title.textContent = cats[c];
    poly.appendChild(title);
    plot.appendChild(poly);
  }
  if (columns.length) {
    var pts = [];
    columns.forEach(function (col) {
      var v = reservedAt[col.event];
      for (var j = col.from; j < col.to; j++) v = Math.max(v, reservedAt[j]);
      pts.push(xLeft(col) + ',' + yOf(v), xRight(col) + ',' + yOf(v));
    });
    plot.appendChild(svg('polyline', { points: pts.join(' '), fill: 'none', stroke: '#333', 'stroke-width': '1.2', 'stroke-dasharray': '5 3' }));
  }
  // Axes.
  plot.appendChild(svg('line', { 'class': 'axis', x1: M.left, x2: M.left, y1: M.top, y2: M.top + PH, stroke: '#9aa4ae' }));
  plot.appendChild(svg('line', { 'class': 'axis', x1: M.left, x2: M.left + PW, y1: M.top + PH, y2: M.top + PH, stroke: '#9aa4ae' }));
  var xl = svg('text', { x: M.left + PW, y: H - 8, 'text-anchor': 'end' });
  xl.textContent = 'allocator event (' + N + ' in all)';
  plot.appendChild(xl);
  var x0 = svg('text', { x: M.left, y: M.top + PH + 14, 'text-anchor': 'start' });
  x0.textContent = '0';
  plot.appendChild(x0);
  // Marks: a line at the mark's event, and its label (placed above).
  D.marks.forEach(function (m, k) {
    var at = labels[k];
    if (!at) return;
    var x = at.x, atEnd = at.atEnd, ty = M.top - 8 - at.row * ROW;
    plot.appendChild(svg('line', { x1: x, x2: x, y1: ty - 9, y2: M.top + PH, stroke: '#2b3a4a', 'stroke-width': '0.8', 'stroke-dasharray': '2 2' }));
    var text = svg('text', { x: atEnd ? x - 3 : x + 3, y: ty, 'text-anchor': atEnd ? 'end' : 'start', 'class': 'mark-label' });
    text.textContent = m.label;
    plot.appendChild(text);
  });
  // Out-of-memory events: a red triangle under the axis.
  for (var i = 0; i < N; i++) {
    if (ev.action[i] !== A.oom) continue;
    var ox = xOf(i), oy = M.top + PH;
    var tri = svg('polygon', { points: ox + ',' + (oy + 1) + ' ' + (ox - 5) + ',' + (oy + 10) + ' ' + (ox + 5) + ',' + (oy + 10), fill: '#d62728' });
    var tt = svg('title');
    tt.textContent = 'out of memory at event ' + i + ': no room for a block of ' + ev.size[i] + ' B';
    tri.appendChild(tt);
    plot.appendChild(tri);
  }
  if (D.peak.event >= 0) {
    var px = xOf(D.peak.event), py = yOf(allocatedAt[D.peak.event]);
    plot.appendChild(svg('circle', { cx: px, cy: py, r: 4.5, fill: '#d62728', stroke: '#fff', 'stroke-width': '1.5' }));
    var pt = svg('text', { x: px + 7, y: Math.max(M.top + 10, py - 6), fill: '#d62728' });
    pt.textContent = 'peak ' + human(D.peak.allocated);
    plot.appendChild(pt);
  }
  var cursor = svg('line', { y1: M.top, y2: M.top + PH, stroke: '#d62728', 'stroke-width': '1.5' });
  plot.appendChild(cursor);
  plot.addEventListener('click', function (e) {
    var r = plot.getBoundingClientRect();
    var x = (e.clientX - r.left) * W / r.width;
    select(Math.round((x - M.left) / PW * span - 0.5));
  });
  document.getElementById('timeline-box').appendChild(plot);

  // ---------------------------------------------------------------------------------- controls
  var slider = document.getElementById('event-slider');
  slider.max = String(Math.max(0, N - 1));
  slider.addEventListener('input', function () { select(Number(slider.value)); });
  document.getElementById('prev-event').addEventListener('click', function () { select(selected - 1); });
  document.getElementById('next-event').addEventListener('click', function () { select(selected + 1); });
  document.getElementById('peak-button').addEventListener('click', function () { if (D.peak.event >= 0) select(D.peak.event); });
  var markSelect = document.getElementById('mark-select');
  markSelect.appendChild(el('option', { value: '' }, '\u2014'));
  D.marks.forEach(function (m, k) { if (m.event >= 0) markSelect.appendChild(el('option', { value: String(k) }, m.label)); });
  markSelect.addEventListener('change', function () { if (markSelect.value !== '') select(D.marks[Number(markSelect.value)].event); });

  // ------------------------------------------------------------------------------ state at event
  function describe(i) {
    var a = D.actions[ev.action[i]], text = a;
    if (a === 'alloc' || a === 'free_requested' || a === 'free_completed')
      text += ' ' + human(ev.size[i]) + ' at ' + hex(ev.address[i]) + ' (' + cats[ev.category[i]] + ', ' + tagName(ev.tag[i]) + ')';
    else if (a === 'category')
      text += ': ' + human(ev.size[i]) + ' at ' + hex(ev.address[i]) + ' ' + cats[ev.previous[i]] + ' \u2192 ' + cats[ev.category[i]];
    else if (a.indexOf('segment') === 0) text += ' ' + human(ev.size[i]) + ' at ' + hex(ev.address[i]);
    var marks = D.marks.filter(function (m) { return m.event === i; }).map(function (m) { return m.label; });
    if (marks.length) text += ' \u2014 mark ' + marks.join(', ');
    return text;
  }
  var selected = -1;
  function select(i) {
    if (N === 0) return;
    i = Math.max(0, Math.min(N - 1, i | 0));
    selected = i;
    slider.value = String(i);
    cursor.setAttribute('x1', xOf(i));
    cursor.setAttribute('x2', xOf(i));
    var st = stateAt(i);
    var blocks = Array.from(st.blocks.values()), segments = Array.from(st.segments.values());
    segments.sort(function (a, b) { return a.address - b.address; });
    blocks.sort(function (a, b) { return a.address - b.address; });
    var allocated = 0, reserved = 0, bytes = new Array(NC).fill(0);
    blocks.forEach(function (b) { allocated += b.size; bytes[b.category] += b.size; });
    segments.forEach(function (s) { reserved += s.size; });

    var summary = document.getElementById('state-summary');
    summary.textContent = '';
    summary.appendChild(el('div', { id: 'state-event' }, 'after event ' + i + ' of ' + N + ': ' + describe(i)));
    var dl = el('dl');
    function row(name, id, value, isBytes) {
      dl.appendChild(el('dt', {}, name));
      var dd = el('dd', { 'class': 'num' });
      dd.appendChild(el('span', { id: id }, String(value)));
      if (isBytes) dd.appendChild(document.createTextNode(' (' + human(value) + ')'));
      dl.appendChild(dd);
    }
    row('reserved', 'state-reserved', reserved, true);
    row('allocated', 'state-allocated', allocated, true);
    row('segments', 'state-segments', segments.length, false);
    row('blocks', 'state-blocks', blocks.length, false);
    summary.appendChild(dl);

    var table = el('table', { id: 'state-category-table' });
    var head = el('tr');
    ['category', 'bytes', ''].forEach(function (h, k) { head.appendChild(el('th', k === 0 ? { 'class': 'l' } : {}, h)); });
    table.appendChild(head);
    for (var c = 0; c < NC; c++) {
      var tr = el('tr');
      var name = el('td', { 'class': 'l' });
      name.appendChild(swatch(c));
      name.appendChild(document.createTextNode(' ' + cats[c]));
      tr.appendChild(name);
      tr.appendChild(figureCell(bytes[c], true));
      var share = el('td', { 'class': 'l' });
      var bar = el('span', { 'class': 'share' });
      bar.style.width = (allocated ? Math.round(bytes[c] / allocated * 120) : 0) + 'px';
      share.appendChild(bar);
      tr.appendChild(share);
      table.appendChild(tr);
    }
    var cat = document.getElementById('state-categories');
    cat.textContent = '';
    cat.appendChild(table);

    drawSegments(segments, blocks);
    document.querySelectorAll('tr.mark-row').forEach(function (tr) {
      tr.classList.toggle('selected', Number(tr.getAttribute('data-event')) === i);
    });
  }

  function drawSegments(segments, blocks) {
    var box = document.getElementById('segments');
    box.textContent = '';
    if (!segments.length) { box.appendChild(el('p', { 'class': 'note' }, 'no segments at this event')); return; }
    var LIMIT = 400, shown = segments.slice(0, LIMIT);
    var largest = 1;
    shown.forEach(function (s) { largest = Math.max(largest, s.size); });
    var LW = 190, BW = 940, RH = 20, G = 4;
    var drawing = svg('svg', { id: 'segment-drawing', width: LW + BW + 10, height: shown.length * (RH + G) + 6 });
    var k = 0;
    shown.forEach(function (s, row) {
      var y = 3 + row * (RH + G), w = Math.max(2, s.size / largest * BW);
      var label = svg('text', { x: 4, y: y + 14 });
      label.textContent = hex(s.address) + '  ' + human(s.size) + (s.expandable ? ' (exp.)' : '');
      drawing.appendChild(label);
      var bg = svg('rect', { x: LW, y: y, width: w, height: RH, fill: '#e9ecef', stroke: '#adb5bd', 'stroke-width': '0.6' });
      var bt = svg('title');
      bt.textContent = 'segment ' + hex(s.address) + ': ' + s.size + ' B (' + human(s.size) + ')';
      bg.appendChild(bt);
      drawing.appendChild(bg);
      while (k < blocks.length && blocks[k].address < s.address) k++;
      for (; k < blocks.length && blocks[k].address < s.address + s.size; k++) {
        var b = blocks[k];
        var bx = LW + (b.address - s.address) / s.size * w, bw = Math.max(1, b.size / s.size * w);
        var r = svg('rect', { x: bx, y: y + 1, width: bw, height: RH - 2, fill: COLORS[cats[b.category]], stroke: '#fff', 'stroke-width': '0.5', 'data-category': cats[b.category] });
        var title = svg('title');
        title.textContent = hex(b.address) + ': ' + b.size + ' B (' + human(b.size) + '), requested ' + b.requested +
            ' B, ' + cats[b.category] + ', ' + tagName(b.tag);
        r.appendChild(title);
        drawing.appendChild(r);
      }
    });
    box.appendChild(drawing);
    if (segments.length > LIMIT)
      box.appendChild(el('p', { 'class': 'note' }, 'the first ' + LIMIT + ' of ' + segments.length + ' segments by address'));
  }

  // ------------------------------------------------------------------------------------ the peak
  (function () {
    var box = document.getElementById('peak');
    var p = D.peak;
    box.appendChild(el('p', { id: 'peak-summary' }, 'max_allocated ' + p.allocated + ' B (' + human(p.allocated) + '), reached in ' +
        p.phase + (p.event >= 0 ? ' at event ' + p.event : ' (before the recorded history)') + '.'));
    var cols = el('div', { 'class': 'cols' });
    var t = el('table', { id: 'peak-categories' });
    var h = el('tr');
    ['category', 'bytes at the peak', 'share'].forEach(function (x, k) { h.appendChild(el('th', k === 0 ? { 'class': 'l' } : {}, x)); });
    t.appendChild(h);
    for (var c = 0; c < NC; c++) {
      var tr = el('tr');
      var name = el('td', { 'class': 'l' });
      name.appendChild(swatch(c));
      name.appendChild(document.createTextNode(' ' + cats[c]));
      tr.appendChild(name);
      tr.appendChild(figureCell(p.bytes[c], true));
      tr.appendChild(el('td', { 'class': 'num' }, p.allocated ? (p.bytes[c] / p.allocated * 100).toFixed(1) + ' %' : '\u2014'));
      t.appendChild(tr);
    }
    cols.appendChild(t);
    var lt = el('table', { id: 'peak-blocks' });
    var lh = el('tr');
    ['largest live blocks at the peak', 'bytes', 'category', 'owner'].forEach(function (x, k) { lh.appendChild(el('th', k === 0 || k > 1 ? { 'class': 'l' } : {}, x)); });
    lt.appendChild(lh);
    p.largest.forEach(function (b) {
      var tr = el('tr');
      tr.appendChild(el('td', { 'class': 'l num' }, b.address));
      tr.appendChild(figureCell(b.bytes, true));
      var cc = el('td', { 'class': 'l' });
      cc.appendChild(swatch(b.category));
      cc.appendChild(document.createTextNode(' ' + cats[b.category]));
      tr.appendChild(cc);
      tr.appendChild(el('td', { 'class': 'l' }, b.owner));
      lt.appendChild(tr);
    });
    cols.appendChild(lt);
    box.appendChild(cols);
  })();

  // ----------------------------------------------------------------------------------- the marks
  (function () {
    var FIGURES = [['allocated', true], ['reserved', true], ['max_allocated', true], ['max_reserved', true],
                   ['segments', false], ['blocks', false], ['requested', true], ['inactive_split', true]];
    var t = el('table', { id: 'marks-table' });
    var h = el('tr');
    h.appendChild(el('th', { 'class': 'l' }, 'mark (what changed since the previous one)'));
    h.appendChild(el('th', {}, 'event'));
    FIGURES.forEach(function (f) { h.appendChild(el('th', {}, f[0])); });
    t.appendChild(h);
    D.marks.forEach(function (m, k) {
      var tr = el('tr', { 'class': 'mark-row', 'data-mark': String(k), 'data-event': String(m.event) });
      // The label, and under it what changed since the previous mark (the ops' blocks).
      var name = el('td', { 'class': 'l' });
      name.appendChild(el('span', { 'class': 'mark-label' }, m.label));
      name.appendChild(el('div', { 'class': 'change' }, m.change));
      tr.appendChild(name);
      tr.appendChild(el('td', { 'class': 'num' }, m.event >= 0 ? String(m.event) : '\u2014'));
      FIGURES.forEach(function (f) { tr.appendChild(figureCell(m.figures[f[0]], f[1], { 'data-figure': f[0] })); });
      if (m.event >= 0) tr.addEventListener('click', function () { select(m.event); });
      t.appendChild(tr);
    });
    document.getElementById('marks-figures').appendChild(t);

    var ct = el('table', { id: 'marks-category-table' });
    var ch = el('tr');
    ch.appendChild(el('th', { 'class': 'l' }, 'mark'));
    cats.forEach(function (name, c) {
      var th = el('th', {});
      th.appendChild(swatch(c));
      th.appendChild(document.createTextNode(' ' + name));
      ch.appendChild(th);
    });
    ch.appendChild(el('th', {}, 'sum'));
    ct.appendChild(ch);
    D.marks.forEach(function (m, k) {
      var tr = el('tr', { 'class': 'mark-row', 'data-mark': String(k), 'data-event': String(m.event) });
      tr.appendChild(el('td', { 'class': 'l mark-label' }, m.label));
      var sum = 0;
      for (var c = 0; c < NC; c++) { tr.appendChild(figureCell(m.ledger[c], true, { 'data-category': cats[c] })); sum += m.ledger[c]; }
      tr.appendChild(figureCell(sum, true, { 'data-figure': 'sum' }));
      if (m.event >= 0) tr.addEventListener('click', function () { select(m.event); });
      ct.appendChild(tr);
    });
    document.getElementById('marks-categories').appendChild(ct);
  })();

  // ------------------------------------------------------------------------- the first selection
  var first = D.peak.event >= 0 ? D.peak.event : N - 1;
  var hash = /^#(event|mark)=(\d+)$/.exec(window.location.hash || '');
  if (hash && hash[1] === 'event') first = Number(hash[2]);
  if (hash && hash[1] === 'mark' && D.marks[Number(hash[2])] && D.marks[Number(hash[2])].event >= 0)
    first = D.marks[Number(hash[2])].event;
  if (N > 0) select(first);
  else document.getElementById('segments').appendChild(el('p', { 'class': 'note' }, 'no history was recorded'));
  if (!window.reportErrors.length) document.body.setAttribute('data-rendered', 'yes');
})();
</script>
</body>
</html>
)PAGE";

}  // namespace

const std::string& memory_report_page_template() {
  static const std::string page = kPage;
  return page;
}

}  // namespace bytegrad
