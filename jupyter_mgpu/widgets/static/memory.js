// Memory dashboard view (anywidget ES module): one row per device — state badge, memory bar with
// reserved/peak/limit marks coloured by fraction used, and a timeline of the last minute with labelled
// axes. All state comes from the Python model (devices, groups, timeline, axis, paused, refresh_rate,
// status, ended), every size already formatted there (one format for every view); this file only draws
// it. Past COMPACT_AT ranks the rows are compact (a small timeline, the first figure) in a list that
// scrolls, grouped by host under <details> folded to their summary line (a group the user opens stays
// open). Once the session ended (`ended`) the last picture stays, controls off, paused or not.

const SVG = 'http://www.w3.org/2000/svg';
const RATES = [0.5, 1, 2, 5, 10, 20];
const COMPACT_AT = 8; // as memory_rows.COMPACT_AT

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function pct(value, scale) {
  if (value === null || value === undefined || !scale) {
    return 0;
  }
  return Math.max(0, Math.min(100, (100 * value) / scale));
}

function drawBar(d, scale) {
  const bar = el('div', 'mgpu-mem-bar');
  if (d.baseline) {
    const base = el('div', 'mgpu-mem-baseline');
    base.style.width = `${pct(Math.min(d.baseline, d.used || 0), scale)}%`;
    base.title = d.tips.baseline;
    bar.appendChild(base);
  }
  if (d.reserved !== null && d.reserved !== undefined) {
    const res = el('div', 'mgpu-mem-reserved');
    res.style.width = `${pct(d.reserved, scale)}%`;
    res.style.background = d.fill;
    res.title = d.tips.reserved;
    bar.appendChild(res);
  }
  const used = el('div', 'mgpu-mem-used');
  used.style.width = `${pct(d.used, scale)}%`;
  used.style.background = d.fill;
  used.title = d.tips.used;
  bar.appendChild(used);
  if (d.peak) {
    const peak = el('div', 'mgpu-mem-peak');
    peak.style.left = `${pct(d.peak, scale)}%`;
    peak.title = d.tips.peak;
    bar.appendChild(peak);
  }
  if (d.limit) {
    const limit = el('div', 'mgpu-mem-limit');
    limit.style.left = `${pct(d.limit, scale)}%`;
    limit.title = d.tips.limit;
    bar.appendChild(limit);
  }
  return bar;
}

// geometry of a timeline, in px (drawn at this size: labels are never stretched); a compact row's
// timeline (S*) is the line alone, on the shared axes the list's summary line labels once
const TW = 260,
  TH = 34,
  AXIS_W = 58,
  TIME_H = 13,
  SW = 120,
  SH = 18;

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, v);
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function axisText(svg, x, y, anchor, text) {
  const attrs = { class: 'mgpu-mem-axis-text', x, y, 'text-anchor': anchor };
  svg.appendChild(svgEl('text', attrs, text));
}

