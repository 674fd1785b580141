// Placement view and trace player (anywidget ES module). The kernel sends compact data once
// (panels of tiles, blocks, frames of differences); stepping applies differences here, so a trace of
// thousands of events plays without any message to the kernel. Also used, unchanged, by the
// standalone HTML export (a tiny in-page model stands in for the widget model).

const SVGNS = 'http://www.w3.org/2000/svg';
const esc = s =>
  String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
// every size comes formatted from Python (tile_bytes, mem_text, tele_text): one format for every view

// Where everything goes comes from Python with the data (widgets/placement_geometry.py: data.geo), so
// this drawing and the static SVG of exports (placement_svg.py) agree; the rules below (caption wrap,
// tile labels) are the same as there.
const MIN_FONT = 10,
  LABEL_FONT = 11,
  CAPTION_FONT = 13,
  CAPTION_LINE = 17,
  LABEL_PAD = 1.5,
  MIN_TILE = MIN_FONT + 2 * LABEL_PAD; // room for a label with LABEL_PAD px to each edge

function geometry(data) {
  return data.geo;
}

const textWidth = (text, size) => String(text).length * size * 0.6;

// at most `lines` lines of about `chars` characters, cut at spaces (placement_geometry.wrap)
function wrap(text, chars, lines) {
  const out = [];
  let cur = '';
  for (const word of String(text).split(' ')) {
    if (cur && cur.length + 1 + word.length > chars) {
      out.push(cur);
      cur = word;
    } else {
      cur = cur ? cur + ' ' + word : word;
    }
  }
  out.push(cur);
  if (out.length > lines) {
    out.length = lines;
    out[lines - 1] = out[lines - 1].slice(0, Math.max(1, chars - 1)) + '…';
  }
  return out;
}

// what a tile says: its holders, "all" when every rank holds it, else how many (placement_geometry.tile_label)
function tileLabel(ranks, P) {
  if (ranks.length === P && P > 1) {
    return 'all';
  }
  return ranks.length <= 3 ? ranks.join(',') : `${ranks.length} ranks`;
}

// "h": across, "v": turned up, "": no room with LABEL_PAD px to each edge (placement_geometry.label_fit)
function labelFit(text, w, h) {
  const need = textWidth(text, MIN_FONT) + 4;
  if (w >= need && h >= MIN_TILE) {
    return 'h';
  }
  return h >= need && w >= MIN_TILE ? 'v' : '';
}

// a <text>, squeezed to `width` when it would be wider
function svgText(x, y, body, size, width = 0, extra = '') {
  const fit =
    width && textWidth(body, size) > width
      ? ` textLength="${width}" lengthAdjust="spacingAndGlyphs"`
      : '';
  return `<text x="${x}" y="${y}" font-size="${size}"${fit}${extra}>${esc(body)}</text>`;
}

const STRIPE = 6; // px: the stripes of a tile held by several ranks (the same in placement_svg.py)

function tileRect(g, t) {
  return [
    g.x + (g.w * t[2]) / g.C,
    g.y + (g.h * t[0]) / g.R,
    (g.w * (t[3] - t[2])) / g.C,
    (g.h * (t[1] - t[0])) / g.R
  ];
}

function panelGeo(data, geo, pi) {
  const [x, y, w, h] = geo.panels[pi],
    [R, C] = data.panels[pi].size;
  return { x, y, w, h, R: Math.max(R, 1), C: Math.max(C, 1) };
}

function drawTile(data, rect, ranks, tipOf) {
  const [x, y, w, h] = rect;
  const parts = [
    `<g class="mgpu-tile" data-owners="${ranks.join(' ')}"><title>${esc(tipOf(ranks))}</title>`
  ];
  if (!ranks.length) {
    parts.push(
      `<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="#fff" stroke="#ccc" stroke-width="0.5"/></g>`
    );
    return parts.join('');
  }
  // one holder: its colour; several (replicas): thin stripes of each holder's colour, so a copy held
  // by ranks 0 and 1 never looks like a block split between them
  const sw = ranks.length > 1 ? Math.min(STRIPE, w / ranks.length) : w;
  for (let i = 0; i * sw < w - 0.01; i++) {
    parts.push(
      `<rect x="${x + i * sw}" y="${y}" width="${Math.min(sw, w - i * sw)}" height="${h}" ` +
        `fill="${data.colors[ranks[i % ranks.length]]}" stroke="none"/>`
    );
  }
  // a Partial piece: every rank holds a full-size operand; the value is their reduction (hatched)
  if (data.partial) {
    parts.push(
      `<rect class="mgpu-partial" x="${x}" y="${y}" width="${w}" height="${h}" fill="url(#mgpu-hatch)"/>`
    );
  }
  parts.push(
    `<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="none" stroke="#fff" stroke-width="1"/>`
  );
  parts.push('</g>');
  return parts.join('');
}

