// FramePlayer / DiffFramePlayer front end: shows frame `index` with the shared transport controls
// (transport.js, prepended by widgets/transport.py). A FramePlayer's model holds every frame whole
// (`frames`); a DiffFramePlayer's holds the first frame in `parts` and, per later frame, only the
// parts it changes (`patches`) and its arrows and outlines as numbers (`marks`), drawn here into
// parts[overlay.at] as widgets/rank_grid.py's overlay_svg draws them. Generic: the collectives'
// logical schedule uses it; the placement replay (placement.js) shares the same controls.

const escText = s =>
  String(s)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#x27;');

// a frame's arrows in the left gutter and its outlines (the markup of rank_grid.overlay_svg)
export function overlaySvg(overlay, marks) {
  const { left, mid, colors } = overlay;
  const f = v => v.toFixed(1);
  const out = [];
  (marks.arrows || []).forEach(([a, b, what], i) => {
    const ya = mid[a],
      yb = mid[b],
      gx = left - 10 - (i % 8) * 10;
    out.push(
      `<path d='M ${f(left - 6)} ${f(ya)} C ${f(gx - 24)} ${f(ya)}, ${f(gx - 24)} ${f(yb)}, ` +
        `${f(left - 8)} ${f(yb)}' fill='none' stroke='${colors[a]}' stroke-width='2' ` +
        `marker-end='url(#mgpu-arrow-${a % 20})'><title>${escText(`rank ${a} → rank ${b}: ${what}`)}</title></path>`
    );
  });
  for (const [x, y, w, h, sw] of marks.boxes || []) {
    out.push(
      `<rect x='${f(x)}' y='${f(y)}' width='${f(w)}' height='${f(h)}' fill='none' ` +
        `stroke='#000000' stroke-width='${sw}'/>`
    );
  }
  return out.join('');
}

// frame i of a DiffFramePlayer's model: the parts with every patch up to i, and frame i's marks
export function diffFrames(model) {
  let at = -1;
  let state = null;
  const reset = () => {
    state = null;
  };
  const frame = i => {
    const patches = model.get('patches');
    if (state === null || i < at) {
      state = model.get('parts').slice();
      at = 0;
    }
    for (let k = at + 1; k <= i && k < patches.length; k++) {
      for (const [p, s] of Object.entries(patches[k])) {
        state[Number(p)] = s;
      }
    }
    at = i;
    const overlay = model.get('overlay');
    const out = state.slice();
    out[overlay.at] = overlaySvg(overlay, model.get('marks')[i] || {});
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
