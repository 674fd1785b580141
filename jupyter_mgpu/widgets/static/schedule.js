// Pipeline schedule player (anywidget ES module, transport.js prepended by widgets/transport.py):
// stages × time of one training step, drawn from the ranks' real forward/backward/send/recv events.
// Frame i shows step frames[i][0] with its first frames[i][1] boxes (in start order), the newest
// outlined, and the sends already received as arrows; per stage, a bar of the whole step's time
// (computing | bubble | other), and a legend. Mirrors static_svg in widgets/pipeline_schedule.py.
// Also used, unchanged, by the standalone HTML page (a tiny in-page model stands in for the widget's).

const W = 880,
  LEFT = 120,
  RIGHT = 136,
  TOP = 64,
  ROW = 30,
  GAP = 6;
const KIND = ['forward', 'backward'];
const SPLIT = [
  ['busy', '#555555'],
  ['bubble', '#c4c4c4'],
  ['other', 'url(#mgpu-sched-other)']
];
const LEGEND = [
  [8, null, 'forward'],
  [78, null, 'backward'],
  [160, '#555555', 'computing'],
  [240, '#c4c4c4', 'bubble: waiting for work still being computed'],
  [
    500,
    'url(#mgpu-sched-other)',
    'other: messages, overhead, waiting for a core'
  ]
];
const DEFS =
  '<defs><marker id="mgpu-sched-head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="5" markerHeight="5" ' +
  'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker><pattern id="mgpu-sched-other" width="4" ' +
  'height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="4" height="4" ' +
  'fill="#fff4e0"/><rect width="2" height="4" fill="#e69f2c"/></pattern></defs>';
const escS = s =>
  String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const pct = x =>
  x === null || x === undefined ? '–' : `${Math.round(100 * x)}%`;

function captionOf(data, i) {
  const [si, n] = data.frames[i];
  const st = data.steps[si];
  const [stage, kind, mb, a, b] = st.boxes[n - 1];
  const phase =
    st.step >= data.timed_from
      ? 'timed'
      : st.step === data.timed_from - 1
        ? 'measured'
        : 'warm-up';
  const l1 =
    `training step ${st.step} (${phase}) · stage ${stage} ${KIND[kind]} of micro-batch ${mb} · ` +
    `${(1000 * a).toFixed(1)}–${(1000 * b).toFixed(1)} ms of ${(1000 * st.span).toFixed(1)} ms`;
  const l2 =
    `bubble per stage, share of computing + bubble (timed steps): ${(data.bubble || []).map(pct).join(', ')} · ` +
    `formula (p−1)/(m+p−1) = ${pct(data.expected_bubble)}`;
  return [l1, l2];
}

function legendOf(data) {
  const y = 40;
  const items = LEGEND.map(([x, fill, label]) => {
    const color =
      fill || (label === 'forward' ? data.light[0] : data.colors[0]);
    return (
      `<rect x="${x}" y="${y}" width="11" height="11" fill="${color}" stroke="#999" stroke-width="0.5"/>` +
      `<text x="${x + 15}" y="${y + 9.5}" font-size="10.5" fill="#333">${escS(label)}</text>`
    );
  });
  return `<g class="mgpu-sched-legend">${items.join('')}</g>`;
}

function splitBar(st, s, y) {
  const span = st.span,
    x0 = W - RIGHT + 8,
    width = RIGHT - 12;
  let x = x0;
  const parts = SPLIT.map(([key, fill]) => {
    const w = span > 0 ? (width * Math.max(0, st[key][s])) / span : 0;
    const r = `<rect x="${x.toFixed(1)}" y="${y + 2}" width="${w.toFixed(1)}" height="11" fill="${fill}"/>`;
    x += w;
    return r;
  });
  const tip = SPLIT.map(
    ([k]) => `${k} ${(1000 * st[k][s]).toFixed(1)} ms (${pct(st[k][s] / span)})`
  ).join(', ');
  return (
    `<g class="mgpu-sched-split"><title>stage ${s}, this step: ${tip}</title>${parts.join('')}` +
    `<rect x="${x0}" y="${y + 2}" width="${width}" height="11" fill="none" stroke="#999" stroke-width="0.5"/>` +
    `<text class="mgpu-sched-idle" x="${x0}" y="${y + ROW - 3}" font-size="10">bubble ` +
    `${pct(st.bubble[s] / span)} · other ${pct(st.other[s] / span)}</text></g>`
  );
}

