"""One entry of one rank's holding in the rank × column figure (``widgets/rank_grid.py``): markup, or a code.

A :class:`SlotDrawer` draws entry ``j`` of a holding where the figure's geometry
(``widgets/grid_geometry.py``) puts it: as cells (``widgets/tensor_cells.py``) or as a strip
(``widgets/holding_strips.py``), a dashed box where a rank holds nothing. A strip, or an entry not
filled yet, comes as a short code (``widgets/slot_codes.py``) that the player's browser side draws;
the rest as markup. It remembers what it drew last in each place, so a series of frames redraws only
the entries a step changed (the frames of an all_gather on 64 ranks hold 266 000 entries, of which
4 032 ever change), and it summarises the distinct tensors of a series into strips at once
(:meth:`SlotDrawer.prepare`).

The before/after figure (``hover``: one frame, every entry saying what it holds) draws a rank's list
of strips as one group whose hover lists its entries, runs of alike entries as one line, and whose
drawing, made once, is *used* by every rank whose row looks the same: an all_to_all on 64 ranks is
8 192 entries, so a hover each would be most of its size.
"""

from __future__ import annotations

import hashlib
import html
from typing import Any

from jupyter_mgpu.widgets.collective_colors import OriginFill
from jupyter_mgpu.widgets.grid_geometry import STRIP_H, Geometry, fit_label
from jupyter_mgpu.widgets.holding_strips import Strip, describe, shape_text, strip_code, strip_of, strips_of
from jupyter_mgpu.widgets.row_folding import SameAs
from jupyter_mgpu.widgets.slot_codes import Code, Names, code_svg, f10, tenths
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, Canvas
from jupyter_mgpu.widgets.tensor_cells import dims, draw_nothing, draw_tensor, outline_boxes

Box = tuple[float, float, float, float, float]  # x, y, w, h, stroke width
Outline = tuple[str, Any]  # ("entry", j) or ("tensor", 0): a strip's outline, by place; ("box", Box) any other
STRIPS_FONT = f"font-family='sans-serif' font-size='{MIN_FONT}' text-anchor='middle'"


def _key(t: Any) -> tuple[Any, bytes]:
    """A tensor's identity by content: its shape and its values, with their origin masks (the tracked
    tensors of a schedule need no detach and hold no conjugate bit)."""
    return t.shape, bytes(t.numpy().tobytes())


