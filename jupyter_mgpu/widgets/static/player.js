// FramePlayer front end: shows frames[index] (pre-rendered SVG/HTML) with play/pause/step controls.
// Generic: the collectives' logical schedule and the placement replay both use it.

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mgpu-player";
  root.style.cssText = "font: 13px sans-serif; display: inline-block;";
  const head = document.createElement("div");
  head.style.cssText = "display:flex; gap:8px; align-items:center; margin-bottom:4px;";
  const badge = document.createElement("span");
  badge.style.cssText = "background:#eef; border:1px solid #99c; border-radius:3px; padding:0 5px; font-size:11px;";
  const title = document.createElement("b");
  head.append(badge, title);
  const controls = document.createElement("div");
  controls.style.cssText = "display:flex; gap:4px; align-items:center; margin:4px 0;";
  const mk = (label, tip) => {
    const b = document.createElement("button");
    b.textContent = label;
    b.title = tip;
    b.className = "mgpu-player-" + tip.replace(/\s+/g, "-");
    return b;
  };
  // glyphs every font has (the media-control block U+23EE.. is missing in many)
  const first = mk("«", "first"), back = mk("‹", "step back"), play = mk("▶", "play"),
        fwd = mk("›", "step forward"), last = mk("»", "last");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.min = 0;
  const counter = document.createElement("span");
  counter.style.minWidth = "70px";
  controls.append(first, back, play, fwd, last, slider, counter);
  const caption = document.createElement("div");
  caption.style.cssText = "color:#444; margin:2px 0 6px 0;";
  const stage = document.createElement("div");
  root.append(head, controls, caption, stage);
  el.appendChild(root);

  let timer = null;
  const n = () => model.get("frames").length;
  const go = (i) => {
    const k = Math.max(0, Math.min(n() - 1, i));
    model.set("index", k);
    if (k === n() - 1 && !model.get("loop")) model.set("playing", false);
    model.save_changes();
  };
  const tick = () => {
    const i = model.get("index");
    if (i >= n() - 1) {
      if (model.get("loop")) go(0); else { model.set("playing", false); model.save_changes(); }
    } else go(i + 1);
  };
  const sync = () => {
    const i = model.get("index");
    stage.innerHTML = model.get("frames")[i] || "";
    caption.textContent = (model.get("captions")[i] || "");
    caption.style.display = model.get("show_captions") ? "" : "none";
    badge.textContent = model.get("badge");
    badge.style.display = model.get("badge") ? "" : "none";
    title.textContent = model.get("title");
    slider.max = Math.max(0, n() - 1);
    slider.value = i;
    counter.textContent = `step ${i} / ${n() - 1}`;
    play.textContent = model.get("playing") ? "||" : "▶";
    play.title = model.get("playing") ? "pause" : "play";
  };
  const syncTimer = () => {
    if (timer) { clearInterval(timer); timer = null; }
    if (model.get("playing")) timer = setInterval(tick, Math.max(50, model.get("interval_ms")));
  };
  first.onclick = () => go(0);
  back.onclick = () => { model.set("playing", false); go(model.get("index") - 1); };
  fwd.onclick = () => { model.set("playing", false); go(model.get("index") + 1); };
  last.onclick = () => { model.set("playing", false); go(n() - 1); };
  play.onclick = () => {
    if (model.get("playing")) { model.set("playing", false); model.save_changes(); return; }
    if (model.get("index") >= n() - 1) model.set("index", 0);
    model.set("playing", true);
    model.save_changes();
  };
  slider.oninput = () => { model.set("playing", false); go(parseInt(slider.value, 10)); };
  for (const name of ["index", "frames", "captions", "badge", "title", "playing", "show_captions"]) {
    model.on(`change:${name}`, sync);
  }
  model.on("change:playing", syncTimer);
  model.on("change:interval_ms", syncTimer);
  sync();
  syncTimer();
  return () => { if (timer) clearInterval(timer); };
}

export default { render };
