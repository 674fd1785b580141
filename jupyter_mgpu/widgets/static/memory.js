// Memory dashboard view (anywidget ES module): one row per device — state badge, memory bar with
// reserved/peak/limit marks coloured by fraction used, and a timeline of the last minute with labelled
// axes. All state comes from the Python model (devices, timeline, axis, paused, refresh_rate, status),
// every size already formatted there (one format for every view); this file only draws it.

const SVG = 'http://www.w3.org/2000/svg';
const RATES = [0.5, 1, 2, 5, 10, 20];

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

// geometry of a timeline, in px (drawn at this size: labels are never stretched)
const TW = 260,
  TH = 34,
  AXIS_W = 58,
  TIME_H = 13;

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

// One device's timeline: the byte axis (shared by every row, labelled at its ends) at the left, the
// line over the last `axis.span` seconds; the last row also labels the time axis.
function drawTimeline(points, d, axis, last) {
  const h = TH + (last ? TIME_H : 0);
  const svg = svgEl('svg', {
    class: 'mgpu-mem-timeline',
    width: TW,
    height: h,
    viewBox: `0 0 ${TW} ${h}`
  });
  const x0 = AXIS_W,
    x1 = TW - 2,
    y0 = 2,
    y1 = TH - 2;
  const span = axis.span || 60,
    lo = axis.lo || 0,
    hi = axis.hi || 1;
  const x = ago => x0 + (x1 - x0) * Math.max(0, 1 + ago / span);
  const y = v =>
    y1 - (y1 - y0) * Math.max(0, Math.min(1, ((v || 0) - lo) / (hi - lo || 1)));
  svg.appendChild(
    svgEl('rect', {
      class: 'mgpu-mem-plot',
      x: x0,
      y: y0,
      width: x1 - x0,
      height: y1 - y0
    })
  );
  svg.appendChild(
    svgEl(
      'text',
      {
        class: 'mgpu-mem-axis-text',
        x: x0 - 4,
        y: y0 + 8,
        'text-anchor': 'end'
      },
      axis.hi_text || ''
    )
  );
  svg.appendChild(
    svgEl(
      'text',
      { class: 'mgpu-mem-axis-text', x: x0 - 4, y: y1, 'text-anchor': 'end' },
      axis.lo_text || ''
    )
  );
  if (d.limit && d.limit <= hi && d.limit >= lo) {
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
  if (last) {
    const ty = TH + TIME_H - 3;
    svg.appendChild(
      svgEl(
        'text',
        { class: 'mgpu-mem-axis-text', x: x0, y: ty, 'text-anchor': 'start' },
        axis.span_text || ''
      )
    );
    svg.appendChild(
      svgEl(
        'text',
        {
          class: 'mgpu-mem-axis-text',
          x: (x0 + x1) / 2,
          y: ty,
          'text-anchor': 'middle'
        },
        'time'
      )
    );
    svg.appendChild(
      svgEl(
        'text',
        { class: 'mgpu-mem-axis-text', x: x1, y: ty, 'text-anchor': 'end' },
        'now'
      )
    );
  }
  svg.appendChild(
    svgEl(
      'title',
      {},
      `rank ${d.rank}: ${d.labels.used}, last ${span} s (axis ${axis.lo_text} to ${axis.hi_text})`
    )
  );
  return svg;
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
  const rows = el('div', 'mgpu-mem-rows');
  root.append(header, rows);

  pause.addEventListener('click', () => {
    model.set('paused', !model.get('paused'));
    model.save_changes();
  });
  rate.addEventListener('change', () => {
    model.set('refresh_rate', parseFloat(rate.value));
    model.save_changes();
  });

  function drawControls() {
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
    // bars share one scale up to the largest limit (as in Dask); timelines share one scale that fits
    // what they show, so a 64 MiB step stays visible next to a 16 GiB limit
    const scale = Math.max(
      1,
      ...devices.map(d =>
        Math.max(d.limit || 0, d.reserved || 0, d.peak || 0, d.used || 0)
      )
    );
    const axis = model.get('axis') || {};
    rows.replaceChildren();
    let host = null;
    devices.forEach((d, i) => {
      if (d.host && d.host !== host) {
        // a cluster across hosts: its ranks grouped under each host
        host = d.host;
        const head = el('div', 'mgpu-mem-host', host);
        head.dataset.host = host;
        rows.appendChild(head);
      }
      const row = el('div', `mgpu-mem-row mgpu-state-${d.state}`);
      row.dataset.rank = d.rank;
      const label = el('div', 'mgpu-mem-label');
      const dot = el('span', 'mgpu-mem-dot');
      dot.style.background = d.color;
      label.append(dot, el('span', '', `rank ${d.rank} · ${d.device}`));
      const badge = el('span', `mgpu-mem-badge mgpu-badge-${d.state}`, d.state);
      if (d.op && d.state === 'busy') {
        badge.title = d.op;
      }
      const text = el('div', 'mgpu-mem-text', d.text);
      row.append(
        label,
        badge,
        drawBar(d, scale),
        text,
        drawTimeline(timeline[i], d, axis, i === devices.length - 1)
      );
      rows.appendChild(row);
    });
  }

  // Pause and rate act here at once, for every view of this model: a kernel busy in another cell
  // reads the new values only when that cell ends, and keeps sending samples until then.
  let lastDraw = 0;
  let timer = null;
  function scheduleRows() {
    if (model.get('paused')) {
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
  model.on('change:devices', onRows);
  model.on('change:timeline', onRows);
  model.on('change:axis', onRows);
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
    model.off('change:devices', onRows);
    model.off('change:timeline', onRows);
    model.off('change:axis', onRows);
  };
}

export default { render };
