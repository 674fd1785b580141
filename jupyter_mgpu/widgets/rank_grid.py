"""The rank × column figure the collective pictures (``widgets/collective_view.py``) are drawn on.

One row per rank (its colour, its name, its host where the cluster spans several), one column per
stage (before/after, or the holdings of one animation step); a cell holds a tracked tensor, a list of
entries side by side, or a dashed box for nothing. Arrows in the left gutter show transfers between
ranks, and a key under the grid says which colour is whose data. The figure is at most :data:`WIDTH`
px wide and scales down with the cell.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.widgets.collective_colors import OriginFill
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.rank_names import rank_names
from jupyter_mgpu.widgets.svg_canvas import Canvas, text_width, wrap
from jupyter_mgpu.widgets.tensor_cells import dims, draw_nothing, draw_tensor, slots

WIDTH = 860  # the widest figure (fits a notebook cell next to JupyterLab's file browser at 1280 px)
LEFT = 84  # rank labels
GAP, COL_GAP = 10.0, 26.0  # between entries of a list, between columns


def layout(
    cells: list[list[Any]], labels: list[list[str] | None], nothing: list[str], cell: float | None
) -> tuple[float, list[float], float, float]:
    """Cell size, each column's entry width, the tallest block and the nothing-box height."""
    ncol = len(labels)
    tensors = [t for row in cells for h in row for t in slots(h) if t is not None]
    entries = [max([len(slots(row[k])) for row in cells] + [1]) for k in range(ncol)]
    tcols = max([dims(t)[1] for t in tensors] + [1])
    trows = max([dims(t)[0] for t in tensors] + [1])
    if cell is None:
        room = WIDTH - LEFT - 40 - COL_GAP * ncol - GAP * sum(e - 1 for e in entries)
        cell = max(3.0, min(22.0, room / (tcols * sum(entries)), 150 / trows))
    bw, bh = tcols * cell, trows * cell
    widths = []
    for k in range(ncol):
        need = [bw, 96.0 if any(s is None for row in cells for s in slots(row[k])) else 0.0]
        need += [text_width(s, 10) for s in labels[k] or []]
        widths.append(max(need))
    lines = max(len(wrap(nothing[k], w - 10, 11)) for k, w in enumerate(widths))
    return cell, widths, bh, max(bh, 14.0 * lines + 12)


@dataclass
class _Geometry:
    """Where things go in one figure."""

    cell: float  # px a value
    widths: list[float]  # of one entry, per column
    col_w: list[float]  # of the whole column (its entries side by side), per column
    bh: float  # the tallest tensor block
    box_h: float  # a rank's box: the tallest block, or a nothing box
    left: float  # where the columns start: rank labels, then the transfer arrows' gutter
    top: float = 66.0
    label_h: float = 14.0

    @property
    def row_h(self) -> float:
        return self.box_h + self.label_h + 16

    def row_y(self, r: int) -> float:
        """The top of rank ``r``'s boxes."""
        return self.top + r * self.row_h + self.label_h


def _geometry(
    ncol: int,
    cells: list[list[Any]],
    labels: list[list[str] | None],
    nothing: list[str],
    cell: float | None,
    transfers: list[tuple[int, int, str]] | None,
) -> _Geometry:
    """The layout of ``ncol`` columns of ``cells``, and room for ``transfers``' arrows."""
    cell, widths, bh, box_h = layout(cells, labels, nothing, cell)
    entries = [max([len(slots(row[k])) for row in cells] + [1]) for k in range(ncol)]
    col_w = [widths[k] * entries[k] + GAP * (entries[k] - 1) for k in range(ncol)]
    gutter = 16 + 10 * min(8, len(transfers or []))
    return _Geometry(cell, widths, col_w, bh, box_h, LEFT + gutter)


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
    n = len(cells)
    fill = OriginFill(op)
    g = _geometry(len(columns), cells, labels, nothing, cell, transfers)
    c = Canvas()
    _draw_headings(c, title, subtitle, columns, g)
    where = rank_names(n)  # a cluster across hosts: each rank's host:kind:index under its name
    for r in range(n):
        y = g.row_y(r)
        _draw_rank_label(c, r, y, where, g.left)
        _draw_row(c, cells[r], y, g, labels, nothing, fill, (highlight or {}).get(r), hover)
    markers = _draw_transfers(c, transfers or [], g)
    body_w = g.left + sum(g.col_w) + COL_GAP * (len(columns) - 1) + 16
    width = max(body_w, 24 + text_width(title, 16), 24 + text_width(subtitle, 12))
    ly = g.top + n * g.row_h + 8
    legend_h = _legend(c, fill, 12, ly, max(width, 520) - 24)
    width = max(width, 520)
    height = ly + legend_h + 8
    defs = f"<defs>{markers}{fill.defs()}</defs>"
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' class='mgpu-collective-svg' width='{width:.0f}' "
        f"height='{height:.0f}' viewBox='0 0 {width:.0f} {height:.0f}' "
        f"style='background:#fff;max-width:100%;height:auto'>{defs}" + "".join(c.parts) + "</svg>"
    )


