// Memory dashboard view (anywidget ES module): one row per device — state badge, memory bar with
// reserved/peak/limit marks coloured by fraction used, and a 60 s timeline. All state comes from the
// Python model (devices, timeline, paused, refresh_rate, status); this file only draws it.

const SVG = "http://www.w3.org/2000/svg";
const RATES = [0.5, 1, 2, 5, 10, 20];

function fmtBytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function pct(value, scale) {
  if (value === null || value === undefined || !scale) return 0;
  return Math.max(0, Math.min(100, (100 * value) / scale));
}

function drawBar(d, scale) {
  const bar = el("div", "mgpu-mem-bar");
  if (d.baseline) {
    const base = el("div", "mgpu-mem-baseline");
    base.style.width = `${pct(Math.min(d.baseline, d.used || 0), scale)}%`;
    base.title = `engine runtime ${fmtBytes(d.baseline)}`;
    bar.appendChild(base);
  }
  if (d.reserved !== null && d.reserved !== undefined) {
    const res = el("div", "mgpu-mem-reserved");
    res.style.width = `${pct(d.reserved, scale)}%`;
    res.style.background = d.fill;
    res.title = `${d.labels.reserved} ${fmtBytes(d.reserved)}`;
    bar.appendChild(res);
  }
  const used = el("div", "mgpu-mem-used");
  used.style.width = `${pct(d.used, scale)}%`;
  used.style.background = d.fill;
  used.title = `${d.labels.used} ${fmtBytes(d.used)}`;
  bar.appendChild(used);
  if (d.peak) {
    const peak = el("div", "mgpu-mem-peak");
    peak.style.left = `${pct(d.peak, scale)}%`;
    peak.title = `${d.labels.peak} ${fmtBytes(d.peak)}`;
    bar.appendChild(peak);
  }
  if (d.limit) {
    const limit = el("div", "mgpu-mem-limit");
    limit.style.left = `${pct(d.limit, scale)}%`;
    limit.title = `${d.labels.limit} ${fmtBytes(d.limit)}`;
    bar.appendChild(limit);
  }
  return bar;
}

