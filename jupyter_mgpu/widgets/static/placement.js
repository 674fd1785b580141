// Placement view and trace player (anywidget ES module). The kernel sends compact data once
// (panels of tiles, blocks, frames of differences); stepping applies differences here, so a trace of
// thousands of events plays without any message to the kernel. Also used, unchanged, by the
// standalone HTML export (a tiny in-page model stands in for the widget model).

const SVGNS = 'http://www.w3.org/2000/svg';
const esc = s =>
  String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
// every size comes formatted from Python (tile_bytes, mem_text, tele_text): one format for every view

// Geometry of every panel: a box of at most 220 px, aspect kept within 1:6.
function geometry(data) {
  let x = 10;
  const out = [];
  for (const p of data.panels) {
    const [R, C] = p.size;
    const ratio = Math.min(6, Math.max(1 / 6, (R || 1) / (C || 1)));
    const h = ratio >= 1 ? 200 : Math.max(34, 200 * ratio);
    const w = ratio >= 1 ? Math.max(34, 200 / ratio) : 200;
    out.push({ x, y: 44, w, h, R: Math.max(R, 1), C: Math.max(C, 1) });
    x += w + 36;
  }
  return {
    panels: out,
    width: Math.max(x, 120 + 90 * data.world_size),
    height: 44 + Math.max(...out.map(g => g.h), 40) + 120
  };
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

export function drawFrame(data, held, frame, geo) {
  // held: Set of "rank,block" strings visible now
  const P = data.world_size;
  const owners = data.panels.map(p => p.tiles.map(() => 0));
  for (const key of held) {
    const [r, b] = key.split(',').map(Number);
    const blk = data.blocks[b];
    for (const t of blk[5]) {
      owners[blk[0]][t] |= 1 << r;
    }
  }
  const parts = [];
  parts.push(
    `<text x="10" y="16" font-size="13" font-weight="bold">${esc(frame.caption || '')}</text>`
  );
  data.panels.forEach((p, pi) => {
    const g = geo.panels[pi];
    parts.push(`<text x="${g.x}" y="36" font-size="12">${esc(p.title)}</text>`);
    p.tiles.forEach((t, ti) => {
      const [x, y, w, h] = tileRect(g, t);
      const ranks = [];
      for (let r = 0; r < P; r++) {
        if (owners[pi][ti] & (1 << r)) {
          ranks.push(r);
        }
      }
      const tip =
        data.tips && data.tips[pi]
          ? data.tips[pi][ti]
          : `${ranks.length ? 'held by rank ' + ranks.join(', ') : 'held by no rank'}\nrows ${t[0]}:${t[1]}, cols ${t[2]}:${t[3]}` +
            `\nshape (${t[1] - t[0]}, ${t[3] - t[2]}), ${p.tile_bytes ? p.tile_bytes[ti] : ''}`;
      parts.push(
        `<g class="mgpu-tile" data-owners="${ranks.join(' ')}"><title>${esc(tip)}</title>`
      );
      if (!ranks.length) {
        parts.push(
          `<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="#fff" stroke="#ccc" stroke-width="0.5"/>`
        );
      } else {
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
        if (w > 22 && h > 12 && ranks.length <= 4) {
          parts.push(
            `<text x="${x + w / 2}" y="${y + h / 2 + 4}" font-size="10" text-anchor="middle" fill="#fff" ` +
              `stroke="#0009" stroke-width="2.5" paint-order="stroke">${ranks.join(',')}` +
              `${data.partial && w > 60 ? ' ' + esc(data.partial) : ''}</text>`
          );
        }
      }
      parts.push('</g>');
    });
    parts.push(
      `<rect x="${g.x}" y="${g.y}" width="${g.w}" height="${g.h}" fill="none" stroke="#333"/>`
    );
  });
  for (const [r, b] of frame.compute || []) {
    const blk = data.blocks[b];
    const g = geo.panels[blk[0]];
    const [x, y, w, h] = tileRect(g, [blk[1], blk[2], blk[3], blk[4]]);
    parts.push(
      `<rect class="mgpu-compute" x="${x}" y="${y}" width="${w}" height="${h}" fill="none" ` +
        `stroke="${data.colors[r]}" stroke-width="3" stroke-dasharray="4 2"/>`
    );
  }
  // rank boxes with memory bars; the notebook (host) at the left when it takes part
  const y0 = geo.height - 70,
    bw = 70,
    gap = 18;
  const rx = r => (r < 0 ? 10 : 10 + (bw + gap) * (r + 1));
  const hostUsed = (frame.arrows || []).some(a => a[0] < 0 || a[1] < 0);
  if (hostUsed) {
    parts.push(
      `<rect x="10" y="${y0}" width="${bw}" height="40" fill="#eee" stroke="#999"/>` +
        `<text x="${10 + bw / 2}" y="${y0 + 24}" font-size="11" text-anchor="middle">notebook</text>`
    );
  }
  for (let r = 0; r < P; r++) {
    const x = rx(r),
      m = (frame.mem || [])[r] || 0,
      frac = Math.min(1, m / (data.max_mem || 1));
    const tele = frame.tele ? frame.tele[r] : -1,
      tfrac = Math.min(1, Math.max(0, tele) / (data.max_tele || 1));
    const mtext = (frame.mem_text || [])[r] || '';
    const ttext =
      tele >= 0
        ? `; measured (telemetry) ${(frame.tele_text || [])[r] || ''}`
        : '';
    const where = data.rank_names ? ` on ${data.rank_names[r]}` : ''; // a cluster across hosts
    parts.push(
      `<g class="mgpu-rank" data-rank="${r}" data-mem="${m}" data-tele="${tele}"><title>rank ${r}${esc(where)}: ${mtext} of traced blocks${ttext}</title>` +
        `<rect x="${x}" y="${y0}" width="${bw}" height="40" fill="#fff" stroke="${data.colors[r]}" stroke-width="2"/>` +
        `<rect class="mgpu-mem-bar" x="${x + 2}" y="${y0 + 40 - 38 * frac}" width="8" height="${38 * frac}" fill="${data.colors[r]}"/>` +
        `<text x="${x + bw / 2 + 4}" y="${y0 + 16}" font-size="11" text-anchor="middle">rank ${r}</text>` +
        `<text x="${x + bw / 2 + 4}" y="${y0 + 32}" font-size="10" text-anchor="middle">${esc(mtext)}</text>` +
        (data.rank_names
          ? `<text class="mgpu-rank-host" x="${x + bw / 2}" y="${y0 + 52}" font-size="9" ` +
            `text-anchor="middle" fill="#555">${esc(data.rank_names[r].slice(0, 16))}</text>`
          : '') +
        '</g>'
    );
    if (tele >= 0) {
      parts.push(
        `<rect class="mgpu-tele-bar" x="${x + 12}" y="${y0 + 40 - 38 * tfrac}" width="4" ` +
          `height="${38 * tfrac}" fill="#888"/>`
      );
    }
  }
  for (const [from, to, , isReduce] of frame.arrows || []) {
    if (from === to) {
      continue;
    }
    const x1 = rx(from) + bw / 2,
      x2 = rx(to) + bw / 2,
      lift = 14 + Math.abs(x2 - x1) / 6;
    const col = from < 0 ? '#555' : data.colors[from];
    parts.push(
      `<path class="mgpu-arrow" d="M${x1},${y0} Q${(x1 + x2) / 2},${y0 - lift} ${x2},${y0}" fill="none" ` +
        `stroke="${col}" stroke-width="2" ${isReduce ? 'stroke-dasharray="5 3"' : ''} marker-end="url(#mgpu-head)"/>`
    );
  }
  // drawn at its natural size, scaled down (never up) when the cell is narrower
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
    geo = data && data.frames && data.frames.length ? geometry(data) : null;
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
