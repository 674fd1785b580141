// Transport controls shared by the frame players (player.js: collectives' logical schedule,
// placement.js: placement replays): title and badge, first / back / play / forward / last, a slider,
// a step counter and an optional speed menu, driving the model's index / playing / interval_ms.
// Two anywidget modules cannot import each other without a bundler, so the Python side prepends this
// file to each of them (widgets/transport.py).

// The players draw for a light background (grey labels, white empty tiles): in a dark JupyterLab theme
// they show as a light card, like plotly's figures and the collective pictures next to them.
const PLAYER_CARD =
  'background:#fff; color:#222; padding:6px 8px; border-radius:4px; box-sizing:border-box;';

function playerHead() {
  const head = document.createElement('div');
  head.style.cssText =
    'display:flex; flex-wrap:wrap; gap:8px; align-items:center; margin-bottom:4px;';
  const badge = document.createElement('span');
  badge.className = 'mgpu-badge';
  badge.style.cssText =
    'background:#eef; color:#223; border:1px solid #99c; border-radius:3px; padding:0 5px; font-size:11px;';
  const title = document.createElement('b');
  head.append(badge, title);
  return { head, badge, title };
}

function transport(model, n, { live = () => false, speeds = null } = {}) {
  const controls = document.createElement('div');
  controls.style.cssText =
    'display:flex; flex-wrap:wrap; gap:4px; align-items:center; margin:4px 0;';
  const mk = (label, tip) => {
    const b = document.createElement('button');
    b.textContent = label;
    b.title = tip;
    b.className = 'mgpu-player-' + tip.replace(/\s+/g, '-');
    return b;
  };
  // glyphs every font has (the media-control block U+23EE.. is missing in many)
  const first = mk('«', 'first'),
    back = mk('‹', 'step back'),
    play = mk('▶', 'play'),
    fwd = mk('›', 'step forward'),
    last = mk('»', 'last');
  const slider = document.createElement('input');
  slider.type = 'range';
  slider.min = 0;
  slider.className = 'mgpu-player-slider';
  const counter = document.createElement('span');
  counter.className = 'mgpu-player-counter';
  counter.style.minWidth = '90px';
  controls.append(first, back, play, fwd, last, slider, counter);
  let speed = null;
  if (speeds) {
    speed = document.createElement('select');
    speed.className = 'mgpu-player-speed';
    for (const s of speeds) {
      const o = document.createElement('option');
      o.value = s;
      o.textContent = s + '×';
      speed.append(o);
    }
    controls.append(speed);
    speed.onchange = () => {
      model.set('speed', parseFloat(speed.value));
      model.save_changes();
    };
  }

  let timer = null;
  const go = i => {
    const k = Math.max(0, Math.min(n() - 1, i));
    model.set('index', k);
    if (k === n() - 1 && !model.get('loop') && !live()) {
      model.set('playing', false);
    }
    model.save_changes();
  };
  const tick = () => {
    const i = model.get('index');
    if (i >= n() - 1) {
      if (model.get('loop')) {
        go(0);
      } else if (!live()) {
        model.set('playing', false);
        model.save_changes();
      }
    } else {
      go(i + 1);
    }
  };
  const syncTimer = () => {
    if (timer) {
      clearInterval(timer);
      timer = null;
    }
    const ms = Math.max(
      16,
      model.get('interval_ms') / (model.get('speed') || 1)
    );
    if (model.get('playing')) {
      timer = setInterval(tick, ms);
    }
  };
  const stopThen = f => () => {
    model.set('playing', false);
    f();
  };
  first.onclick = stopThen(() => go(0));
  back.onclick = stopThen(() => go(model.get('index') - 1));
  fwd.onclick = stopThen(() => go(model.get('index') + 1));
  last.onclick = stopThen(() => go(n() - 1));
  play.onclick = () => {
    if (model.get('playing')) {
      model.set('playing', false);
      model.save_changes();
      return;
    }
    if (model.get('index') >= n() - 1) {
      model.set('index', 0);
    }
    model.set('playing', true);
    model.save_changes();
  };
  slider.oninput = stopThen(() => go(parseInt(slider.value, 10)));
  model.on('change:playing', syncTimer);
  model.on('change:interval_ms', syncTimer);
  if (speed) {
    model.on('change:speed', syncTimer);
  }

  // show index i of n() frames, and the play button's state
  const show = i => {
    slider.max = Math.max(0, n() - 1);
    slider.value = i;
    counter.textContent = `step ${i} / ${n() - 1}`;
    const playing = model.get('playing');
    play.textContent = playing ? '||' : '▶';
    play.title = playing ? 'pause' : 'play';
    play.className = playing ? 'mgpu-player-pause' : 'mgpu-player-play';
    if (speed) {
      speed.value = String(model.get('speed'));
    }
  };
  const stop = () => {
    if (timer) {
      clearInterval(timer);
    }
  };
  return { controls, show, syncTimer, stop };
}