function drawTimeline(points, d, [lo, scale], window) {
  const w = 180;
  const h = 28;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "mgpu-mem-timeline");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const x = (ago) => w * (1 + ago / window);
  const y = (v) => h - (h - 2) * Math.max(0, Math.min(1, ((v || 0) - lo) / (scale - lo || 1))) - 1;
  if (d.limit && d.limit <= scale && d.limit >= lo) {
    const line = document.createElementNS(SVG, "line");
    line.setAttribute("x1", 0);
    line.setAttribute("x2", w);
    line.setAttribute("y1", y(d.limit));
    line.setAttribute("y2", y(d.limit));
    line.setAttribute("class", "mgpu-mem-timeline-limit");
    svg.appendChild(line);
  }
  if (points && points.length) {
    const path = document.createElementNS(SVG, "polyline");
    path.setAttribute("points", points.map(([ago, v]) => `${x(ago).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
    path.setAttribute("stroke", d.color);
    path.setAttribute("class", "mgpu-mem-timeline-line");
    svg.appendChild(path);
  }
  const title = document.createElementNS(SVG, "title");
  title.textContent = `rank ${d.rank}: ${d.labels.used} over the last ${window} s (${fmtBytes(lo)} to ${fmtBytes(scale)})`;
  svg.appendChild(title);
  return svg;
}

function render({ model, el: root }) {
  root.classList.add("mgpu-mem");
  const header = el("div", "mgpu-mem-header");
  const title = el("span", "mgpu-mem-title");
  const pause = el("button", "mgpu-mem-pause");
  const rate = el("select", "mgpu-mem-rate");
  for (const r of RATES) {
    const opt = el("option", "", `${r} Hz`);
    opt.value = String(r);
    rate.appendChild(opt);
  }
  const status = el("span", "mgpu-mem-status");
  header.append(title, pause, rate, status);
  const rows = el("div", "mgpu-mem-rows");
  root.append(header, rows);

  pause.addEventListener("click", () => {
    model.set("paused", !model.get("paused"));
    model.save_changes();
  });
  rate.addEventListener("change", () => {
    model.set("refresh_rate", parseFloat(rate.value));
    model.save_changes();
  });

  function drawControls() {
    title.textContent = `Device memory — ${model.get("title")}`;
    pause.textContent = model.get("paused") ? "resume" : "pause";
    pause.title = model.get("paused") ? "resume live updates (every view)" : "pause live updates (every view)";
    const r = model.get("refresh_rate");
    if (!RATES.includes(r)) {
      const opt = el("option", "", `${r} Hz`);
      opt.value = String(r);
      rate.appendChild(opt);
    }
    rate.value = String(r);
    status.textContent = model.get("status") || "";
  }

  function drawRows() {
    const devices = model.get("devices") || [];
    const timeline = model.get("timeline") || [];
    const window = model.get("window") || 60;
    // bars share one scale up to the largest limit (as in Dask); timelines share one scale that fits
    // what they show, so a 64 MiB step stays visible next to a 16 GiB limit
    const scale = Math.max(1, ...devices.map((d) => Math.max(d.limit || 0, d.reserved || 0, d.peak || 0, d.used || 0)));
    const seen = timeline.flatMap((pts) => (pts || []).map(([, v]) => v || 0));
    const thigh = Math.max(1, ...seen, ...devices.map((d) => d.used || 0));
    const tlow = seen.length ? Math.min(...seen) : 0;
    const tscale = [Math.max(0, tlow - 0.1 * (thigh - tlow) - 0.05 * thigh), thigh + 0.1 * (thigh - tlow) + 0.05 * thigh];
    rows.replaceChildren();
    devices.forEach((d, i) => {
      const row = el("div", `mgpu-mem-row mgpu-state-${d.state}`);
      row.dataset.rank = d.rank;
      const label = el("div", "mgpu-mem-label");
      const dot = el("span", "mgpu-mem-dot");
      dot.style.background = d.color;
      label.append(dot, el("span", "", `rank ${d.rank} · ${d.device}`));
      const badge = el("span", `mgpu-mem-badge mgpu-badge-${d.state}`, d.state);
      if (d.op && d.state === "busy") badge.title = d.op;
      const text = el("div", "mgpu-mem-text",
        `${fmtBytes(d.used)}${d.limit ? ` / ${fmtBytes(d.limit)}` : ""}` +
        (d.peak ? ` · peak ${fmtBytes(d.peak)}` : "") +
        (d.reserved !== null && d.reserved !== undefined ? ` · reserved ${fmtBytes(d.reserved)}` : ""));
      row.append(label, badge, drawBar(d, scale), text, drawTimeline(timeline[i], d, tscale, window));
      rows.appendChild(row);
    });
  }

  // Pause and rate act here at once, for every view of this model: a kernel busy in another cell
  // reads the new values only when that cell ends, and keeps sending samples until then.
  let lastDraw = 0;
  let timer = null;
  function scheduleRows() {
    if (model.get("paused")) return;
    const interval = 1000 / (model.get("refresh_rate") || 10);
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
  model.on("change:paused", onControls);
  model.on("change:refresh_rate", onControls);
  model.on("change:status", onControls);
  model.on("change:title", onControls);
  model.on("change:devices", onRows);
  model.on("change:timeline", onRows);
  drawControls();
  drawRows();
  return () => {
    if (timer !== null) clearTimeout(timer);
    model.off("change:paused", onControls);
    model.off("change:refresh_rate", onControls);
    model.off("change:status", onControls);
    model.off("change:title", onControls);
    model.off("change:devices", onRows);
    model.off("change:timeline", onRows);
  };
}

export default { render };