// side-by-side tiles of one grid row with the same holders: one label for the run (placement_geometry.label_runs)
function labelRuns(tiles, owners) {
  const runs = [];
  tiles.forEach((t, i) => {
    const last = runs[runs.length - 1];
    if (last && i === last[1] + 1) {
      const p = tiles[i - 1];
      if (
        p[0] === t[0] &&
        p[1] === t[1] &&
        p[3] === t[2] &&
        owners[i - 1].join(',') === owners[i].join(',')
      ) {
        last[1] = i;
        return;
      }
    }
    runs.push([i, i]);
  });
  return runs;
}

// the holders of a run of tiles, across it or turned up where it fits (placement_svg._label)
function drawLabel(data, [x, y, w, h], ranks) {
  if (!ranks.length) {
    return '';
  }
  let label = tileLabel(ranks, data.world_size);
  if (data.partial && labelFit(`${label} ${data.partial}`, w, h) === 'h') {
    label = `${label} ${data.partial}`;
  }
  const fit = labelFit(label, w, h);
  if (!fit) {
    return '';
  }
  const cx = x + w / 2,
    cy = y + h / 2;
  const turn = fit === 'v' ? ` transform="rotate(-90 ${cx} ${cy})"` : '';
  return (
    `<text class="mgpu-tile-label" x="${cx}" y="${cy + MIN_FONT * 0.36}" font-size="${MIN_FONT}" ` +
    `text-anchor="middle" fill="#fff" stroke="#0009" stroke-width="2.5" paint-order="stroke"${turn}>` +
    `${esc(label)}</text>`
  );
}

// each rank's box: colour, number, bytes held (bar and figure), measured memory, its moves when summarised
// (the bars' classes are the picture's own: memory.css styles .mgpu-mem-bar on the whole page)
function drawLegend(data, frame, geo) {
  const [bw, bh] = geo.box;
  const parts = geo.groups.map(
    ([x, y, host]) =>
      `<text class="mgpu-rank-group" x="${x}" y="${y}" font-size="${MIN_FONT}" fill="#555">${esc(host)}</text>`
  );
  const flows = {};
  for (const [r, sends, gets] of frame.flows || []) {
    flows[r] = [sends, gets];
  }
  geo.ranks.forEach(([x, y], r) => {
    const m = (frame.mem || [])[r] || 0,
      frac = Math.min(1, m / (data.max_mem || 1));
    const tele = frame.tele ? frame.tele[r] : -1,
      tfrac = Math.min(1, Math.max(0, tele) / (data.max_tele || 1));
    const mtext = (frame.mem_text || [])[r] || '';
    const ttext =
      tele >= 0
        ? `; measured (telemetry) ${(frame.tele_text || [])[r] || ''}`
        : '';
    const where = data.rank_names ? ` on ${data.rank_names[r]}` : ''; // a cluster across hosts
    const moved = flows[r]
      ? `; sends ${flows[r][0]}, receives ${flows[r][1]}`
      : '';
    const col = data.colors[r];
    parts.push(
      `<g class="mgpu-rank" data-rank="${r}" data-mem="${m}" data-tele="${tele}"><title>rank ${r}${esc(where)}: ` +
        `${esc(mtext)} of traced blocks${ttext}${moved}</title>` +
        `<rect x="${x}" y="${y}" width="${bw}" height="${bh}" fill="#fff" stroke="${col}" stroke-width="2"/>` +
        `<rect class="mgpu-rank-mem" x="${x + 2}" y="${y + bh - 5}" width="${(bw - 4) * frac}" height="3" fill="${col}"/>` +
        svgText(
          x + bw / 2,
          y + 14,
          geo.compact ? String(r) : `rank ${r}`,
          LABEL_FONT,
          bw - 4,
          ' text-anchor="middle" font-weight="bold"'
        ) +
        svgText(
          x + bw / 2,
          y + bh - 10,
          mtext,
          MIN_FONT,
          bw - 4,
          ' text-anchor="middle"'
        ) +
        (tele >= 0
          ? `<rect class="mgpu-rank-tele" x="${x + 2}" y="${y + bh - 8}" width="${(bw - 4) * tfrac}" height="2" fill="#888"/>`
          : '') +
        (flows[r]
          ? `<rect class="mgpu-flow" x="${x - 2}" y="${y - 2}" width="${bw + 4}" height="${bh + 4}" fill="none" ` +
            `stroke="${col}" stroke-width="2" stroke-dasharray="3 2"/>`
          : '') +
        '</g>'
    );
  });
  return parts;
}