def _draw_headings(c: Canvas, title: str, subtitle: str, columns: list[str], g: _Geometry) -> None:
    """The title, the subtitle and each column's name."""
    c.text(12, 22, title, size=16, weight="bold")
    c.text(12, 40, subtitle, size=12, fill="#555")
    x: float = g.left
    for k, name in enumerate(columns):
        c.text(x + g.col_w[k] / 2, g.top - 6, name, size=13, anchor="middle", weight="bold")
        x += g.col_w[k] + COL_GAP


def _draw_rank_label(c: Canvas, r: int, y: float, where: list[str] | None, left: float) -> None:
    """Rank ``r``'s colour and name, and under it where it runs (a cluster across hosts)."""
    c.rect(12, y, 12, 12, rank_color(r))
    c.text(30, y + 11, f"rank {r}", size=12, weight="bold", fill=rank_color(r) if r < 10 else "#333")
    if where:
        for i, part in enumerate(wrap(where[r].replace(":", ": ", 1), left - 34, 10)[:2]):
            c.text(30, y + 24 + 11 * i, part.replace(": ", ":"), size=10, fill="#555")


def _draw_row(
    c: Canvas,
    row: list[Any],
    y: float,
    g: _Geometry,
    labels: list[list[str] | None],
    nothing: list[str],
    fill: OriginFill,
    highlight: Any,
    hover: bool,
) -> None:
    """One rank's holdings, column by column; ``highlight`` outlines a slot or a range in the last column."""
    ncol = len(g.col_w)
    x = g.left
    for k in range(ncol):
        h = row[k]
        hl = highlight if k == ncol - 1 else None
        if h is None:
            draw_nothing(c, x, y, g.widths[k], g.box_h, nothing[k])
        elif isinstance(h, list):
            _draw_slots(c, h, x, y, g, g.widths[k], labels[k], fill, hl, hover)
        else:
            draw_tensor(c, h, x, y, g.cell, fill, hl if isinstance(hl, tuple) else None, hover)
        x += g.col_w[k] + COL_GAP


def _draw_slots(
    c: Canvas,
    h: list[Any],
    x: float,
    y: float,
    g: _Geometry,
    width: float,
    names: list[str] | None,
    fill: OriginFill,
    hl: Any,
    hover: bool,
) -> None:
    """A list-valued holding, entry by entry (``width`` px each), the entry ``hl`` outlined."""
    for j, slot in enumerate(h):
        sx = x + j * (width + GAP)
        c.text(sx, y - 3, names[j] if names else f"[{j}]", size=10, fill="#555")
        if slot is None:
            draw_nothing(c, sx, y, width, g.box_h, "not yet")
        else:
            draw_tensor(c, slot, sx, y, g.cell, fill, hover=hover)
        if hl == j:
            sw = dims(slot)[1] * g.cell if slot is not None else width
            sh = dims(slot)[0] * g.cell if slot is not None else g.box_h
            c.rect(sx - 3, y - 3, sw + 6, sh + 6, "none", "#000000", 2.2)


def _draw_transfers(c: Canvas, transfers: list[tuple[int, int, str]], g: _Geometry) -> str:
    """An arrow per transfer in the left gutter; returns the arrowheads' ``<marker>`` definitions."""
    left = g.left
    for i, (a, b, what) in enumerate(transfers):
        ya = g.row_y(a) + g.bh / 2
        yb = g.row_y(b) + g.bh / 2
        gx = left - 10 - (i % 8) * 10
        tip = html.escape(f"rank {a} → rank {b}: {what}")
        c.parts.append(
            f"<path d='M {left - 6:.1f} {ya:.1f} C {gx - 24:.1f} {ya:.1f}, {gx - 24:.1f} {yb:.1f}, "
            f"{left - 8:.1f} {yb:.1f}' fill='none' stroke='{rank_color(a)}' stroke-width='2' "
            f"marker-end='url(#mgpu-arrow-{a % 20})'><title>{tip}</title></path>"
        )
    return "".join(
        f"<marker id='mgpu-arrow-{a % 20}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' "
        f"markerHeight='6' orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='{rank_color(a)}'/>"
        "</marker>"
        for a in sorted({a for a, _, _ in transfers})
    )


def _legend(c: Canvas, fill: OriginFill, x0: float, y0: float, width: float) -> float:
    """Draw the colour key (wrapping to ``width``); returns its height."""
    head = "colour = whose data a value holds:"
    c.text(x0, y0 + 10, head, size=11, fill="#555")
    x, y = x0 + text_width(head, 11) * 0.9 + 8, y0
    for f, label in fill.legend():
        w = 20 + text_width(label, 11) * 0.9  # the key's gaps may be a little tight, never its boxes
        if x + w > x0 + width:
            x, y = x0 + 12, y + 18
        c.rect(x, y, 12, 12, f, "#888", 0.5)
        c.text(x + 16, y + 10, label, size=11)
        x += w + 12
    return y - y0 + 18
