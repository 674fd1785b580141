"""Static SVG of one frame of placement data (the picture exported notebooks and terminals-with-HTML keep).

Mirrors ``static/placement.js`` (the same positions, from ``placement_geometry.py``, the same colours,
classes, labels and arrows): one caption (wrapped, never repeated by a panel title), the panels of
tiles with each tile's holders printed where they fit, and the rank legend (each rank's colour, number
and bytes held) below, in rows. One difference: a still picture is laid out for its one frame (no
room for arrows it does not have); the player keeps the room on every frame, so nothing jumps.
"""

from __future__ import annotations

import html
from typing import Any

from jupyter_mgpu.units import format_bytes
from jupyter_mgpu.widgets import placement_geometry as geom
from jupyter_mgpu.widgets.placement_data import visible_at

STRIPE = 6.0  # px: the stripes of a tile held by several ranks (the same in static/placement.js)
HATCH = (
    '<defs><marker id="mgpu-head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
    'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker>'
    '<pattern id="mgpu-hatch" patternUnits="userSpaceOnUse" width="6" height="6">'
    '<path d="M0,6 L6,0" stroke="#fff" stroke-width="1.2" opacity="0.7"/></pattern></defs>'
)
F = geom.MIN_FONT


def _text(x: float, y: float, body: str, size: int, width: float = 0, extra: str = "") -> str:
    """A ``<text>``; squeezed to ``width`` (``textLength``) when it would be wider."""
    fit = (
        f' textLength="{width:.1f}" lengthAdjust="spacingAndGlyphs"'
        if width and geom.text_width(body, size) > width
        else ""
    )
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}"{fit}{extra}>{html.escape(body)}</text>'


def _tile(
    data: dict[str, Any], pi: int, ti: int, rect: tuple[float, float, float, float], ranks: list[int]
) -> list[str]:
    x, y, w, h = rect
    p = data["panels"][pi]
    r0, r1, c0, c1 = p["tiles"][ti]
    colors, partial = data["colors"], data.get("partial", "")
    tip = (
        data["tips"][pi][ti]
        if data.get("tips")
        else (
            f"{'held by rank ' + ', '.join(map(str, ranks)) if ranks else 'held by no rank'}\n"
            f"rows {r0}:{r1}, cols {c0}:{c1}"
        )
    )
    out = [f'<g class="mgpu-tile" data-owners="{" ".join(map(str, ranks))}"><title>{html.escape(tip)}</title>']
    if not ranks:
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#fff" stroke="#ccc" '
            'stroke-width="0.5"/>'
        )
        return out + ["</g>"]
    # one holder: its colour; several (replicas): thin stripes of each holder's colour
    sw = min(STRIPE, w / len(ranks)) if len(ranks) > 1 else w
    k = 0
    while k * sw < w - 0.01:
        out.append(
            f'<rect x="{x + k * sw:.1f}" y="{y:.1f}" width="{min(sw, w - k * sw):.1f}" height="{h:.1f}" '
            f'fill="{colors[ranks[k % len(ranks)]]}"/>'
        )
        k += 1
    if partial:  # every rank holds a full-size operand; the value is their reduction (hatched)
        out.append(
            f'<rect class="mgpu-partial" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
            'fill="url(#mgpu-hatch)"/>'
        )
    out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="none" stroke="#fff"/>')
    return out + ["</g>"]


def _label(data: dict[str, Any], rect: tuple[float, float, float, float], ranks: list[int]) -> str:
    """The holders of a run of tiles, printed across it or turned up, where it fits (else nothing)."""
    if not ranks:
        return ""
    x, y, w, h = rect
    partial = data.get("partial", "")
    label = geom.tile_label(ranks, data["world_size"])
    if partial and geom.label_fit(f"{label} {partial}", w, h) == "h":
        label = f"{label} {partial}"
    fit = geom.label_fit(label, w, h)
    if not fit:
        return ""
    cx, cy = x + w / 2, y + h / 2
    turn = f' transform="rotate(-90 {cx:.1f} {cy:.1f})"' if fit == "v" else ""
    return (
        f'<text class="mgpu-tile-label" x="{cx:.1f}" y="{cy + F * 0.36:.1f}" font-size="{F}" text-anchor="middle" '
        f'fill="#fff" stroke="#0009" stroke-width="2.5" paint-order="stroke"{turn}>{html.escape(label)}</text>'
    )


def _legend(data: dict[str, Any], frame: dict[str, Any], g: dict[str, Any]) -> list[str]:
    """Each rank's box: its colour, its number, the bytes it holds (a bar and the figure)."""
    colors, (bw, bh) = data["colors"], g["box"]
    names = data.get("rank_names")
    flows = {f[0]: f[1:] for f in frame.get("flows", [])}
    texts = frame.get("mem_text") or []
    out = [_text(x, y, host, F, extra=' fill="#555" class="mgpu-rank-group"') for x, y, host in g["groups"]]
    for r, (x, y) in enumerate(g["ranks"]):
        m = frame["mem"][r] if r < len(frame.get("mem", [])) else 0
        mtext = texts[r] if r < len(texts) else format_bytes(m)
        frac = min(1.0, m / (data.get("max_mem") or 1))
        where = f" on {names[r]}" if names else ""
        moved = f"; sends {flows[r][0]}, receives {flows[r][1]}" if r in flows else ""
        number = str(r) if g["compact"] else f"rank {r}"
        out.append(
            f'<g class="mgpu-rank" data-rank="{r}" data-mem="{m}"><title>rank {r}{html.escape(where)}: '
            f"{html.escape(mtext)} of traced blocks{moved}</title>"
            f'<rect x="{x}" y="{y}" width="{bw}" height="{bh}" fill="#fff" stroke="{colors[r]}" stroke-width="2"/>'
            f'<rect class="mgpu-rank-mem" x="{x + 2}" y="{y + bh - 5}" width="{(bw - 4) * frac:.1f}" height="3" '
            f'fill="{colors[r]}"/>'
            + _text(x + bw / 2, y + 14, number, geom.LABEL_FONT, bw - 4, ' text-anchor="middle" font-weight="bold"')
            + _text(x + bw / 2, y + bh - 10, mtext, F, bw - 4, ' text-anchor="middle"')
            + (
                f'<rect class="mgpu-flow" x="{x - 2}" y="{y - 2}" width="{bw + 4}" height="{bh + 4}" fill="none" '
                f'stroke="{colors[r]}" stroke-width="2" stroke-dasharray="3 2"/>'
                if r in flows
                else ""
            )
            + "</g>"
        )
    return out