// One device's timeline: the byte axis (shared by every row, labelled at its ends) at the left, the
// line over the last `axis.span` seconds, a dashed mark where mg.restart started the rank again
// (`marks`: [[seconds before now, text]]); the last row also labels the time axis.
function drawTimeline(points, d, axis, last, compact = false, marks = []) {
  const w = compact ? SW : TW;
  const h = compact ? SH : TH + (last ? TIME_H : 0);
  const svg = svgEl('svg', {
    class: compact ? 'mgpu-mem-timeline mgpu-mem-spark' : 'mgpu-mem-timeline',
    width: w,
    height: h,
    viewBox: `0 0 ${w} ${h}`
  });
  const x0 = compact ? 0 : AXIS_W,
    x1 = compact ? SW : TW - 2,
    y0 = compact ? 1 : 2,
    y1 = compact ? SH - 1 : TH - 2;
  const span = axis.span || 60,
    lo = axis.lo || 0,
    hi = axis.hi || 1;
  const x = ago => x0 + (x1 - x0) * Math.max(0, 1 + ago / span);
  const y = v =>
    y1 - (y1 - y0) * Math.max(0, Math.min(1, ((v || 0) - lo) / (hi - lo || 1)));
  const plot = { class: 'mgpu-mem-plot', x: x0, y: y0 };
  svg.appendChild(svgEl('rect', { ...plot, width: x1 - x0, height: y1 - y0 }));
  if (!compact) {
    axisText(svg, x0 - 4, y0 + 8, 'end', axis.hi_text || '');
    axisText(svg, x0 - 4, y1, 'end', axis.lo_text || '');
  }
  if (!compact && d.limit && d.limit <= hi && d.limit >= lo) {
    svg.appendChild(
      svgEl('line', {
        class: 'mgpu-mem-timeline-limit',
        x1: x0,
        x2: x1,
        y1: y(d.limit),
        y2: y(d.limit)
      })
    );
  }
  if (points && points.length) {
    const pts = points
      .filter(([ago]) => ago >= -span)
      .map(([ago, v]) => `${x(ago).toFixed(1)},${y(v).toFixed(1)}`);
    svg.appendChild(
      svgEl('polyline', {
        class: 'mgpu-mem-timeline-line',
        stroke: d.color,
        points: pts.join(' ')
      })
    );
  }
  for (const [ago, text] of marks || []) {
    if (ago < -span) {
      continue;
    }
    const mark = svgEl('line', {
      class: 'mgpu-mem-timeline-restart',
      x1: x(ago),
      x2: x(ago),
      y1: y0,
      y2: y1
    });
    mark.appendChild(svgEl('title', {}, text));
    svg.appendChild(mark);
  }
  if (last && !compact) {
    const ty = TH + TIME_H - 3;
    axisText(svg, x0, ty, 'start', axis.span_text || '');
    axisText(svg, (x0 + x1) / 2, ty, 'middle', 'time');
    axisText(svg, x1, ty, 'end', 'now');
  }
  const range = `axis ${axis.lo_text} to ${axis.hi_text}`;
  svg.appendChild(
    svgEl(
      'title',
      {},
      `rank ${d.rank}: ${d.labels.used}, last ${span} s (${range})`
    )
  );
  return svg;
}

// One device's row: label, badge (the state, or "shut down"), bar, figures, timeline.
function drawRow(d, points, scale, axis, compact, last, marks) {
  const row = el('div', `mgpu-mem-row mgpu-state-${d.state}`);
  row.dataset.rank = d.rank;
  const label = el('div', 'mgpu-mem-label');
  label.title = `rank ${d.rank} · ${d.device}${d.host ? ` on ${d.host}` : ''}`;
  const dot = el('span', 'mgpu-mem-dot');
  dot.style.background = d.color;
  label.append(dot, el('span', '', `rank ${d.rank} · ${d.device}`));
  const badge = el(
    'span',
    `mgpu-mem-badge mgpu-badge-${d.state}`,
    d.badge || d.state
  );
  if (d.op && d.state === 'busy') {
    badge.title = d.op;
  }
  // compact: the used / limit figure only (peak and reserved in its tooltip)
  const text = el(
    'div',
    'mgpu-mem-text',
    compact ? d.text.split(' · ')[0] : d.text
  );
  text.title = d.text;
  row.append(
    label,
    badge,
    drawBar(d, scale),
    text,
    drawTimeline(points, d, axis, last, compact, marks)
  );
  return row;
}

