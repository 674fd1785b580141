"""Views of a collective benchmark: the nccl-tests style table (text and HTML) and the busbw plot.

The table follows nccl-tests' layout (size, count, type, redop, root, time, algbw, busbw, #wrong),
one block per collective; the plot is plotly (busbw in GB/s against size on a log axis, one line
per collective). :func:`busbw_svg` draws the same plot as plain SVG for exported notebooks.
"""

from __future__ import annotations

import html
import math
from typing import Any

# Lines are told apart by dash and marker, in greys: the project's colours stand for ranks only
STYLES = (
    ("#222222", "solid", "circle", ""),
    ("#555555", "dash", "square", "6 3"),
    ("#777777", "dot", "diamond", "2 3"),
    ("#333333", "dashdot", "triangle-up", "8 3 2 3"),
    ("#999999", "longdash", "x", "10 4"),
)

HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       ",
)


def _root(r: dict[str, Any]) -> str:
    """The root rank, or "-" for a collective without one (nccl-tests prints -1)."""
    return str(r["root"]) if r["root"] >= 0 else "-"


def _row_text(r: dict[str, Any]) -> str:
    return (
        f"{r['size']:12d}  {r['count']:12d}  {r['dtype']:>8s}  {r['redop']:>6s}  {_root(r):>6s}  "
        f"{r['time_us']:7.1f}  {r['algbw']:6.2f}  {r['busbw']:6.2f}  {r['wrong']:5d}"
    )


def table_text(result: Any) -> str:
    """The table as text: a header naming the run, then one block per collective (nccl-tests layout)."""
    lines = [
        f"# jupyter_mgpu collective benchmark: {result.world_size} ranks, {result.backend}, "
        f"{result.iters} iterations after {result.warmup} warm-up, barrier before each, slowest rank's time"
    ]
    current = None
    for r in result.rows:
        if r["collective"] != current:
            current = r["collective"]
            lines += ["#", f"# {current}", *HEADER]
        lines.append(_row_text(r))
    lines.append("# Out of bounds values : 0 OK" if result.wrong == 0 else f"# {result.wrong} wrong result elements")
    return "\n".join(lines)


