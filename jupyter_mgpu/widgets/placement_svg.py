"""Static SVG of one frame of placement data (the picture exported notebooks and terminals-with-HTML keep).

Mirrors ``static/placement.js`` (same geometry, colours and classes) without arrows' animation.
"""

from __future__ import annotations

import html
from typing import Any

from jupyter_mgpu.units import format_bytes
from jupyter_mgpu.widgets.placement_data import visible_at

STRIPE = 6.0  # px: the stripes of a tile held by several ranks (the same in static/placement.js)
HATCH = (
    '<defs><pattern id="mgpu-hatch" patternUnits="userSpaceOnUse" width="6" height="6">'
    '<path d="M0,6 L6,0" stroke="#fff" stroke-width="1.2" opacity="0.7"/></pattern></defs>'
)


def _geometry(data: dict[str, Any]) -> tuple[list[tuple[float, float, float, float, int, int]], float, float]:
    x, out = 10.0, []
    for p in data["panels"]:
        r, c = p["size"]
        ratio = min(6.0, max(1 / 6, (r or 1) / (c or 1)))
        h = 200.0 if ratio >= 1 else max(34.0, 200 * ratio)
        w = max(34.0, 200 / ratio) if ratio >= 1 else 200.0
        out.append((x, 44.0, w, h, max(r, 1), max(c, 1)))
        x += w + 36
    width = max(x, 120 + 90 * data["world_size"])
    height = 44 + max([g[3] for g in out] + [40]) + 120
    return out, width, height


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
    geo, width, height = _geometry(data)
    colors, p_count = data["colors"], data["world_size"]
    owners = [[0] * len(p["tiles"]) for p in data["panels"]]
    for r, b in held:
        blk = data["blocks"][b]
        for t in blk[5]:
            owners[blk[0]][t] |= 1 << r
    e = html.escape
    partial = data.get("partial", "")
    parts = [f'<text x="10" y="16" font-size="13" font-weight="bold">{e(frame.get("caption", ""))}</text>']
    for pi, p in enumerate(data["panels"]):
        gx, gy, gw, gh, gr, gc = geo[pi]
        parts.append(f'<text x="{gx:.1f}" y="36" font-size="12">{e(p["title"])}</text>')
        for ti, (r0, r1, c0, c1) in enumerate(p["tiles"]):
            x, y = gx + gw * c0 / gc, gy + gh * r0 / gr
            w, h = gw * (c1 - c0) / gc, gh * (r1 - r0) / gr
            ranks = [r for r in range(p_count) if owners[pi][ti] >> r & 1]
            tip = (
                data["tips"][pi][ti]
                if data.get("tips")
                else (
                    f"{'held by rank ' + ', '.join(map(str, ranks)) if ranks else 'held by no rank'}\n"
                    f"rows {r0}:{r1}, cols {c0}:{c1}"
                )
            )
            parts.append(f'<g class="mgpu-tile" data-owners="{" ".join(map(str, ranks))}"><title>{e(tip)}</title>')
            if not ranks:
                parts.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#fff" '
                    'stroke="#ccc" stroke-width="0.5"/>'
                )
            else:
                # one holder: its colour; several (replicas): thin stripes of each holder's colour
                sw = min(STRIPE, w / len(ranks)) if len(ranks) > 1 else w
                k = 0
                while k * sw < w - 0.01:
                    parts.append(
                        f'<rect x="{x + k * sw:.1f}" y="{y:.1f}" width="{min(sw, w - k * sw):.1f}" '
                        f'height="{h:.1f}" fill="{colors[ranks[k % len(ranks)]]}"/>'
                    )
                    k += 1
                if partial:  # every rank holds a full-size operand; the value is their reduction (hatched)
                    parts.append(
                        f'<rect class="mgpu-partial" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                        'fill="url(#mgpu-hatch)"/>'
                    )
                parts.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="none" stroke="#fff"/>'
                )
                if w > 22 and h > 12 and len(ranks) <= 4:
                    mark = f" {e(partial)}" if partial and w > 60 else ""
                    parts.append(
                        f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + 4:.1f}" font-size="10" '
                        f'text-anchor="middle" fill="#fff" stroke="#0009" stroke-width="2.5" paint-order="stroke">'
                        f"{','.join(map(str, ranks))}{mark}</text>"
                    )
            parts.append("</g>")
        parts.append(f'<rect x="{gx:.1f}" y="{gy:.1f}" width="{gw:.1f}" height="{gh:.1f}" fill="none" stroke="#333"/>')
    y0, bw, gap = height - 70, 70, 18
    for r in range(p_count):
        x = 10 + (bw + gap) * (r + 1)
        m = frame["mem"][r] if r < len(frame.get("mem", [])) else 0
        frac = min(1.0, m / (data.get("max_mem") or 1))
        parts.append(
            f'<g class="mgpu-rank" data-rank="{r}"><rect x="{x}" y="{y0}" width="{bw}" height="40" '
            f'fill="#fff" stroke="{colors[r]}" stroke-width="2"/><rect x="{x + 2}" y="{y0 + 40 - 38 * frac:.1f}" '
            f'width="8" height="{38 * frac:.1f}" fill="{colors[r]}"/><text x="{x + bw / 2 + 4}" y="{y0 + 16}" '
            f'font-size="11" text-anchor="middle">rank {r}</text><text x="{x + bw / 2 + 4}" y="{y0 + 32}" '
            f'font-size="10" text-anchor="middle">{e(format_bytes(m))}</text></g>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="mgpu-placement-svg" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" style="max-width:100%;height:auto" '
        'font-family="sans-serif">' + HATCH + "".join(parts) + "</svg>"
    )