// a transfer between two boxes: an arc over their row when they share one, else a curve from the upper
// box's bottom to the lower box's top (placement_svg._arrow)
function drawArrow(data, geo, [from, to, , isReduce]) {
  const [bw, bh] = geo.box;
  const at = r => (r < 0 ? geo.host : geo.ranks[r]);
  const [fx, fy] = at(from),
    [tx, ty] = at(to);
  const x1 = fx + bw / 2,
    x2 = tx + bw / 2;
  let d;
  if (fy === ty) {
    const room = fy === geo.ranks[0][1] ? geo.arrow_room : geo.row_room;
    const lift = Math.min(2 * room - 6, 14 + Math.abs(x2 - x1) / 6);
    d = `M${x1},${fy} Q${(x1 + x2) / 2},${fy - lift} ${x2},${ty}`;
  } else {
    const [y1, y2] = fy < ty ? [fy + bh, ty] : [fy, ty + bh];
    d = `M${x1},${y1} Q${(x1 + x2) / 2 + 12},${(y1 + y2) / 2} ${x2},${y2}`;
  }
  const col = from < 0 ? '#555' : data.colors[from];
  return (
    `<path class="mgpu-arrow" d="${d}" fill="none" stroke="${col}" stroke-width="2" ` +
    `${isReduce ? 'stroke-dasharray="5 3"' : ''} marker-end="url(#mgpu-head)"/>`
  );
}

export function drawFrame(data, held, frame, geo) {
  // held: Set of "rank,block" strings visible now
  const owners = data.panels.map(p => p.tiles.map(() => []));
  for (const key of Array.from(held).sort(
    (a, b) => parseInt(a) - parseInt(b)
  )) {
    const [r, b] = key.split(',').map(Number);
    const blk = data.blocks[b];
    for (const t of blk[5]) {
      owners[blk[0]][t].push(r);
    }
  }
  const [cy, lines, chars] = geo.caption;
  const caption = frame.caption || '';
  const parts = [`<g class="mgpu-caption"><title>${esc(caption)}</title>`];
  wrap(caption, chars, lines).forEach((line, k) =>
    parts.push(
      svgText(
        10,
        cy + k * CAPTION_LINE,
        line,
        CAPTION_FONT,
        0,
        ' font-weight="bold"'
      )
    )
  );
  parts.push('</g>');
  data.panels.forEach((p, pi) => {
    const g = panelGeo(data, geo, pi);
    if (geo.titles && p.title) {
      parts.push(svgText(g.x, g.y - 6, p.title, LABEL_FONT, g.w + 20));
    }
    const rects = p.tiles.map(t => tileRect(g, t));
    p.tiles.forEach((t, ti) => {
      const tipOf = ranks =>
        data.tips && data.tips[pi]
          ? data.tips[pi][ti]
          : `${ranks.length ? 'held by rank ' + ranks.join(', ') : 'held by no rank'}\nrows ${t[0]}:${t[1]}, cols ${t[2]}:${t[3]}` +
            `\nshape (${t[1] - t[0]}, ${t[3] - t[2]}), ${p.tile_bytes ? p.tile_bytes[ti] : ''}`;
      parts.push(drawTile(data, rects[ti], owners[pi][ti], tipOf));
    });
    for (const [a, b] of labelRuns(p.tiles, owners[pi])) {
      const [x, y, , h] = rects[a],
        [xb, , wb] = rects[b];
      parts.push(drawLabel(data, [x, y, xb + wb - x, h], owners[pi][a]));
    }
    parts.push(
      `<rect x="${g.x}" y="${g.y}" width="${g.w}" height="${g.h}" fill="none" stroke="#333"/>`
    );
  });
  for (const [r, b] of frame.compute || []) {
    const blk = data.blocks[b];
    const [x, y, w, h] = tileRect(panelGeo(data, geo, blk[0]), [
      blk[1],
      blk[2],
      blk[3],
      blk[4]
    ]);
    parts.push(
      `<rect class="mgpu-compute" x="${x}" y="${y}" width="${w}" height="${h}" fill="none" ` +
        `stroke="${data.colors[r]}" stroke-width="3" stroke-dasharray="4 2"/>`
    );
  }
  // the notebook (host) at the left of the first row when it sends or receives in this frame
  const hostUsed = (frame.arrows || []).some(a => a[0] < 0 || a[1] < 0);
  if (hostUsed && geo.host) {
    const [hx, hy] = geo.host,
      [bw, bh] = geo.box;
    parts.push(
      `<rect x="${hx}" y="${hy}" width="${bw}" height="${bh}" fill="#eee" stroke="#999"/>` +
        svgText(
          hx + bw / 2,
          hy + bh / 2 + 4,
          'notebook',
          LABEL_FONT,
          bw - 4,
          ' text-anchor="middle"'
        )
    );
  }
  parts.push(...drawLegend(data, frame, geo));
  for (const a of frame.arrows || []) {
    if (a[0] !== a[1] && (a[0] >= 0 || geo.host) && (a[1] >= 0 || geo.host)) {
      parts.push(drawArrow(data, geo, a));
    }
  }
  // drawn at its natural size (never wider than a notebook cell), scaled down (never up) when narrower
  return (
    `<svg xmlns="${SVGNS}" class="mgpu-placement-svg" width="${geo.width}" height="${geo.height}" ` +
    'style="max-width:100%; height:auto" ' +
    `viewBox="0 0 ${geo.width} ${geo.height}" font-family="sans-serif"><defs><marker id="mgpu-head" ` +
    'viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto">' +
    '<path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker><pattern id="mgpu-hatch" patternUnits="userSpaceOnUse" ' +
    `width="6" height="6"><path d="M0,6 L6,0" stroke="#fff" stroke-width="1.2" opacity="0.7"/></pattern></defs>${parts.join('')}</svg>`
  );
}

