"""The pipeline schedule player: stages × time, one frame per forward/backward as the ranks ran them.

``schedule_data`` turns a :class:`~jupyter_mgpu.comparison.pipeline_schedule.ScheduleTrace` into compact data (steps of
boxes and arrows, frames = (step, boxes shown)); a bar beside each stage splits the whole step's time into
computing, bubble and other (``comparison/pipeline_idle.py``), with a legend. The browser (``static/schedule.js``, with the shared
transport controls) draws frame ``index`` from it, so stepping needs no message to the kernel. The
same drawing exists here as a static SVG (``static_svg``) for exported notebooks, and
``save_html`` writes a page that plays without a kernel. State lives in synced traitlets, so the
player is testable without a browser.

The other half: ``comparison/pipeline_schedule.py``, the data it draws.
"""

from __future__ import annotations

import html
import os
from typing import Any

import traitlets

from jupyter_mgpu.widgets import standalone_page
from jupyter_mgpu.widgets.colors import TAB20_LIGHT, rank_color
from jupyter_mgpu.widgets.transport import TransportWidget, module_source

ESM = module_source("schedule.js")
W, LEFT, RIGHT, TOP, ROW, GAP = 880, 120, 136, 64, 30, 6
KIND = ("forward", "backward")
SPLIT = (("busy", "#555555"), ("bubble", "#c4c4c4"), ("other", "url(#mgpu-sched-other)"))
LEGEND = (  # x, fill, label: what the boxes and the bars' three parts mean
    (8, None, "forward"),
    (78, None, "backward"),
    (160, "#555555", "computing"),
    (240, "#c4c4c4", "bubble: waiting for work still being computed"),
    (500, "url(#mgpu-sched-other)", "other: messages, overhead, waiting for a core"),
)
DEFS = (
    "<defs><marker id='mgpu-sched-head' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='5' markerHeight='5' "
    "orient='auto'><path d='M0,0 L10,5 L0,10 z' fill='#555'/></marker><pattern id='mgpu-sched-other' width='4' "
    "height='4' patternUnits='userSpaceOnUse' patternTransform='rotate(45)'><rect width='4' height='4' "
    "fill='#fff4e0'/><rect width='2' height='4' fill='#e69f2c'/></pattern></defs>"
)