function drawSchedule(data, i) {
  const [si, n] = data.frames[i];
  const st = data.steps[si];
  const P = data.stages,
    scale = (W - LEFT - RIGHT) / st.span,
    height = TOP + P * (ROW + GAP) + 26;
  const now = st.boxes[n - 1][3];
  const [l1, l2] = captionOf(data, i);
  const parts = [
    `<text x="8" y="16" font-size="13" font-weight="bold">${escS(l1)}</text>`,
    `<text x="8" y="33" font-size="11" fill="#444">${escS(l2)}</text>`,
    legendOf(data)
  ];
  for (let s = 0; s < P; s++) {
    const y = TOP + s * (ROW + GAP);
    parts.push(
      `<rect x="${LEFT}" y="${y}" width="${W - LEFT - RIGHT}" height="${ROW}" fill="#f1f1f1"/>`
    );
    parts.push(
      `<text x="8" y="${y + ROW / 2 + 4}" font-size="12">stage ${s} · rank ${s}</text>`
    );
  }
  st.boxes.slice(0, n).forEach(([s, kind, mb, a, b, wait], j) => {
    const waited =
      wait >= 5e-6
        ? `, ${(1000 * wait).toFixed(2)} ms of it waiting for a core`
        : '';
    const y = TOP + s * (ROW + GAP),
      x = LEFT + a * scale,
      w = Math.max(1.5, (b - a) * scale);
    const fill = kind ? data.colors[s] : data.light[s];
    const stroke =
      j === n - 1
        ? ' stroke="#000" stroke-width="2"'
        : ' stroke="#fff" stroke-width="0.5"';
    parts.push(
      `<g class="mgpu-sched-box" data-stage="${s}" data-kind="${KIND[kind]}" data-mb="${mb}">` +
        `<title>stage ${s} ${KIND[kind]} of micro-batch ${mb}: ${(1000 * a).toFixed(2)}–${(1000 * b).toFixed(2)} ms${waited}</title>` +
        `<rect x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${ROW}" fill="${fill}"${stroke}/>`
    );
    if (w > 18) {
      parts.push(
        `<text x="${(x + w / 2).toFixed(1)}" y="${y + ROW / 2 + 4}" font-size="10" ` +
          `text-anchor="middle">${'FB'[kind]}${mb}</text>`
      );
    }
    parts.push('</g>');
  });
  for (const [src, dst, , , ts, tr] of st.arrows) {
    if (tr > now + 1e-9) {
      continue;
    }
    const y1 = TOP + src * (ROW + GAP) + (dst > src ? ROW : 0),
      y2 = TOP + dst * (ROW + GAP) + (dst > src ? 0 : ROW);
    parts.push(
      `<line class="mgpu-sched-arrow" x1="${(LEFT + ts * scale).toFixed(1)}" y1="${y1}" ` +
        `x2="${(LEFT + tr * scale).toFixed(1)}" y2="${y2}" stroke="#555" stroke-width="1" marker-end="url(#mgpu-sched-head)"/>`
    );
  }
  if (st.busy) {
    // the whole step's split, whichever of its boxes are drawn yet
    parts.push(
      `<text x="${W - RIGHT + 8}" y="${TOP - 4}" font-size="10" fill="#444">step ${st.step}'s wall time:</text>`
    );
    for (let s = 0; s < P; s++) {
      parts.push(splitBar(st, s, TOP + s * (ROW + GAP)));
    }
  }
  const axis = TOP + P * (ROW + GAP) + 14;
  parts.push(
    `<text x="${LEFT}" y="${axis}" font-size="10">0 ms</text><text x="${W - RIGHT}" y="${axis}" ` +
      `font-size="10" text-anchor="end">${(1000 * st.span).toFixed(1)} ms</text>`
  );
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" class="mgpu-schedule-svg" viewBox="0 0 ${W} ${height}" ` +
    `width="100%" style="max-width:${W}px" font-family="sans-serif">${DEFS}${parts.join('')}</svg>`
  );
}

function render({ model, el }) {
  const root = document.createElement('div');
  root.className = 'mgpu-schedule mgpu-player';
  root.style.cssText =
    'font: 13px sans-serif; display: block; max-width: 100%; ' + PLAYER_CARD;
  const { head, badge, title } = playerHead();
  const stage = document.createElement('div');
  stage.className = 'mgpu-schedule-stage';
  const n = () => ((model.get('data') || {}).frames || []).length;
  const t = transport(model, n, {
    live: () => model.get('live'),
    speeds: [0.25, 0.5, 1, 2, 4, 8]
  });
  t.controls.style.flexWrap = 'wrap';
  root.append(head, t.controls, stage);
  el.appendChild(root);

  const sync = () => {
    badge.textContent = model.get('badge');
    badge.style.display = model.get('badge') ? '' : 'none';
    title.textContent = model.get('title');
    const i = Math.max(0, Math.min(n() - 1, model.get('index')));
    if (!n()) {
      stage.textContent = model.get('live')
        ? "waiting for the pipeline's first events…"
        : 'nothing to show';
    } else {
      stage.innerHTML = drawSchedule(model.get('data'), i);
    }
    t.show(i);
    if (!n()) {
      t.controls.querySelector('.mgpu-player-counter').textContent =
        'no events yet';
    }
  };
  model.on('change:data', () => {
    if (model.get('live') && model.get('follow')) {
      model.set('index', Math.max(0, n() - 1));
      model.save_changes();
    }
    sync();
  });
  for (const name of ['index', 'badge', 'title', 'playing', 'speed', 'live']) {
    model.on(`change:${name}`, sync);
  }
  sync();
  t.syncTimer();
  return t.stop;
}

export default { render };
