"""One entry of one rank's holding in the rank × column figure (``widgets/rank_grid.py``), as markup.

A :class:`SlotDrawer` draws entry ``j`` of a holding where the figure's geometry
(``widgets/grid_geometry.py``) puts it: as cells (``widgets/tensor_cells.py``) or as a strip
(``widgets/holding_strips.py``), a dashed box where a rank holds nothing. It remembers what it drew
last in each place, so a series of frames redraws only the entries a step changed (the frames of an
all_gather on 64 ranks hold 266 000 entries, of which 4 032 ever change), and it summarises each
distinct tensor into a strip once.
"""

from __future__ import annotations

import html
from typing import Any

from jupyter_mgpu.widgets.collective_colors import OriginFill
from jupyter_mgpu.widgets.grid_geometry import STRIP_H, Geometry, fit_label
from jupyter_mgpu.widgets.holding_strips import Strip, describe, draw_strip, strip_of
from jupyter_mgpu.widgets.row_folding import SameAs
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, Canvas
from jupyter_mgpu.widgets.tensor_cells import dims, draw_nothing, draw_tensor, outline_boxes

Box = tuple[float, float, float, float, float]  # x, y, w, h, stroke width


def _key(t: Any) -> tuple[Any, bytes]:
    """A tensor's identity by content: its shape and its values, with their origin masks (the tracked
    tensors of a schedule need no detach and hold no conjugate bit)."""
    return t.shape, bytes(t.numpy().tobytes())


class SlotDrawer:
    """Markup of the entries of a figure drawn on geometry ``g``, with ``fill``'s colours."""

    def __init__(self, g: Geometry, fill: OriginFill, op: str | None, hover: bool):
        self.g, self.fill, self.op, self.hover = g, fill, op, hover
        self._last: dict[tuple[int, int, int], tuple[Any, str]] = {}
        self._seen: dict[tuple[int, int, int], tuple[Any, Any, tuple[Any, ...], str]] = {}
        self._strips: dict[Any, Strip] = {}
        self.shared: dict[str, str] = {}  # strips of one rank's data, drawn once (for the figure's <defs>)

    def strip(self, t: Any, twin: Any = None) -> Strip:
        """Tensor ``t`` summarised (once per distinct content)."""
        key = (_key(t), _key(twin) if twin is not None else None)
        if key not in self._strips:
            self._strips[key] = strip_of(t, twin)
        return self._strips[key]

    def slot(self, r: int, k: int, j: int, h: Any, twin: Any, labels: list[str] | None, nothing: str) -> str:
        """Entry ``j`` of rank ``r``'s holding ``h`` in column ``k`` ("" where it has none)."""
        if isinstance(h, SameAs):
            return self._same_as(r, k, h.rank) if j == 0 else ""
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
        markup = self._slot(r, k, j, h, t, t2, label, nothing)
        self._seen[(r, k, j)] = (t, t2, same, markup)
        return markup

    def _slot(self, r: int, k: int, j: int, h: Any, t: Any, t2: Any, label: str, nothing: str) -> str:
        if self.g.compact:
            what: Any = None if t is None else self.strip(t, t2)
        else:
            what = None if t is None else _key(t)
        state = (h is None, isinstance(h, list), what, label, nothing)
        last = self._last.get((r, k, j))
        if last is not None and last[0] == state:
            return last[1]
        markup = (
            self._strip_slot(r, k, j, h, t, what, label, nothing)
            if self.g.compact
            else self._cells_slot(r, k, j, h, t, label, nothing)
        )
        self._last[(r, k, j)] = (state, markup)
        return markup

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

    def _strip_slot(self, r: int, k: int, j: int, h: Any, t: Any, s: Strip | None, label: str, nothing: str) -> str:
        g = self.g
        x, y = g.slot_xy(r, k, j)
        if h is None:
            c = Canvas()
            draw_nothing(c, x, y, g.col_w[k], g.box(r), nothing, size=MIN_FONT)
            return "".join(c.parts)
        w = g.widths[k]
        if s is None:  # an entry not filled yet
            tip = f"<title>rank {r}, {html.escape(label)}: not yet</title>" if self.hover else ""
            return (
                f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{STRIP_H:g}' fill='#fafafa' "
                f"stroke='#999999' stroke-width='.8' stroke-dasharray='3 2'>{tip}</rect>"
            )
        parts: list[str] = []
        draw_strip(parts, s, x, y, w, STRIP_H, self.fill, self.shared)
        if not self.hover:
            return "".join(parts)
        where = f"rank {r}, {label}" if label else f"rank {r}"
        return f"<g><title>{html.escape(where + ': ' + describe(s, self.op))}</title>{''.join(parts)}</g>"

    def outline(self, r: int, k: int, h: Any, hl: Any) -> list[Box]:
        """The outlines of highlight ``hl`` of rank ``r``'s holding ``h`` in column ``k``: entry ``hl`` of
        a list, or the flat element range ``hl`` of a tensor."""
        g = self.g
        if isinstance(h, list) and isinstance(hl, int) and 0 <= hl < len(h):
            x, y = g.slot_xy(r, k, hl)
            if g.compact:
                return [(x - 2, y - 2, g.widths[k] + 4, STRIP_H + 4, 2.2)]
            slot = h[hl]
            sw = dims(slot)[1] * g.cell if slot is not None else g.widths[k]
            sh = dims(slot)[0] * g.cell if slot is not None else g.box_h
            return [(x - 3, y - 3, sw + 6, sh + 6, 2.2)]
        if h is not None and not isinstance(h, list) and isinstance(hl, tuple):
            x, y = g.slot_xy(r, k, 0)
            if g.compact:
                return [(x - 2, y - 2, g.widths[k] + 4, STRIP_H + 4, 2.0)]
            return outline_boxes(h, x, y, g.cell, hl)
        return []
