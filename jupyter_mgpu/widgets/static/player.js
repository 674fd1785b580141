// FramePlayer / DiffFramePlayer front end: shows frame `index` with the shared transport controls
// (transport.js, prepended by widgets/transport.py). A FramePlayer's model holds every frame whole
// (`frames`); a DiffFramePlayer's holds the first frame in `parts` and, per later frame, only the
// parts it changes (`patches`) and its arrows and outlines as numbers (`marks`), drawn here into
// parts[overlay.at] as widgets/slot_codes.py's marks_svg draws them. A part that is a code (a list,
// or the number of one of overlay.codes) is drawn here where its entry goes, as slot_codes.code_svg
// draws it. Generic: the collectives' logical schedule uses it; the placement replay (placement.js)
// shares the same controls.

const escText = s =>
  String(s)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#x27;');

// The twins of widgets/slot_codes.py: what the kernel sends as numbers is drawn here as the very
// markup Python draws (rank_grid.Series.frame), character for character.

// tenths of a px as printed: 1625 -> "162.5", 1800 -> "180"
const f10 = v => {
  const a = Math.abs(v);
  const s = `${v < 0 ? '-' : ''}${Math.floor(a / 10)}`;
  return a % 10 ? `${s}.${a % 10}` : s;
};

const EDGE = "stroke='#888888' stroke-width='.6'";

// an entry's code as markup, its top left at (x, y), h high (slot_codes.code_svg)
export function codeSvg(code, x, y, h, fills, labels) {
  if (code[0] === 'u') {
    return `<use href='#${code[1]}' x='${f10(x)}'${y ? ` y='${f10(y)}'` : ''}/>`;
  }
  if (code[0] === 'n') {
    return (
      `<rect x='${f10(x)}' y='${f10(y)}' width='${f10(code[1])}' height='${f10(h)}' fill='#fafafa' ` +
      "stroke='#999999' stroke-width='.8' stroke-dasharray='3 2'/>"
    );
  }
  const one = code.length === 3;
  const out = [];
  let at = x;
  for (let i = 0; i < code.length; i += 3) {
    const [fill, ink] = fills[code[i]];
    const w = code[i + 1];
    const label = code[i + 2];
    out.push(
      `<rect x='${f10(at)}' y='${f10(y)}' width='${f10(w)}' height='${f10(h)}' fill='${fill}'` +
        `${one ? ' ' + EDGE : ''}/>`
    );
    if (label) {
      out.push(
        `<text x='${f10(at + Math.floor(w / 2))}' y='${f10(y + Math.floor(h / 2) + 32)}' ` +
          `fill='${ink}'>${escText(labels[label - 1])}</text>`
      );
    }
    at += w;
  }
  if (!one) {
    out.push(
      `<rect x='${f10(x)}' y='${f10(y)}' width='${f10(at - x)}' height='${f10(h)}' fill='none' ${EDGE}/>`
    );
  }
  return out.join('');
}

// part p (an entry) as [x, y, column] (slot_codes.slot_place)
export function slotPlace(grid, p) {
  const entries = grid.entries;
  const per = entries.reduce((a, b) => a + b, 0);
  const q = p - grid.first;
  const r = Math.floor(q / per);
  let rest = q % per;
  let k = 0;
  while (rest >= entries[k]) {
    rest -= entries[k];
    k += 1;
  }
  const line = Math.floor(rest / grid.per[k]);
  const pos = rest % grid.per[k];
  return [grid.xs[k][pos], grid.ys[r] + line * grid.line, k];
}

// rows of k numbers from runs of arithmetic progressions (slot_codes.unfold)
function unfold(runs, k) {
  const out = [];
  for (const run of runs || []) {
    const count = run.length > k ? run[k] : 1;
    for (let m = 0; m < count; m++) {
      out.push(
        run
          .slice(0, k)
          .map((a, x) => a + (run.length > k ? m * run[k + 1 + x] : 0))
      );
    }
  }
  return out;
}

const boxSvg = (x, y, w, h, sw) =>
  `<rect x='${f10(x)}' y='${f10(y)}' width='${f10(w)}' height='${f10(h)}' fill='none' ` +
  `stroke='#000000' stroke-width='${sw}'/>`;