def schedule_data(trace: Any) -> dict[str, Any]:
    """The player's data for ``trace`` (a ScheduleTrace): steps, frames and the bubble figures."""
    steps = trace.steps()
    frames = [[i, n] for i, s in enumerate(steps) for n in range(1, len(s["boxes"]) + 1)]
    bubble = trace.bubble()
    return {
        "stages": trace.world_size,
        "colors": [rank_color(r) for r in range(trace.world_size)],
        "light": [TAB20_LIGHT[r % len(TAB20_LIGHT)] for r in range(trace.world_size)],
        "microbatches": trace.microbatches,
        "schedule": trace.schedule_name,
        "timed_from": trace.timed_from,
        "expected_bubble": trace.expected_bubble,
        "bubble": bubble,
        "steps": [
            {k: s[k] for k in ("step", "span", "boxes", "arrows", "idle", "busy", "bubble", "other")} for s in steps
        ],
        "frames": frames,
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def caption(data: dict[str, Any], index: int) -> tuple[str, str]:
    """The two caption lines of frame ``index``: what happens, and the bubble measured vs predicted."""
    si, n = data["frames"][index]
    st = data["steps"][si]
    stage, kind, mb, a, b = st["boxes"][n - 1][:5]
    phase = (
        "timed"
        if st["step"] >= data["timed_from"]
        else ("measured" if st["step"] == data["timed_from"] - 1 else "warm-up")
    )
    line1 = (
        f"training step {st['step']} ({phase}) · stage {stage} {KIND[kind]} of micro-batch {mb} · "
        f"{1000 * a:.1f}–{1000 * b:.1f} ms of {1000 * st['span']:.1f} ms"
    )
    measured = ", ".join(_pct(x) for x in data["bubble"])
    line2 = (
        f"bubble per stage, share of computing + bubble (timed steps): {measured} · formula (p−1)/(m+p−1) = "
        f"{_pct(data['expected_bubble'])}"
    )
    return line1, line2


def _waited(wait: list[float]) -> str:
    return f", {1000 * wait[0]:.2f} ms of it waiting for a core" if wait and wait[0] >= 5e-6 else ""


def _legend(data: dict[str, Any]) -> str:
    """The key under the captions: the two kinds of box, and the three parts of each stage's bar."""
    y, parts = 40, []
    for x, fill, label in LEGEND:
        color = fill or (data["light"][0] if label == "forward" else data["colors"][0])
        parts.append(
            f"<rect x='{x}' y='{y}' width='11' height='11' fill='{color}' stroke='#999' stroke-width='0.5'/>"
            f"<text x='{x + 15}' y='{y + 9.5}' font-size='10.5' fill='#333'>{html.escape(label)}</text>"
        )
    return f"<g class='mgpu-sched-legend'>{''.join(parts)}</g>"


def _split_bar(st: dict[str, Any], s: int, y: float) -> str:
    """Stage ``s``'s time in step ``st`` as a bar (computing | bubble | other) and its figures."""
    span, x0, width = st["span"], W - RIGHT + 8, RIGHT - 12
    parts, x = [], float(x0)
    for key, fill in SPLIT:
        w = width * max(0.0, st[key][s]) / span if span > 0 else 0.0
        parts.append(f"<rect x='{x:.1f}' y='{y + 2}' width='{w:.1f}' height='11' fill='{fill}'/>")
        x += w
    tip = ", ".join(f"{k} {1000 * st[k][s]:.1f} ms ({_pct(st[k][s] / span)})" for k, _ in SPLIT)
    return (
        f"<g class='mgpu-sched-split'><title>stage {s}, this step: {tip}</title>{''.join(parts)}"
        f"<rect x='{x0}' y='{y + 2}' width='{width}' height='11' fill='none' stroke='#999' stroke-width='0.5'/>"
        f"<text class='mgpu-sched-idle' x='{x0}' y='{y + ROW - 3}' font-size='10'>bubble "
        f"{_pct(st['bubble'][s] / span)} · other {_pct(st['other'][s] / span)}</text></g>"
    )


def static_svg(data: dict[str, Any], index: int = -1) -> str:
    """Frame ``index`` (default the last: a whole step) as an SVG that scales to its container."""
    if not data.get("frames"):
        return (
            "<svg xmlns='http://www.w3.org/2000/svg' width='240' height='30'><text y='20' font-size='12' "
            "font-family='sans-serif'>no events yet</text></svg>"
        )
    i = index % len(data["frames"])
    si, n = data["frames"][i]
    st = data["steps"][si]
    P, span = data["stages"], st["span"]
    height = TOP + P * (ROW + GAP) + 26
    scale = (W - LEFT - RIGHT) / span
    cur = st["boxes"][n - 1]
    now = cur[3]
    l1, l2 = caption(data, i)
    parts = [
        f"<text x='8' y='16' font-size='13' font-weight='bold'>{html.escape(l1)}</text>",
        f"<text x='8' y='33' font-size='11' fill='#444'>{html.escape(l2)}</text>",
        _legend(data),
    ]
    for s in range(P):
        y = TOP + s * (ROW + GAP)
        parts.append(f"<rect x='{LEFT}' y='{y}' width='{W - LEFT - RIGHT}' height='{ROW}' fill='#f1f1f1'/>")
        parts.append(f"<text x='8' y='{y + ROW / 2 + 4}' font-size='12'>stage {s} · rank {s}</text>")
    for j, (s, kind, mb, a, b, *wait) in enumerate(st["boxes"][:n]):
        y = TOP + s * (ROW + GAP)
        x, w = LEFT + a * scale, max(1.5, (b - a) * scale)
        fill = data["colors"][s] if kind else data["light"][s]
        stroke = " stroke='#000' stroke-width='2'" if j == n - 1 else " stroke='#fff' stroke-width='0.5'"
        parts.append(
            f"<g class='mgpu-sched-box' data-stage='{s}' data-kind='{KIND[kind]}' data-mb='{mb}'>"
            f"<title>stage {s} {KIND[kind]} of micro-batch {mb}: {1000 * a:.2f}–{1000 * b:.2f} ms{_waited(wait)}</title>"
            f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{ROW}' fill='{fill}'{stroke}/>"
        )
        if w > 18:
            parts.append(
                f"<text x='{x + w / 2:.1f}' y='{y + ROW / 2 + 4}' font-size='10' text-anchor='middle'>"
                f"{'FB'[kind]}{mb}</text>"
            )
        parts.append("</g>")
    for src, dst, kind, mb, ts, tr_, nbytes in st["arrows"]:
        if tr_ > now + 1e-9:
            continue
        y1 = TOP + src * (ROW + GAP) + (ROW if dst > src else 0)
        y2 = TOP + dst * (ROW + GAP) + (0 if dst > src else ROW)
        parts.append(
            f"<line class='mgpu-sched-arrow' x1='{LEFT + ts * scale:.1f}' y1='{y1}' x2='{LEFT + tr_ * scale:.1f}' "
            f"y2='{y2}' stroke='#555' stroke-width='1' marker-end='url(#mgpu-sched-head)'/>"
        )
    if "busy" in st:  # the whole step's split, whichever of its boxes are drawn yet
        parts.append(
            f"<text x='{W - RIGHT + 8}' y='{TOP - 4}' font-size='10' fill='#444'>step {st['step']}'s wall time:</text>"
        )
        for s in range(P):
            parts.append(_split_bar(st, s, TOP + s * (ROW + GAP)))
    axis = TOP + P * (ROW + GAP) + 14
    parts.append(
        f"<text x='{LEFT}' y='{axis}' font-size='10'>0 ms</text><text x='{W - RIGHT}' y='{axis}' "
        f"font-size='10' text-anchor='end'>{1000 * span:.1f} ms</text>"
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' class='mgpu-schedule-svg' viewBox='0 0 {W} {height}' "
        f"width='100%' style='max-width:{W}px' font-family='sans-serif'>{DEFS}{''.join(parts)}</svg>"
    )


class ScheduleWidget(TransportWidget):
    """Plays ``data`` (see :func:`schedule_data`) frame by frame: « ‹ ▶ › » and a slider."""

    _esm = ESM
    data = traitlets.Dict().tag(sync=True)
    interval_ms = traitlets.Int(250).tag(sync=True)
    speed = traitlets.Float(1.0).tag(sync=True)
    live = traitlets.Bool(False).tag(sync=True)
    follow = traitlets.Bool(True).tag(sync=True)

    @property
    def n_frames(self) -> int:
        return len(self.data.get("frames", []))

    def svg(self, index: int | None = None) -> str:
        """Frame ``index`` (default: the current one) as a static SVG."""
        return static_svg(self.data, self.index if index is None else index)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The live widget plus the last frame as a static picture for exports."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):
            data["text/html"] = f"<div class='mgpu-schedule-static'>{self.svg(-1)}</div>"
            data["text/plain"] = f"<{self.title or 'pipeline schedule'}: {self.n_frames} frame(s)>"
        return bundle

    def save_html(self, path: str | os.PathLike[str]) -> str:
        """Write a standalone page that plays this schedule without a kernel; returns the path."""
        return save_html(self.data, path, title=self.title, badge=self.badge)


def standalone_html(data: dict[str, Any], title: str = "", badge: str = "") -> str:
    """One self-contained page that plays ``data`` without a kernel."""
    state = {
        "data": data,
        "index": 0,
        "playing": False,
        "interval_ms": 250,
        "speed": 1.0,
        "loop": False,
        "live": False,
        "follow": False,
        "title": title,
        "badge": badge,
    }
    return standalone_page.page(ESM, state, title or "pipeline schedule")


def save_html(data: dict[str, Any], path: str | os.PathLike[str], title: str = "", badge: str = "") -> str:
    """Write :func:`standalone_html` to ``path`` atomically (a failure leaves nothing behind)."""
    return standalone_page.write(standalone_html(data, title, badge), path)