function render({ model, el: root }) {
  root.classList.add('mgpu-mem');
  const header = el('div', 'mgpu-mem-header');
  const title = el('span', 'mgpu-mem-title');
  const pause = el('button', 'mgpu-mem-pause');
  const rate = el('select', 'mgpu-mem-rate');
  for (const r of RATES) {
    const opt = el('option', '', `${r} Hz`);
    opt.value = String(r);
    rate.appendChild(opt);
  }
  const status = el('span', 'mgpu-mem-status');
  header.append(title, pause, rate, status);
  const summary = el('div', 'mgpu-mem-summary');
  const rows = el('div', 'mgpu-mem-rows');
  root.append(header, summary, rows);
  const open = new Map(); // host -> open, as the user left it (this view only)

  pause.addEventListener('click', () => {
    model.set('paused', !model.get('paused'));
    model.save_changes();
  });
  rate.addEventListener('change', () => {
    model.set('refresh_rate', parseFloat(rate.value));
    model.save_changes();
  });

  function drawControls() {
    const ended = !!model.get('ended');
    root.classList.toggle('mgpu-mem-ended', ended);
    pause.disabled = ended;
    rate.disabled = ended;
    title.textContent = `Device memory — ${model.get('title')}`;
    pause.textContent = model.get('paused') ? 'resume' : 'pause';
    pause.title = model.get('paused')
      ? 'resume live updates (every view)'
      : 'pause live updates (every view)';
    const r = model.get('refresh_rate');
    if (!RATES.includes(r)) {
      const opt = el('option', '', `${r} Hz`);
      opt.value = String(r);
      rate.appendChild(opt);
    }
    rate.value = String(r);
    status.textContent = model.get('status') || '';
  }

  function drawRows() {
    const devices = model.get('devices') || [];
    const timeline = model.get('timeline') || [];
    const marks = model.get('marks') || [];
    const groups = model.get('groups') || [];
    // bars share one scale up to the largest limit (as in Dask); timelines share one scale that fits
    // what they show, so a 64 MiB step stays visible next to a 16 GiB limit
    const scale = Math.max(
      1,
      ...devices.map(d =>
        Math.max(d.limit || 0, d.reserved || 0, d.peak || 0, d.used || 0)
      )
    );
    const axis = model.get('axis') || {};
    const compact = devices.length > COMPACT_AT;
    const hosts =
      groups.length > 1 || (groups.length === 1 && !!groups[0].host);
    const index = new Map(devices.map((d, i) => [d.rank, i]));
    const row = (i, last) =>
      drawRow(devices[i], timeline[i], scale, axis, compact, last, marks[i]);
    summary.hidden = !compact || hosts;
    summary.textContent =
      compact && !hosts && groups.length
        ? `${groups[0].text} · timelines ${axis.lo_text || ''} to ${axis.hi_text || ''}, last ${axis.span || 60} s`
        : '';
    const top = rows.scrollTop;
    rows.classList.toggle('mgpu-mem-compact', compact);
    rows.replaceChildren();
    if (!hosts) {
      devices.forEach((_, i) =>
        rows.appendChild(row(i, i === devices.length - 1))
      );
    }
    for (const g of hosts ? groups : []) {
      // a cluster across hosts: its ranks grouped under each host; folded at many ranks
      const box = el('details', 'mgpu-mem-group');
      box.dataset.host = g.host;
      box.open = open.has(g.host) ? open.get(g.host) : !compact;
      const head = el('summary', 'mgpu-mem-host', g.text);
      head.dataset.host = g.host;
      box.appendChild(head);
      // remembered at once (a click), and whatever opened it (the keyboard, a script)
      head.addEventListener('click', () => open.set(g.host, !box.open));
      box.addEventListener('toggle', () => open.set(g.host, box.open));
      g.ranks.forEach((r, j) => {
        if (index.has(r)) {
          box.appendChild(
            row(index.get(r), !compact && j === g.ranks.length - 1)
          );
        }
      });
      rows.appendChild(box);
    }
    rows.scrollTop = top; // a redraw keeps the list where the user scrolled it
  }

  // Pause and rate act here at once, for every view of this model: a kernel busy in another cell
  // reads the new values only when that cell ends, and keeps sending samples until then.
  let lastDraw = 0;
  let timer = null;
  function scheduleRows() {
    if (model.get('paused') && !model.get('ended')) {
      return;
    }
    const interval = 1000 / (model.get('refresh_rate') || 10);
    const wait = lastDraw + interval - Date.now();
    if (wait <= 0) {
      lastDraw = Date.now();
      drawRows();
    } else if (timer === null) {
      timer = setTimeout(() => {
        timer = null;
        scheduleRows();
      }, wait);
    }
  }
  const onControls = () => {
    drawControls();
    scheduleRows();
  };
  const onRows = () => scheduleRows();
  model.on('change:paused', onControls);
  model.on('change:refresh_rate', onControls);
  model.on('change:status', onControls);
  model.on('change:title', onControls);
  model.on('change:ended', onControls);
  model.on('change:devices', onRows);
  model.on('change:timeline', onRows);
  model.on('change:axis', onRows);
  model.on('change:marks', onRows);
  drawControls();
  drawRows();
  return () => {
    if (timer !== null) {
      clearTimeout(timer);
    }
    model.off('change:paused', onControls);
    model.off('change:refresh_rate', onControls);
    model.off('change:status', onControls);
    model.off('change:title', onControls);
    model.off('change:ended', onControls);
    model.off('change:devices', onRows);
    model.off('change:timeline', onRows);
    model.off('change:axis', onRows);
    model.off('change:marks', onRows);
  };
}

export default { render };