// a frame's arrows in the left gutter and its outlines (slot_codes.marks_svg)
export function marksSvg(overlay, marks) {
  const { left, mid, colors, whats, grid } = overlay;
  const f = v => v.toFixed(1);
  const out = [];
  unfold(marks.arrows, 3).forEach(([a, b, w], i) => {
    const ya = mid[a],
      yb = mid[b],
      gx = left - 10 - (i % 8) * 10;
    out.push(
      `<path d='M ${f(left - 6)} ${f(ya)} C ${f(gx - 24)} ${f(ya)}, ${f(gx - 24)} ${f(yb)}, ` +
        `${f(left - 8)} ${f(yb)}' fill='none' stroke='${colors[a]}' stroke-width='2' ` +
        `marker-end='url(#mgpu-arrow-${a % 20})'><title>${escText(`rank ${a} → rank ${b}: ${whats[w]}`)}</title></path>`
    );
  });
  for (const [kind, widths, sw] of [
    ['entry', grid.w, 2.2],
    ['tensor', grid.tw, 2]
  ]) {
    for (const [p] of unfold(marks[kind], 1)) {
      const [x, y, k] = slotPlace(grid, p);
      out.push(boxSvg(x - 20, y - 20, widths[k] + 40, grid.h + 40, sw));
    }
  }
  for (const [x, y, w, h, sw] of marks.boxes || []) {
    out.push(boxSvg(x, y, w, h, sw));
  }
  return out.join('');
}

// frame i of a DiffFramePlayer's model: the parts with every patch up to i (each run of parts
// [first, values]), codes drawn where their entries go, and frame i's marks
export function diffFrames(model) {
  let at = -1;
  let state = null;
  const reset = () => {
    state = null;
  };
  const drawn = (overlay, p, v) => {
    if (typeof v === 'string') {
      return v;
    }
    const [x, y] = slotPlace(overlay.grid, p);
    const code = typeof v === 'number' ? overlay.codes[v] : v;
    return codeSvg(code, x, y, overlay.grid.h, overlay.fills, overlay.labels);
  };
  const frame = i => {
    const patches = model.get('patches');
    const overlay = model.get('overlay');
    if (state === null || i < at) {
      state = model.get('parts').map((v, p) => drawn(overlay, p, v));
      at = 0;
    }
    for (let k = at + 1; k <= i && k < patches.length; k++) {
      const patch = patches[k];
      for (let q = 0; q < patch.length; q += 2) {
        const p = patch[q];
        patch[q + 1].forEach((v, j) => {
          state[p + j] = drawn(overlay, p + j, v);
        });
      }
    }
    at = i;
    const out = state.slice();
    out[overlay.at] = marksSvg(overlay, model.get('marks')[i] || {});
    return out.join('');
  };
  return { frame, reset };
}

function render({ model, el }) {
  const root = document.createElement('div');
  root.className = 'mgpu-player';
  root.style.cssText =
    'font: 13px sans-serif; display: inline-block; max-width: 100%; ' +
    PLAYER_CARD;
  const { head, badge, title } = playerHead();
  const diff = () => (model.get('parts') || []).length > 0;
  const n = () =>
    diff() ? model.get('patches').length : model.get('frames').length;
  const t = transport(model, n);
  const caption = document.createElement('div');
  caption.style.cssText = 'color:#444; margin:2px 0 6px 0;';
  const stage = document.createElement('div');
  root.append(head, t.controls, caption, stage);
  el.appendChild(root);
  const diffs = diffFrames(model);
  let shown = null;

  const sync = () => {
    const i = model.get('index');
    const markup = diff() ? diffs.frame(i) : model.get('frames')[i] || '';
    if (markup !== shown) {
      stage.innerHTML = markup;
      shown = markup;
    }
    caption.textContent = model.get('captions')[i] || '';
    caption.style.display = model.get('show_captions') ? '' : 'none';
    badge.textContent = model.get('badge');
    badge.style.display = model.get('badge') ? '' : 'none';
    title.textContent = model.get('title');
    t.show(i);
  };
  for (const name of ['parts', 'patches', 'marks', 'overlay']) {
    model.on(`change:${name}`, () => {
      diffs.reset();
      sync();
    });
  }
  for (const name of [
    'index',
    'frames',
    'captions',
    'badge',
    'title',
    'playing',
    'show_captions'
  ]) {
    model.on(`change:${name}`, sync);
  }
  sync();
  t.syncTimer();
  return t.stop;
}

export default { render };
