// Pipeline schedule player (anywidget ES module, transport.js prepended by widgets/transport.py):
// stages × time of one training step, drawn from the ranks' real forward/backward/send/recv events.
// Frame i shows step frames[i][0] with its first frames[i][1] boxes (in start order), the newest
// outlined, and the sends already received as arrows. Mirrors static_svg in widgets/pipeline_schedule.py.
// Also used, unchanged, by the standalone HTML page (a tiny in-page model stands in for the widget's).

const W = 880, LEFT = 120, RIGHT = 96, TOP = 46, ROW = 30, GAP = 6;
const KIND = ["forward", "backward"];
const escS = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const pct = (x) => (x === null || x === undefined) ? "–" : `${Math.round(100 * x)}%`;

function captionOf(data, i) {
  const [si, n] = data.frames[i];
  const st = data.steps[si];
  const [stage, kind, mb, a, b] = st.boxes[n - 1];
  const phase = st.step >= data.timed_from ? "timed" : (st.step === data.timed_from - 1 ? "measured" : "warm-up");
  const l1 = `training step ${st.step} (${phase}) · stage ${stage} ${KIND[kind]} of micro-batch ${mb} · ` +
    `${(1000 * a).toFixed(1)}–${(1000 * b).toFixed(1)} ms of ${(1000 * st.span).toFixed(1)} ms`;
  const l2 = `idle per stage (median of timed steps): ${(data.bubble || []).map(pct).join(", ")} · ` +
    `formula (p−1)/(m+p−1) = ${pct(data.expected_bubble)} (bubble ÷ compute (p−1)/m = ` +
    `${pct((data.stages - 1) / data.microbatches)})`;
  return [l1, l2];
}

function drawSchedule(data, i) {
  const [si, n] = data.frames[i];
  const st = data.steps[si];
  const P = data.stages, scale = (W - LEFT - RIGHT) / st.span, height = TOP + P * (ROW + GAP) + 26;
  const now = st.boxes[n - 1][3];
  const [l1, l2] = captionOf(data, i);
  const parts = [`<text x="8" y="16" font-size="13" font-weight="bold">${escS(l1)}</text>`,
    `<text x="8" y="34" font-size="11" fill="#444">${escS(l2)}</text>`];
  for (let s = 0; s < P; s++) {
    const y = TOP + s * (ROW + GAP);
    parts.push(`<rect x="${LEFT}" y="${y}" width="${W - LEFT - RIGHT}" height="${ROW}" fill="#f1f1f1"/>`);
    parts.push(`<text x="8" y="${y + ROW / 2 + 4}" font-size="12">stage ${s} · rank ${s}</text>`);
  }
  st.boxes.slice(0, n).forEach(([s, kind, mb, a, b], j) => {
    const y = TOP + s * (ROW + GAP), x = LEFT + a * scale, w = Math.max(1.5, (b - a) * scale);
    const fill = kind ? data.colors[s] : data.light[s];
    const stroke = j === n - 1 ? ' stroke="#000" stroke-width="2"' : ' stroke="#fff" stroke-width="0.5"';
    parts.push(`<g class="mgpu-sched-box" data-stage="${s}" data-kind="${KIND[kind]}" data-mb="${mb}">` +
      `<title>stage ${s} ${KIND[kind]} of micro-batch ${mb}: ${(1000 * a).toFixed(2)}–${(1000 * b).toFixed(2)} ms</title>` +
      `<rect x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${ROW}" fill="${fill}"${stroke}/>`);
    if (w > 18) parts.push(`<text x="${(x + w / 2).toFixed(1)}" y="${y + ROW / 2 + 4}" font-size="10" ` +
      `text-anchor="middle">${"FB"[kind]}${mb}</text>`);
    parts.push("</g>");
  });
  for (const [src, dst, , , ts, tr] of st.arrows) {
    if (tr > now + 1e-9) continue;
    const y1 = TOP + src * (ROW + GAP) + (dst > src ? ROW : 0), y2 = TOP + dst * (ROW + GAP) + (dst > src ? 0 : ROW);
    parts.push(`<line class="mgpu-sched-arrow" x1="${(LEFT + ts * scale).toFixed(1)}" y1="${y1}" ` +
      `x2="${(LEFT + tr * scale).toFixed(1)}" y2="${y2}" stroke="#555" stroke-width="1" marker-end="url(#mgpu-sched-head)"/>`);
  }
  if (n === st.boxes.length) {
    for (let s = 0; s < P; s++) {
      const y = TOP + s * (ROW + GAP);
      parts.push(`<text class="mgpu-sched-idle" x="${W - RIGHT + 6}" y="${y + ROW / 2 + 4}" font-size="11">idle ${pct(st.idle[s])}</text>`);
    }
  }
  const axis = TOP + P * (ROW + GAP) + 14;
  parts.push(`<text x="${LEFT}" y="${axis}" font-size="10">0 ms</text><text x="${W - RIGHT}" y="${axis}" ` +
    `font-size="10" text-anchor="end">${(1000 * st.span).toFixed(1)} ms</text>`);
  return `<svg xmlns="http://www.w3.org/2000/svg" class="mgpu-schedule-svg" viewBox="0 0 ${W} ${height}" ` +
    `width="100%" style="max-width:${W}px" font-family="sans-serif"><defs><marker id="mgpu-sched-head" ` +
    `viewBox="0 0 10 10" refX="9" refY="5" markerWidth="5" markerHeight="5" orient="auto">` +
    `<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>${parts.join("")}</svg>`;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mgpu-schedule mgpu-player";
  root.style.cssText = "font: 13px sans-serif; display: block; max-width: 100%; " + PLAYER_CARD;
  const { head, badge, title } = playerHead();
  const stage = document.createElement("div");
  stage.className = "mgpu-schedule-stage";
  const n = () => ((model.get("data") || {}).frames || []).length;
  const t = transport(model, n, { live: () => model.get("live"), speeds: [0.25, 0.5, 1, 2, 4, 8] });
  t.controls.style.flexWrap = "wrap";
  root.append(head, t.controls, stage);
  el.appendChild(root);

  const sync = () => {
    badge.textContent = model.get("badge"); badge.style.display = model.get("badge") ? "" : "none";
    title.textContent = model.get("title");
    const i = Math.max(0, Math.min(n() - 1, model.get("index")));
    if (!n()) stage.textContent = model.get("live") ? "waiting for the pipeline's first events…" : "nothing to show";
    else stage.innerHTML = drawSchedule(model.get("data"), i);
    t.show(i);
    if (!n()) t.controls.querySelector(".mgpu-player-counter").textContent = "no events yet";
  };
  model.on("change:data", () => {
    if (model.get("live") && model.get("follow")) { model.set("index", Math.max(0, n() - 1)); model.save_changes(); }
    sync();
  });
  for (const name of ["index", "badge", "title", "playing", "speed", "live"]) model.on(`change:${name}`, sync);
  sync(); t.syncTimer();
  return t.stop;
}

export default { render };