def _arrow(data: dict[str, Any], g: dict[str, Any], arrow: list[Any]) -> str:
    """A transfer between two boxes (as in placement.js): an arc over their row when they share one, else a
    curve from the upper box's bottom to the lower box's top."""
    src, dst, _, is_reduce = arrow
    bw, bh = g["box"]
    (fx, fy), (tx, ty) = (g["host"] if r < 0 else g["ranks"][r] for r in (src, dst))
    x1, x2 = fx + bw / 2, tx + bw / 2
    if fy == ty:
        room = g["arrow_room"] if fy == g["ranks"][0][1] else g["row_room"]
        lift = min(2 * room - 6, 14 + abs(x2 - x1) / 6)
        d = f"M{x1:.1f},{fy:.1f} Q{(x1 + x2) / 2:.1f},{fy - lift:.1f} {x2:.1f},{ty:.1f}"
    else:
        y1, y2 = (fy + bh, ty) if fy < ty else (fy, ty + bh)
        d = f"M{x1:.1f},{y1:.1f} Q{(x1 + x2) / 2 + 12:.1f},{(y1 + y2) / 2:.1f} {x2:.1f},{y2:.1f}"
    col = "#555" if src < 0 else data["colors"][src]
    dash = ' stroke-dasharray="5 3"' if is_reduce else ""
    return f'<path class="mgpu-arrow" d="{d}" fill="none" stroke="{col}" stroke-width="2"{dash} marker-end="url(#mgpu-head)"/>'


def frame_svg(data: dict[str, Any], index: int = -1) -> str:
    """Frame ``index`` (default the last) as an SVG document."""
    frames = data.get("frames", [])
    if not frames:  # a live player before the first event arrives
        return (
            "<svg xmlns='http://www.w3.org/2000/svg' width='240' height='30'><text y='20' font-family='sans-serif' "
            "font-size='12'>no events yet</text></svg>"
        )
    i = index % len(frames)
    frame = frames[i]
    held = visible_at(data, i)
    # a still picture: the positions of this frame alone (no room for arrows it does not have)
    g = geom.geometry({**data, "frames": [frame]})
    owners: list[list[list[int]]] = [[[] for _ in p["tiles"]] for p in data["panels"]]
    for r, b in sorted(held):
        blk = data["blocks"][b]
        for t in blk[5]:
            owners[blk[0]][t].append(r)
    y0, lines, chars = g["caption"]
    caption = str(frame.get("caption", ""))
    parts = [f'<g class="mgpu-caption"><title>{html.escape(caption)}</title>']
    for k, line in enumerate(geom.wrap(caption, chars, lines)):
        parts.append(_text(10, y0 + k * geom.CAPTION_LINE, line, geom.CAPTION_FONT, extra=' font-weight="bold"'))
    parts.append("</g>")
    for pi, p in enumerate(data["panels"]):
        gx, gy, gw, gh = g["panels"][pi]
        gr, gc = max(p["size"][0], 1), max(p["size"][1], 1)
        if g["titles"] and p.get("title"):
            parts.append(_text(gx, gy - 6, p["title"], geom.LABEL_FONT, gw + 20))
        rects = [
            (gx + gw * c0 / gc, gy + gh * r0 / gr, gw * (c1 - c0) / gc, gh * (r1 - r0) / gr)
            for r0, r1, c0, c1 in p["tiles"]
        ]
        for ti, rect in enumerate(rects):
            parts.extend(_tile(data, pi, ti, rect, owners[pi][ti]))
        for a, b in geom.label_runs(p["tiles"], owners[pi]):  # one label a run of tiles
            (x, y, _, h), (xb, _, wb, _) = rects[a], rects[b]
            parts.append(_label(data, (x, y, xb + wb - x, h), owners[pi][a]))
        parts.append(f'<rect x="{gx:.1f}" y="{gy:.1f}" width="{gw:.1f}" height="{gh:.1f}" fill="none" stroke="#333"/>')
    arrows = [a for a in frame.get("arrows", []) if a[0] != a[1] and (g["host"] or min(a[0], a[1]) >= 0)]
    if g["host"] and any(min(a[0], a[1]) < 0 for a in arrows):
        (hx, hy), (bw, bh) = g["host"], g["box"]
        parts.append(f'<rect x="{hx}" y="{hy}" width="{bw}" height="{bh}" fill="#eee" stroke="#999"/>')
        parts.append(_text(hx + bw / 2, hy + bh / 2 + 4, "notebook", geom.LABEL_FONT, bw - 4, ' text-anchor="middle"'))
    parts.extend(_legend(data, frame, g))
    parts.extend(_arrow(data, g, a) for a in arrows)
    width, height = g["width"], g["height"]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="mgpu-placement-svg" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" style="max-width:100%;height:auto" '
        'font-family="sans-serif">' + HATCH + "".join(parts) + "</svg>"
    )
