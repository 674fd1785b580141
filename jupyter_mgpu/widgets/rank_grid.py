"""The rank × column figure the collective pictures (``widgets/collective_view.py``) are drawn on.

One row per rank (its colour, its name, its host where the cluster spans several), one column per
stage (before/after, or the holdings of one animation step); a cell holds a tracked tensor, a list of
entries side by side, or a dashed box for nothing. Arrows in the left gutter show transfers between
ranks, and a key under the grid says which colour is whose data. Where things go is
``widgets/grid_geometry.py`` (cells for a few ranks, strips for many; never wider than :data:`WIDTH`).

A series of frames (the schedule player's) is drawn as one :class:`Series`: the first frame's SVG in
parts, then for each frame only the parts that changed (``widgets/frame_changes.py``) — a title, a
caption, the entries a step moved — and its arrows and outlines as numbers. An entry drawn as a strip
is a short code, each distinct one sent once (``widgets/slot_codes.py`` draws codes and marks here,
``static/player.js`` in the browser). An all_gather on N ranks moves N(N-1) entries in all: that is
what its frames carry, not N frames of N² entries.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.widgets.collective_colors import OriginFill
from jupyter_mgpu.widgets.colors import PALETTE, rank_color
from jupyter_mgpu.widgets.frame_changes import Part, changed, codes_once, tensors_of
from jupyter_mgpu.widgets.grid_geometry import LEFT, WIDTH, Geometry, layout, plan
from jupyter_mgpu.widgets.rank_names import rank_names
from jupyter_mgpu.widgets.slot_codes import Code, code_svg, marks_svg, progressions, slot_place, tenths
from jupyter_mgpu.widgets.slot_drawing import STRIPS_FONT, SlotDrawer
from jupyter_mgpu.widgets.svg_canvas import FONT, MIN_FONT, Canvas, text_width, wrap

__all__ = ["LEFT", "WIDTH", "Series", "draw_series", "layout", "marks_svg", "render_grid"]


@dataclass
class Series:
    """Frames drawn as parts: ``parts`` (frame 0's SVG is their concatenation, ``parts[overlay["at"]]``
    drawn from ``marks[0]``), ``patches[i]`` the parts frame i changes from frame i-1, ``marks[i]`` its
    arrows and outlines (``widgets/slot_codes.py``'s ``marks_svg``). A part that is a code (a tuple), or
    the number of one of ``overlay["codes"]`` (the codes used more than once), is drawn where its entry
    goes (``overlay["grid"]``)."""

    parts: list[Part]
    patches: list[dict[int, Part]]
    marks: list[dict[str, list[Any]]]
    overlay: dict[str, Any]
    geometry: Geometry = field(repr=False)

    def __len__(self) -> int:
        return len(self.patches)

    def frame(self, i: int) -> str:
        """Frame ``i`` as one SVG document."""
        parts = list(self.parts)
        for patch in self.patches[1 : i + 1]:
            for k, s in patch.items():
                parts[k] = s
        ov = self.overlay
        out = [s if isinstance(s, str) else _code_markup(ov, p, s) for p, s in enumerate(parts)]
        out[ov["at"]] = marks_svg(ov, self.marks[i])
        return "".join(out)


def _code_markup(overlay: dict[str, Any], p: int, code: Code | int) -> str:
    """Part ``p``, a code or the number of one, as markup (``static/player.js`` draws the same)."""
    x, y, _ = slot_place(overlay["grid"], p)
    drawn = overlay["codes"][code] if isinstance(code, int) else code
    return code_svg(drawn, x, y, overlay["grid"]["h"], overlay["fills"], overlay["labels"])


def render_grid(
    title: str,
    subtitle: str,
    columns: list[str],
    cells: list[list[Any]],
    labels: list[list[str] | None],
    nothing: list[str],
    op: str | None = None,
    transfers: list[tuple[int, int, str]] | None = None,
    highlight: dict[int, Any] | None = None,
    cell: float | None = None,
    hover: bool = False,
) -> str:
    """SVG of a rank × column grid; ``cells[r][k]`` is a tracked tensor, a list of slots, or None.

    ``labels[k]`` labels the list entries of column k; ``nothing[k]`` is the text for None in column k;
    ``transfers`` draw arrows between rank rows in the left gutter; ``highlight`` outlines (per rank) a
    slot index or a flat element range in the last column; ``cell`` fixes the size of one value.
    """
    s = draw_series(
        [title],
        [subtitle],
        columns,
        [cells],
        [labels],
        [nothing],
        op,
        [transfers or []],
        [highlight or {}],
        cell,
        hover,
    )
    return s.frame(0)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: drawing a series at 64 ranks makes a hundred thousand
    small objects, none in a cycle, and each collection it would set off walks the notebook's whole heap
    (a third of the time)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@_collector_paused()
def draw_series(
    titles: list[str],
    subtitles: list[str],
    columns: list[str],
    frames: list[list[list[Any]]],
    labels: list[list[list[str] | None]],
    nothing: list[list[str]],
    op: str | None = None,
    transfers: list[list[tuple[int, int, str]]] | None = None,
    highlights: list[dict[int, Any]] | None = None,
    cell: float | None = None,
    hover: bool = False,
    high: list[list[list[Any]]] | None = None,
) -> Series:
    """Every frame of one figure on one geometry: frame f has title ``titles[f]``, subtitle
    ``subtitles[f]``, holdings ``frames[f][r][k]``, entry labels ``labels[f][k]``, nothing-texts
    ``nothing[f][k]``, arrows ``transfers[f]`` and outlines ``highlights[f]`` (last column). ``high`` is
    the same holdings tracked for the ranks past 52 (a reduction over more ranks)."""
    nf, n, ncol = len(frames), len(frames[0]), len(columns)
    transfers = transfers or [[] for _ in range(nf)]
    highlights = highlights or [{} for _ in range(nf)]
    where = rank_names(n)  # a cluster across hosts: each rank's host:kind:index under its name
    g = plan(frames, labels, nothing, max(len(t) for t in transfers), cell, (titles, subtitles), 2 if where else 0)
    fill = OriginFill(op)
    draw = SlotDrawer(g, fill, op, hover)
    first = 5
    todo = changed(frames, high, labels, nothing)
    if g.compact:
        draw.prepare(tensors_of(frames, high, todo))
    codes: dict[Code, int] = {}
    whats: dict[str, int] = {}
    patches: list[dict[int, Part]] = []
    marks: list[dict[str, list[Any]]] = []
    shown: dict[int, Part] = {}
    for f in range(nf):
        patch: dict[int, Part] = {1: _title(titles[f], g), 2: _subtitle(subtitles[f], g)} if f == 0 else {}
        if f and titles[f] != titles[f - 1]:
            patch[1] = _title(titles[f], g)
        if f and subtitles[f] != subtitles[f - 1]:
            patch[2] = _subtitle(subtitles[f], g)
        for r, k, js in todo[f]:
            h, twin, at = frames[f][r][k], high[f][r][k] if high else None, first + g.slot_index(r, k, 0)
            for j in range(g.entries[k]) if js is None else js:
                drawn = draw.slot(r, k, j, h, twin, labels[f][k], nothing[f][k])
                v = drawn if isinstance(drawn, str) else codes.setdefault(drawn, len(codes))
                if shown.get(at + j) != v:
                    shown[at + j] = patch[at + j] = v
        patches.append(patch)
        marks.append(_marks(draw, frames[f], highlights[f], ncol - 1, transfers[f], whats, first))
    at = first + g.slot_index(n, 0, 0) + 1
    parts: list[Part] = [""] * (at + 2)
    for k, s in patches[0].items():
        parts[k] = s
    patches[0] = {}
    table = codes_once(list(codes), parts, patches)
    senders = sorted({a for t in transfers for a, _, _ in t})
    c = Canvas()
    _draw_headings(c, columns, g)
    for r in range(n):
        _draw_rank_label(c, r, g.row_y(r), where, g.left, fill)
    parts[3] = "".join(c.parts)
    parts[4] = f"<g {STRIPS_FONT}>" if g.compact else "<g>"
    parts[at - 1] = "</g>"
    width = _width(g, titles, subtitles)
    legend = Canvas()
    ly = g.bottom(n) + 8
    legend_h = _legend(legend, fill, 12, ly, width - 24, g.compact)
    height = ly + legend_h + 8
    parts[at + 1] = "".join(legend.parts) + "</svg>"
    parts[0] = (
        f"<svg xmlns='http://www.w3.org/2000/svg' class='mgpu-collective-svg' {FONT} width='{width:.0f}' "
        f"height='{height:.0f}' viewBox='0 0 {width:.0f} {height:.0f}' "
        f"style='background:#fff;max-width:100%;height:auto'><defs>{_markers(senders)}{fill.defs()}"
        f"{''.join(draw.shared.values())}</defs>"
    )
    overlay: dict[str, Any] = {"at": at, "left": g.left, "mid": [round(g.mid(r), 1) for r in range(n)]}
    overlay["colors"] = [rank_color(r) for r in range(n)]
    overlay["whats"] = list(whats)
    overlay["codes"] = table
    overlay["fills"] = list(draw.names.fills.table)
    overlay["labels"] = list(draw.names.labels.table)
    overlay["grid"] = {**g.grid, "first": first}
    return Series(parts, patches, marks, overlay, g)


def _marks(
    draw: SlotDrawer,
    cells: list[list[Any]],
    highlight: dict[int, Any],
    k: int,
    transfers: list[tuple[int, int, str]],
    whats: dict[str, int],
    first: int,
) -> dict[str, list[Any]]:
    """A frame's marks: its arrows (sender, receiver, what as a number of ``whats``) and the outlines of
    ``highlight`` (per rank: a slot index, or a flat element range) in column ``k``, as ``marks_svg``
    of ``widgets/slot_codes.py`` reads them."""
    marks: dict[str, list[Any]] = {}
    rows: dict[str, list[tuple[int, ...]]] = {
        "arrows": [(a, b, whats.setdefault(w, len(whats))) for a, b, w in transfers]
    }
    for r, hl in sorted(highlight.items()):
        if r >= len(cells):
            continue
        for kind, v in draw.outline(r, k, cells[r][k], hl):
            if kind == "box":
                marks.setdefault("boxes", []).append([tenths(x) for x in v[:4]] + [v[4]])
            else:
                rows.setdefault(kind, []).append((first + draw.g.slot_index(r, k, v),))
    marks.update({kind: progressions(rs) for kind, rs in rows.items() if rs})
    return marks


def _width(g: Geometry, titles: list[str], subtitles: list[str]) -> float:
    """The figure's width: its body, or its longest title line, at least 520 px and at most WIDTH."""
    lines = [text_width(x, 16) for t in titles for x in wrap(t, WIDTH - 24, 16)]
    lines += [text_width(x, 12) for t in subtitles for x in wrap(t, WIDTH - 24, 12)]
    return min(WIDTH, max([g.body_w, 520.0] + [24 + w for w in lines]))


def _title(title: str, g: Geometry) -> str:
    c = Canvas()
    for i, line in enumerate(wrap(title, WIDTH - 24, 16)[: g.title_lines]):
        c.text(12, 22 + 18 * i, line, size=16, weight="bold")
    return "".join(c.parts)


def _subtitle(subtitle: str, g: Geometry) -> str:
    c = Canvas()
    y0 = 22 + 18 * g.title_lines
    for i, line in enumerate(wrap(subtitle, WIDTH - 24, 12)[: g.sub_lines]):
        c.text(12, y0 + 14 * i, line, size=12, fill="#555")
    return "".join(c.parts)


def _draw_headings(c: Canvas, columns: list[str], g: Geometry) -> None:
    """Each column's name, and (strips) what its entries are."""
    for k, name in enumerate(columns):
        x = g.col_x(k) + g.col_w[k] / 2
        c.text(x, g.head_y, name, size=13, anchor="middle", weight="bold")
        if g.notes and g.notes[k]:
            c.text(x, g.head_y + 12, g.notes[k], size=MIN_FONT, anchor="middle", fill="#555")


def _draw_rank_label(c: Canvas, r: int, y: float, where: list[str] | None, left: float, fill: OriginFill) -> None:
    """Rank ``r``'s colour and name, and under it where it runs (a cluster across hosts)."""
    c.rect(12, y, 12, 12, fill.swatch(r), "#888888" if r >= len(PALETTE) else "none", 0.5 if r >= len(PALETTE) else 0)
    c.text(30, y + 11, f"rank {r}", size=12, weight="bold", fill=rank_color(r) if r < 10 else "#333")
    if where:
        for i, part in enumerate(wrap(where[r].replace(":", ": ", 1), left - 34, 10)[:2]):
            c.text(30, y + 24 + 11 * i, part.replace(": ", ":"), size=10, fill="#555")


def _markers(senders: list[int]) -> str:
    """The arrowheads of the transfer arrows, one per sender's colour."""
    return "".join(
        f"<marker id='mgpu-arrow-{a % 20}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' "
        f"markerHeight='6' orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='{rank_color(a)}'/>"
        "</marker>"
        for a in sorted({a % 20 for a in senders})
    )


def _legend(c: Canvas, fill: OriginFill, x0: float, y0: float, width: float, numbered: bool) -> float:
    """Draw the colour key (wrapping to ``width``); returns its height. ``numbered``: every rank as one
    swatch with its number (strips), else a swatch and "from rank r" each."""
    head = "colour = whose data a value holds:"
    c.text(x0, y0 + 10, head, size=11, fill="#555")
    x, y = x0 + text_width(head, 11) * 0.9 + 8, y0
    items = fill.legend(per_rank=not numbered)
    if numbered:
        for r in sorted(fill.ranks):
            w = max(18.0, text_width(str(r), MIN_FONT) + 6)
            if x + w > x0 + width:
                x, y = x0 + 12, y + 18
            f = fill.of_mask(1 << r)
            c.rect(x, y, w, 13, f, "#888", 0.5)
            c.text(x + w / 2, y + 9.8, str(r), size=MIN_FONT, anchor="middle", fill=OriginFill.ink(f))
            x += w + 3
        x += 9
    for f, label in items:
        w = 20 + text_width(label, 11) * 0.9  # the key's gaps may be a little tight, never its boxes
        if x + w > x0 + width:
            x, y = x0 + 12, y + 18
        c.rect(x, y, 12, 12, f, "#888", 0.5)
        c.text(x + 16, y + 10, label, size=11)
        x += w + 12
    return y - y0 + 18