function render({ model, el }) {
  const root = document.createElement('div');
  root.className = 'mgpu-placement mgpu-player';
  root.style.cssText =
    'font: 13px sans-serif; display: inline-block; max-width: 100%; ' +
    PLAYER_CARD;
  const { head, badge, title } = playerHead();
  const stage = document.createElement('div');
  stage.className = 'mgpu-placement-stage';

  let data = null,
    geo = null,
    held = new Set(),
    pos = -1;
  const n = () => (data && data.frames ? data.frames.length : 0); // live players start with no data
  const t = transport(model, n, {
    live: () => model.get('live'),
    speeds: [0.25, 0.5, 1, 2, 4, 8]
  });
  root.append(head, t.controls, stage);
  el.appendChild(root);

  const apply = (f, forward) => {
    const fr = data.frames[f];
    const add = forward ? fr.add : fr.rm,
      rm = forward ? fr.rm : fr.add;
    for (const k of rm) {
      held.delete(k[0] + ',' + k[1]);
    }
    for (const k of add) {
      held.add(k[0] + ',' + k[1]);
    }
  };
  const moveTo = i => {
    // apply differences from pos to i (either way)
    while (pos < i) {
      pos++;
      apply(pos, true);
    }
    while (pos > i) {
      apply(pos, false);
      pos--;
    }
  };
  const load = () => {
    data = model.get('data');
    held = new Set();
    pos = -1;
    geo =
      data && data.frames && data.frames.length && data.geo
        ? geometry(data)
        : null;
  };
  const draw = () => {
    const live = model.get('live');
    if (!geo) {
      stage.textContent = live ? 'waiting for events…' : 'nothing to show';
      return;
    }
    let i = Math.max(0, Math.min(n() - 1, model.get('index')));
    moveTo(i);
    stage.innerHTML = drawFrame(data, held, data.frames[i], geo);
    t.show(i);
  };
  const sync = () => {
    badge.textContent = model.get('badge');
    badge.style.display = model.get('badge') ? '' : 'none';
    title.textContent = model.get('title');
    // a view's one heading is its caption: no empty head above it
    head.style.display =
      model.get('title') || model.get('badge') ? 'flex' : 'none';
    t.controls.style.display = model.get('mode') === 'view' ? 'none' : 'flex';
    t.show(Math.max(0, Math.min(n() - 1, model.get('index'))));
    draw();
  };
  model.on('change:data', () => {
    load();
    if (model.get('live') && model.get('follow')) {
      model.set('index', n() - 1);
      model.save_changes();
    }
    sync();
  });
  for (const name of [
    'index',
    'badge',
    'title',
    'playing',
    'mode',
    'speed',
    'live'
  ]) {
    model.on(`change:${name}`, sync);
  }
  load();
  sync();
  t.syncTimer();
  return t.stop;
}

export default { render };
