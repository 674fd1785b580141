// FramePlayer front end: shows frames[index] (pre-rendered SVG/HTML) with the shared transport
// controls (transport.js, prepended by widgets/transport.py). Generic: the collectives' logical
// schedule uses it; the placement replay (placement.js) shares the same controls.

function render({ model, el }) {
  const root = document.createElement('div');
  root.className = 'mgpu-player';
  root.style.cssText =
    'font: 13px sans-serif; display: inline-block; max-width: 100%; ' +
    PLAYER_CARD;
  const { head, badge, title } = playerHead();
  const n = () => model.get('frames').length;
  const t = transport(model, n);
  const caption = document.createElement('div');
  caption.style.cssText = 'color:#444; margin:2px 0 6px 0;';
  const stage = document.createElement('div');
  root.append(head, t.controls, caption, stage);
  el.appendChild(root);

  const sync = () => {
    const i = model.get('index');
    stage.innerHTML = model.get('frames')[i] || '';
    caption.textContent = model.get('captions')[i] || '';
    caption.style.display = model.get('show_captions') ? '' : 'none';
    badge.textContent = model.get('badge');
    badge.style.display = model.get('badge') ? '' : 'none';
    title.textContent = model.get('title');
    t.show(i);
  };
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
