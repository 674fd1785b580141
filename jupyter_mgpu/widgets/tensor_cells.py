"""One holding of the collective pictures (``widgets/collective_view.py``) drawn as cells.

A tracked tensor (value and origin mask, ``widgets/collective_colors.py``) becomes a grid of cells
coloured by origin — 1-D as one row, >2-D flattened, sampled with a stride past :data:`MAX_CELLS` a
side — with its values printed when the grid is small; a holding of nothing is a dashed box that says so.
The figures of many ranks draw holdings as strips instead (``widgets/holding_strips.py``).
"""

from __future__ import annotations

import math
from typing import Any

from jupyter_mgpu.widgets.collective_colors import OriginFill, cell_title
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, Canvas, wrap

MAX_CELLS = 40  # rows/columns drawn per tensor; larger tensors are sampled with a stride


def grid(t: Any) -> tuple[list[list[tuple[float, int]]], bool]:
    """A tracked tensor as rows of (value, origin mask) (1-D → one row, >2-D → flattened), sampled if large."""
    x = t.detach()
    if x.dim() == 0:
        x = x.reshape(1, 1)
    elif x.dim() == 1:
        x = x.reshape(1, -1)
    elif x.dim() > 2:
        x = x.reshape(-1, x.shape[-1])
    rs, cs = max(1, math.ceil(x.shape[0] / MAX_CELLS)), max(1, math.ceil(x.shape[1] / MAX_CELLS))
    sampled = rs > 1 or cs > 1
    x = x[::rs, ::cs]
    values, masks = x.real.tolist(), x.imag.tolist()  # a mask as a Python int: exact for any rank's bit
    return [[(v, int(m)) for v, m in zip(vr, mr)] for vr, mr in zip(values, masks)], sampled


def dims(t: Any) -> tuple[int, int]:
    """Rows and columns of cells that tensor ``t`` is drawn with."""
    cells, _ = grid(t)
    return len(cells), len(cells[0])


def slots(h: Any) -> list[Any]:
    """The entries of a holding: a list's, or the holding alone."""
    return h if isinstance(h, list) else [h]


def fmt(v: float) -> str:
    """A value as printed in its cell."""
    if not math.isfinite(v):
        return str(v)
    return f"{v:.0f}" if v == int(v) and abs(v) < 1e5 else f"{v:.2g}"


def draw_tensor(
    c: Canvas,
    t: Any,
    x: float,
    y: float,
    cell: float,
    fill: OriginFill,
    outline: tuple[int, int] | None = None,
    hover: bool = False,
) -> None:
    """Tracked tensor ``t`` at (x, y), ``cell`` px a value; ``outline`` a flat element range to outline."""
    rows_of, _ = grid(t)
    rows, cols = len(rows_of), len(rows_of[0])
    numbers = rows * cols <= 64 and cell >= 14
    for i, row in enumerate(rows_of):
        for j, (v, m) in enumerate(row):
            f = fill(v, m)
            c.rect(
                x + j * cell,
                y + i * cell,
                cell,
                cell,
                f,
                "#dddddd" if cell >= 6 else "none",
                0.5,
                title=cell_title(v, m) if hover else "",
            )
            if numbers:  # zeros (the demo's background) faint, so the values that matter stand out
                c.text(
                    x + (j + 0.5) * cell,
                    y + (i + 0.68) * cell,
                    fmt(v),
                    size=max(MIN_FONT, int(cell * 0.5)),
                    anchor="middle",
                    fill="#c8c8c8" if v == 0 else fill.ink(f),
                )
    for bx, by, bw, bh, sw in outline_boxes(t, x, y, cell, outline):
        c.rect(bx, by, bw, bh, "none", "#000000", sw)
    c.rect(x, y, cols * cell, rows * cell, "none", "#888888", 0.8)


def outline_boxes(
    t: Any, x: float, y: float, cell: float, outline: tuple[int, int] | None
) -> list[tuple[float, float, float, float, float]]:
    """``(x, y, w, h, stroke width)`` of the outlines of flat element range ``outline`` of ``t`` drawn at
    (x, y): one per element, or the whole tensor's when it is sampled."""
    if outline is None:
        return []
    rows_of, sampled = grid(t)
    rows, cols = len(rows_of), len(rows_of[0])
    if sampled:
        return [(x, y, cols * cell, rows * cell, 2.0)]
    flat_cols = t.shape[-1] if t.dim() >= 1 else 1
    out = []
    for k in range(*outline):
        i, j = divmod(k, flat_cols)
        if i < rows and j < cols:
            out.append((x + j * cell, y + i * cell, cell, cell, 1.6))
    return out


def draw_nothing(c: Canvas, x: float, y: float, w: float, h: float, what: str, size: float = 11) -> None:
    """A dashed box at (x, y) that says ``what`` (a rank that holds nothing there) in ``size`` px text."""
    lines = wrap(what, w - (10 if size > MIN_FONT else 6), size)
    c.parts.append("<g class='mgpu-nothing'>")
    c.rect(x, y, w, h, "#fafafa", "#999999", 1, "4 3")
    step = size + 3 if size > MIN_FONT else size + 2
    y0 = y + h / 2 - (len(lines) - 1) * step / 2 + size * 0.36
    for k, line in enumerate(lines):
        c.text(x + w / 2, y0 + step * k, line, size=size, anchor="middle", fill="#666")
    c.parts.append("</g>")