def table_html(result: Any) -> str:
    """The table as HTML (one table, a collective column), wrong counts in red."""
    cols = (
        "collective",
        "size (B)",
        "count",
        "type",
        "redop",
        "root",
        "time (us)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "#wrong",
    )
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = []
    for r in result.rows:
        style = " style='color:#c00;font-weight:bold'" if r["wrong"] else ""
        cells = (
            r["collective"],
            _size(r["size"]),
            str(r["count"]),
            r["dtype"],
            r["redop"],
            _root(r),
            f"{r['time_us']:.1f}",
            f"{r['algbw']:.3f}",
            f"{r['busbw']:.3f}",
        )
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        body.append(f"<tr>{tds}<td{style}>{r['wrong']}</td></tr>")
    caption = (
        f"{result.world_size} ranks, {result.backend}: {result.iters} iterations after {result.warmup} "
        "warm-up, barrier before each, slowest rank's time; busbw factors of nccl-tests"
    )
    return (
        f"<table class='mgpu-bench'><caption style='caption-side:top;text-align:left'>{html.escape(caption)}"
        f"</caption><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _size(b: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b} B"


def _series(result: Any) -> dict[str, list[dict[str, Any]]]:
    series: dict[str, list[dict[str, Any]]] = {}
    for r in result.rows:
        if r["size"] > 0 and r["collective"] != "barrier":
            series.setdefault(r["collective"], []).append(r)
    return series


def busbw_figure(result: Any) -> Any:
    """plotly figure: busbw (GB/s) against size (log axis), one line per collective."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (name, rows) in enumerate(_series(result).items()):
        fig.add_trace(
            go.Scatter(
                x=[r["size"] for r in rows],
                y=[r["busbw"] for r in rows],
                mode="lines+markers",
                name=name,
                line={"color": STYLES[i % len(STYLES)][0], "dash": STYLES[i % len(STYLES)][1]},
                marker={"symbol": STYLES[i % len(STYLES)][2], "size": 8, "color": STYLES[i % len(STYLES)][0]},
                customdata=[[_size(r["size"]), r["time_us"], r["algbw"], r["wrong"]] for r in rows],
                hovertemplate=(
                    "%{customdata[0]}: busbw %{y:.3f} GB/s, algbw %{customdata[2]:.3f} GB/s, "
                    "%{customdata[1]:.1f} us, #wrong %{customdata[3]}<extra>" + name + "</extra>"
                ),
            )
        )
    fig.update_layout(
        title=f"busbw vs size — {result.world_size} ranks, {result.backend}",
        xaxis={"type": "log", "title": "size (bytes)"},
        yaxis={"title": "busbw (GB/s)"},
        template="plotly_white",
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def busbw_svg(result: Any, width: int = 640, height: int = 340) -> str:
    """The busbw plot as a small hand-written SVG (for static exports; no kaleido needed)."""
    series = _series(result)
    pts = [r for rows in series.values() for r in rows]
    left, right, top, bottom = 60, 140, 30, 40
    pw, ph = width - left - right, height - top - bottom
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' style='background:#fff;max-width:100%;height:auto' "
        "font-family='sans-serif' font-size='11'>",
        f"<text x='{left}' y='18' font-size='13' font-weight='bold'>busbw vs size — {result.world_size} ranks, "
        f"{html.escape(result.backend)}</text>",
        f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>",
    ]
    if pts:
        lx = [math.log2(r["size"]) for r in pts]
        x0, x1 = min(lx), max(lx) if max(lx) > min(lx) else min(lx) + 1
        y1 = max(r["busbw"] for r in pts) * 1.1 or 1.0

        def px(size: int) -> float:
            return left + (math.log2(size) - x0) / (x1 - x0) * pw

        def py(v: float) -> float:
            return top + ph - v / y1 * ph

        for k in range(5):
            v = y1 * k / 4
            parts.append(f"<text x='{left - 6}' y='{py(v) + 4:.1f}' text-anchor='end'>{v:.2f}</text>")
        for size in sorted({r["size"] for r in pts}):
            parts.append(
                f"<text x='{px(size):.1f}' y='{top + ph + 14}' text-anchor='middle'>{html.escape(_size(size))}</text>"
            )
        for i, (name, rows) in enumerate(series.items()):
            color, _, marker, dash = STYLES[i % len(STYLES)]
            dashes = f" stroke-dasharray='{dash}'" if dash else ""
            path = " ".join(
                f"{'M' if j == 0 else 'L'} {px(r['size']):.1f} {py(r['busbw']):.1f}" for j, r in enumerate(rows)
            )
            parts.append(f"<path d='{path}' fill='none' stroke='{color}' stroke-width='2'{dashes}/>")
            parts += [_marker(marker, px(r["size"]), py(r["busbw"]), color) for r in rows]
            ly = top + 16 * i + 5
            parts.append(
                f"<path d='M {width - right + 6} {ly} h 22' stroke='{color}' stroke-width='2'{dashes}/>"
                + _marker(marker, width - right + 17, ly, color)
                + f"<text x='{width - right + 34}' y='{ly + 4}'>{html.escape(name)}</text>"
            )
    parts.append(f"<text x='{left + pw / 2}' y='{height - 6}' text-anchor='middle'>size (bytes, log scale)</text>")
    parts.append(
        f"<text x='14' y='{top + ph / 2}' transform='rotate(-90 14 {top + ph / 2})' "
        "text-anchor='middle'>busbw (GB/s)</text></svg>"
    )
    return "".join(parts)


def _marker(shape: str, x: float, y: float, color: str) -> str:
    """A small SVG marker of plotly's ``shape`` name at (x, y)."""
    if shape == "square":
        return f"<rect x='{x - 3:.1f}' y='{y - 3:.1f}' width='6' height='6' fill='{color}'/>"
    if shape == "diamond":
        return f"<path d='M {x:.1f} {y - 4:.1f} l 4 4 l -4 4 l -4 -4 z' fill='{color}'/>"
    if shape == "triangle-up":
        return f"<path d='M {x:.1f} {y - 4:.1f} l 4 7 h -8 z' fill='{color}'/>"
    if shape == "x":
        return f"<path d='M {x - 3:.1f} {y - 3:.1f} l 6 6 m -6 0 l 6 -6' stroke='{color}' stroke-width='1.5'/>"
    return f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='{color}'/>"