class SlotDrawer:
    """Markup or codes of the entries of a figure drawn on geometry ``g``, with ``fill``'s colours."""

    def __init__(self, g: Geometry, fill: OriginFill, op: str | None, hover: bool):
        self.g, self.fill, self.op, self.hover = g, fill, op, hover
        self._last: dict[tuple[int, int, int], tuple[Any, str | Code]] = {}
        self._seen: dict[tuple[int, int, int], tuple[Any, Any, tuple[Any, ...], str | Code]] = {}
        self._strips: dict[Any, Strip] = {}
        self._by_id: dict[tuple[int, int], tuple[Any, Any, Strip]] = {}
        self._codes: dict[tuple[Strip, int], Code] = {}
        self.names = Names()  # the fills and labels codes name by number
        self.shared: dict[str, str] = {}  # drawings made once (for the figure's <defs>)

    def prepare(self, pairs: list[tuple[Any, Any]]) -> None:
        """Summarise the tracked tensors ``(t, twin)`` a series will draw, all at once."""
        todo = [(t, t2) for t, t2 in pairs if (id(t), id(t2)) not in self._by_id]
        for (t, t2), s in zip(todo, strips_of(todo)):
            self._by_id[id(t), id(t2)] = (t, t2, s)

    def strip(self, t: Any, twin: Any = None) -> Strip:
        """Tensor ``t`` summarised (once per distinct content)."""
        hit = self._by_id.get((id(t), id(twin)))
        if hit is not None and hit[0] is t and hit[1] is twin:
            return hit[2]
        key = (_key(t), _key(twin) if twin is not None else None)
        if key not in self._strips:
            self._strips[key] = strip_of(t, twin)
        return self._strips[key]

    def code(self, s: Strip, w: int) -> Code:
        """Strip ``s`` ``w`` tenths of a px wide, as a code (made once)."""
        key = (s, w)
        if key not in self._codes:
            self._codes[key] = strip_code(s, w, tenths(STRIP_H), self.fill, self.names, self.shared)
        return self._codes[key]

    def slot(self, r: int, k: int, j: int, h: Any, twin: Any, labels: list[str] | None, nothing: str) -> str | Code:
        """Entry ``j`` of rank ``r``'s holding ``h`` in column ``k`` ("" where it has none)."""
        if isinstance(h, SameAs):
            return self._same_as(r, k, h.rank) if j == 0 else ""
        if self.hover and self.g.compact and isinstance(h, list):
            return self._row(r, k, h, twin) if j == 0 else ""
        entries = h if isinstance(h, list) else [h]
        if j >= len(entries) or (h is None and j):
            return ""
        t = entries[j]
        t2 = (twin if isinstance(twin, list) else [twin])[j] if twin is not None else None
        label = (labels[j] if labels and j < len(labels) else f"[{j}]") if isinstance(h, list) else ""
        same = (h is None, isinstance(h, list), label, nothing)
        seen = self._seen.get((r, k, j))
        if seen is not None and seen[0] is t and seen[1] is t2 and seen[2] == same:
            return seen[3]  # the very tensors drawn here last frame: a schedule step left this entry alone
        drawn = self._slot(r, k, j, h, t, t2, label, nothing)
        self._seen[(r, k, j)] = (t, t2, same, drawn)
        return drawn

    def _slot(self, r: int, k: int, j: int, h: Any, t: Any, t2: Any, label: str, nothing: str) -> str | Code:
        if self.g.compact:
            what: Any = None if t is None else self.strip(t, t2)
        else:
            what = None if t is None else _key(t)
        state = (h is None, isinstance(h, list), what, label, nothing)
        last = self._last.get((r, k, j))
        if last is not None and last[0] == state:
            return last[1]
        drawn = (
            self._strip_slot(r, k, j, h, what, label, nothing)
            if self.g.compact
            else self._cells_slot(r, k, j, h, t, label, nothing)
        )
        self._last[(r, k, j)] = (state, drawn)
        return drawn

    def _same_as(self, r: int, k: int, rank: int) -> str:
        """One line where rank ``r`` holds what rank ``rank`` holds (``widgets/row_folding.py``)."""
        g, c = self.g, Canvas()
        x, y = g.slot_xy(r, k, 0)
        tip = f"rank {r} holds exactly what rank {rank} holds" if self.hover else ""
        c.rect(x, y, g.col_w[k], STRIP_H, "#ffffff", "#bbbbbb", 0.8, "3 2", tip)
        c.text(x + 6, y + STRIP_H - 3.5, f"= same as rank {rank}", size=MIN_FONT, anchor="start", fill="#555")
        return "".join(c.parts)

    def _cells_slot(self, r: int, k: int, j: int, h: Any, t: Any, label: str, nothing: str) -> str:
        g, c = self.g, Canvas()
        x, y = g.slot_xy(r, k, j)
        if h is None:
            draw_nothing(c, x, y, g.col_w[k], g.box(r), nothing)
            return "".join(c.parts)
        if isinstance(h, list):
            c.text(x, y - 3, fit_label(label, g.widths[k]), size=10, fill="#555")
            if t is None:
                draw_nothing(c, x, y, g.widths[k], g.box(r), "not yet")
                return "".join(c.parts)
        draw_tensor(c, t, x, y, g.cell, self.fill, hover=self.hover)
        return "".join(c.parts)

    def _strip_slot(self, r: int, k: int, j: int, h: Any, s: Strip | None, label: str, nothing: str) -> str | Code:
        g = self.g
        if h is None:
            c = Canvas()
            x, y = g.slot_xy(r, k, j)
            draw_nothing(c, x, y, g.col_w[k], g.box(r), nothing, size=MIN_FONT)
            return "".join(c.parts)
        w = tenths(g.entry_w(k, isinstance(h, list)))
        code = ("n", w) if s is None else self.code(s, w)  # an entry not filled yet, or a strip
        if not self.hover:
            return code
        where = f"rank {r}, {label}" if label else f"rank {r}"
        said = describe(s, self.op) if s is not None else "not yet"
        markup = code_svg(code, *g.slot10(r, k, j), tenths(STRIP_H), *self._tables)
        return f"<g><title>{html.escape(where + ': ' + said)}</title>{markup}</g>"

    def _row(self, r: int, k: int, h: list[Any], twin: Any) -> str:
        """Rank ``r``'s list ``h`` in column ``k`` of the before/after figure (strips): one group whose
        hover says every entry, drawing the row made once and used wherever a row looks the same."""
        g = self.g
        twins = twin if isinstance(twin, list) else [None] * len(h)
        strips = [None if t is None else self.strip(t, t2) for t, t2 in zip(h, twins)]
        w, line_h = tenths(g.widths[k]), tenths(STRIP_H)
        x0, y0 = g.slot10(r, k, 0)
        body = []
        for j, s in enumerate(strips):
            x, y = g.slot10(r, k, j)
            body.append(code_svg(("n", w) if s is None else self.code(s, w), x, y - y0, line_h, *self._tables))
        drawing = "".join(body)
        key = f"mgpu-row-{hashlib.sha1(drawing.encode()).hexdigest()[:12]}"  # one drawing, one name anywhere
        self.shared.setdefault(key, f"<g id='{key}' {STRIPS_FONT}>{drawing}</g>")
        return f"<g><title>{html.escape(self._row_says(r, strips))}</title><use href='#{key}' y='{f10(y0)}'/></g>"

    def _row_says(self, r: int, strips: list[Strip | None]) -> str:
        """The hover of rank ``r``'s list: a line per run of entries that say the same (``[j]`` as the
        column's note names them), their shape once where they share it."""
        shapes = {s.shape for s in strips if s is not None}
        common = next(iter(shapes)) if len(shapes) == 1 else None
        says = ["not yet" if s is None else describe(s, self.op, shape=common is None) for s in strips]
        lines, j = [], 0
        while j < len(says):
            e = j
            while e + 1 < len(says) and says[e + 1] == says[j]:
                e += 1
            lines.append(f"[{j}]{f'–[{e}]' if e > j else ''} {says[j]}")
            j = e + 1
        each = next(shape_text(s) for s in strips if s is not None) if common is not None else ""
        return "\n".join([f"rank {r}{f', each entry {each}' if each else ''}:", *lines])

    @property
    def _tables(self) -> tuple[list[Any], list[str]]:
        return self.names.fills.table, self.names.labels.table

    def outline(self, r: int, k: int, h: Any, hl: Any) -> list[Outline]:
        """The outlines of highlight ``hl`` of rank ``r``'s holding ``h`` in column ``k``: entry ``hl`` of
        a list, or the flat element range ``hl`` of a tensor."""
        g = self.g
        if isinstance(h, list) and isinstance(hl, int) and 0 <= hl < len(h):
            if g.compact:
                return [("entry", hl)]
            x, y = g.slot_xy(r, k, hl)
            slot = h[hl]
            sw = dims(slot)[1] * g.cell if slot is not None else g.widths[k]
            sh = dims(slot)[0] * g.cell if slot is not None else g.box_h
            return [("box", (x - 3, y - 3, sw + 6, sh + 6, 2.2))]
        if h is not None and not isinstance(h, list) and isinstance(hl, tuple):
            if g.compact:
                return [("tensor", 0)]
            x, y = g.slot_xy(r, k, 0)
            return [("box", b) for b in outline_boxes(h, x, y, g.cell, hl)]
        return []
