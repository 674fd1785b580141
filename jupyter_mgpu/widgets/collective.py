"""The before/after picture of a collective and the frames of its logical-schedule animation.

Hand-written SVG (no matplotlib, no kaleido): one row per rank, a "before" and an "after" column,
each tensor drawn as a grid of cells coloured by value — value v has rank v−1's colour (see
:mod:`.colors`), 0 is white, so the demo data ``rank + 1`` keeps its rank's colour wherever it goes.
List-valued holdings (all_gather's output, reduce_scatter's input chunks, …) are drawn entry by
entry; a rank that receives (or sends) nothing gets a dashed box that says so. The same SVG is the
notebook's rich repr, the static image for exported notebooks and each frame of the player.
"""

from __future__ import annotations

import html
import math
from typing import Any

from .colors import EMPTY, PALETTE, ramp, rank_color, text_color

MAX_CELLS = 40  # rows/columns drawn per tensor; larger tensors are sampled with a stride
FONT = "font-family='sans-serif'"


def _as_grid(t: Any) -> tuple[list[list[float]], bool]:
    """A tensor as rows of floats (1-D → one row, >2-D → flattened leading dims), sampled if large."""
    x = t.detach().to("cpu").double()
    if x.dim() == 0:
        x = x.reshape(1, 1)
    elif x.dim() == 1:
        x = x.reshape(1, -1)
    elif x.dim() > 2:
        x = x.reshape(-1, x.shape[-1])
    sampled = False
    rs = max(1, math.ceil(x.shape[0] / MAX_CELLS))
    cs = max(1, math.ceil(x.shape[1] / MAX_CELLS))
    if rs > 1 or cs > 1:
        x, sampled = x[::rs, ::cs], True
    return x.tolist(), sampled


class ValueColors:
    """Colour of a value: categorical (value v ↔ rank v−1) for small whole numbers, a ramp otherwise."""

    def __init__(self, tensors: list[Any]):
        values: set[float] = set()
        lo, hi = math.inf, -math.inf
        for t in tensors:
            x = t.detach().to("cpu").double().reshape(-1)
            if x.numel() == 0:
                continue
            lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
            if len(values) <= 64:
                values.update(float(v) for v in x.unique()[:65].tolist())
        self.lo, self.hi = (lo, hi) if lo <= hi else (0.0, 1.0)
        self.categorical = bool(values) and all(v == int(v) and 0 <= v <= 64 for v in values)
        self.values = sorted(values) if len(values) <= 64 else []

    def __call__(self, v: float) -> str:
        if self.categorical:
            return EMPTY if v == 0 else PALETTE[(int(v) - 1) % len(PALETTE)]
        if not math.isfinite(v):
            return "#000000"
        span = self.hi - self.lo
        return ramp((v - self.lo) / span) if span > 0 else ramp(0.5)

    def legend(self) -> list[tuple[str, str]]:
        if self.categorical:
            return [(f"{v:g}", self(v)) for v in self.values if v != 0][:20]
        return [(f"{self.lo:.3g}", ramp(0.0)), (f"{self.hi:.3g}", ramp(1.0))]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v == int(v) and abs(v) < 1e5 else f"{v:.2g}"


class _Canvas:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(self, x: float, y: float, s: str, size: int = 12, anchor: str = "start", weight: str = "normal",
             fill: str = "#222") -> None:
        self.parts.append(f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' "
                          f"font-weight='{weight}' fill='{fill}' {FONT}>{html.escape(s)}</text>")

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str = "none", sw: float = 0,
             dash: str = "") -> None:
        d = f" stroke-dasharray='{dash}'" if dash else ""
        self.parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' fill='{fill}' "
                          f"stroke='{stroke}' stroke-width='{sw}'{d}/>")


def _block_size(t: Any, cell: float) -> tuple[float, float]:
    grid, _ = _as_grid(t)
    return len(grid[0]) * cell, len(grid) * cell


def _tensor(c: _Canvas, t: Any, x: float, y: float, cell: float, colors: ValueColors,
            outline: tuple[int, int] | None = None) -> None:
    grid, sampled = _as_grid(t)
    rows, cols = len(grid), len(grid[0])
    numbers = rows * cols <= 64 and cell >= 14
    flat_cols = t.shape[-1] if t.dim() >= 1 else 1
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            fill = colors(v)
            c.rect(x + j * cell, y + i * cell, cell, cell, fill, "#dddddd" if cell >= 6 else "none", 0.5)
            if numbers:
                c.text(x + (j + 0.5) * cell, y + (i + 0.68) * cell, _fmt(v), size=max(8, int(cell * 0.5)),
                       anchor="middle", fill=text_color(fill))
    if outline is not None and not sampled:
        lo, hi = outline
        for k in range(lo, hi):
            i, j = divmod(k, flat_cols)
            if i < rows and j < cols:
                c.rect(x + j * cell, y + i * cell, cell, cell, "none", "#000000", 1.6)
    elif outline is not None:
        c.rect(x, y, cols * cell, rows * cell, "none", "#000000", 2)
    c.rect(x, y, cols * cell, rows * cell, "none", "#888888", 0.8)


def _nothing(c: _Canvas, x: float, y: float, w: float, h: float, what: str) -> None:
    c.rect(x, y, w, h, "#fafafa", "#999999", 1, "4 3")
    c.text(x + w / 2, y + h / 2 + 4, what, size=11, anchor="middle", fill="#777")


def _cell_size(tensors: list[Any], per_row: int) -> float:
    cols = max((_as_grid(t)[0][0].__len__() for t in tensors), default=1)
    rows = max((len(_as_grid(t)[0]) for t in tensors), default=1)
    width_budget = 520 / max(1, per_row)
    return max(3.0, min(20.0, width_budget / cols, 120 / rows))


def _tensors_in(holding: Any) -> list[Any]:
    if holding is None:
        return []
    if isinstance(holding, list):
        return [h for h in holding if h is not None]
    return [holding]


def render_grid(title: str, subtitle: str, columns: list[str], cells: list[list[Any]],
                entry_labels: list[list[str] | None] | None = None, nothing: list[str] | None = None,
                transfers: list[tuple[int, int, str]] | None = None, highlight: dict[int, Any] | None = None,
                colors: ValueColors | None = None) -> str:
    """SVG of a rank × column grid; ``cells[r][k]`` is a tensor, a list of slots, or None.

    ``entry_labels[k]`` labels the list entries of column k; ``nothing[k]`` is the text for None in
    column k; ``transfers`` draw arrows between rank rows in the left gutter; ``highlight`` outlines
    (per rank) a slot index or a flat element range in the last column.
    """
    n, ncol = len(cells), len(columns)
    all_t = [t for row in cells for h in row for t in _tensors_in(h)]
    colors = colors or ValueColors(all_t)
    per_row = max([len(h) if isinstance(h, list) else 1 for row in cells for h in row] + [1])
    cell = _cell_size(all_t, per_row * ncol) if all_t else 10.0
    sample = all_t[0] if all_t else None
    bw, bh = _block_size(sample, cell) if sample is not None else (60.0, 40.0)
    gap, label_h = 8.0, 14.0
    col_w = [max(bw + 0.0, 90.0) * max([len(row[k]) if isinstance(row[k], list) else 1 for row in cells] + [1])
             + gap * 4 for k in range(ncol)]
    gutter = 30 + 14 * len(transfers or [])
    left = 70 + min(gutter, 120)
    top = 48 + 18
    row_h = bh + label_h + 18
    legend = colors.legend()
    width = max(left + sum(col_w) + 20, 24 + 9 * len(title), 24 + 6.5 * len(subtitle),
                160 + sum(22 + 7 * len(t) for t, _ in legend) + (300 if colors.categorical else 0))
    height = top + n * row_h + 40
    c = _Canvas()
    c.text(12, 22, title, size=16, weight="bold")
    c.text(12, 40, subtitle, size=12, fill="#555")
    x = left
    for k, name in enumerate(columns):
        c.text(x + col_w[k] / 2 - gap, top - 6, name, size=13, anchor="middle", weight="bold")
        x += col_w[k]
    for r in range(n):
        y = top + r * row_h + label_h
        c.rect(12, y, 12, 12, rank_color(r))
        c.text(30, y + 11, f"rank {r}", size=12, weight="bold", fill=rank_color(r) if r < 10 else "#333")
        x = left
        for k in range(ncol):
            h = cells[r][k]
            hl = (highlight or {}).get(r) if k == ncol - 1 else None
            if h is None:
                _nothing(c, x, y, max(bw, 90.0), bh, (nothing or ["nothing"] * ncol)[k])
            elif isinstance(h, list):
                labels = (entry_labels or [None] * ncol)[k]
                for j, slot in enumerate(h):
                    sx = x + j * (max(bw, 90.0) + gap)
                    c.text(sx, y - 3, labels[j] if labels else f"[{j}]", size=10, fill="#555")
                    if slot is None:
                        _nothing(c, sx, y, max(bw, 90.0), bh, "not yet")
                    else:
                        _tensor(c, slot, sx, y, cell, colors)
                    if hl == j:
                        sw, sh = _block_size(slot, cell) if slot is not None else (max(bw, 90.0), bh)
                        c.rect(sx - 3, y - 3, sw + 6, sh + 6, "none", "#000000", 2.2)
            else:
                _tensor(c, h, x, y, cell, colors, hl if isinstance(hl, tuple) else None)
            x += col_w[k]
    for i, (a, b, label) in enumerate(transfers or []):
        ya = top + a * row_h + label_h + bh / 2
        yb = top + b * row_h + label_h + bh / 2
        gx = left - 12 - (i % 8) * 12
        color = rank_color(a)
        tip = html.escape(f"rank {a} → rank {b}: {label}")
        c.parts.append(f"<path d='M {left - 6:.1f} {ya:.1f} C {gx - 30:.1f} {ya:.1f}, {gx - 30:.1f} {yb:.1f}, "
                       f"{left - 8:.1f} {yb:.1f}' fill='none' stroke='{color}' stroke-width='2' "
                       f"marker-end='url(#mgpu-arrow-{a % len(PALETTE)})'><title>{tip}"
                       "</title></path>")
    markers = "".join(
        f"<marker id='mgpu-arrow-{a % len(PALETTE)}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' "
        f"markerHeight='6' orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='{rank_color(a)}'/>"
        "</marker>" for a in sorted({a for a, _, _ in transfers or []}))
    ly = height - 18
    lx = 12.0
    c.text(lx, ly + 10, "values:" if colors.categorical else "value range:", size=11, fill="#555")
    lx += 60
    for text, fill in legend:
        c.rect(lx, ly, 12, 12, fill, "#888", 0.5)
        c.text(lx + 15, ly + 10, text, size=11)
        lx += 22 + 7 * len(text)
    if colors.categorical:
        c.text(lx + 6, ly + 10, "(value v has rank v−1's colour; 0 is white)", size=10, fill="#777")
    defs = f"<defs>{markers}</defs>" if markers else ""
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
            f"viewBox='0 0 {width:.0f} {height:.0f}' style='background:#fff'>{defs}"
            + "".join(c.parts) + "</svg>")


def entry_labels(name: str, n: int, src: int) -> tuple[list[str] | None, list[str] | None]:
    """Labels of list entries in the before and after columns of collective ``name``."""
    before = [f"chunk {j} → rank {j}" for j in range(n)] if name in ("reduce_scatter", "all_to_all", "scatter") \
        else None
    after = [f"from rank {j}" for j in range(n)] if name in ("all_gather", "gather", "all_to_all") else None
    return before, after


def nothing_text(name: str, src: int) -> tuple[str, str]:
    """What the dashed box says for a rank with no data in the before / after column."""
    before = f"sends nothing (root is rank {src})" if name == "scatter" else "nothing"
    after = f"receives nothing (root is rank {src})" if name in ("reduce", "gather") else "nothing"
    return before, after


def before_after_svg(name: str, op: str | None, src: int | None, before: list[Any], after: list[Any],
                     backend: str = "", seconds: float | None = None) -> str:
    """The before/after figure of one collective run: one row per rank, columns before and after."""
    n = len(before)
    title = name + (f" (op {op})" if op else "") + (f", root rank {src}" if src is not None else "")
    took = f", {seconds * 1e3:.2f} ms (slowest rank)" if seconds is not None else ""
    subtitle = f"{n} ranks{', ' + backend if backend else ''}{took} — real results captured on the ranks"
    bl, al = entry_labels(name, n, src or 0)
    nb, na = nothing_text(name, src or 0)
    cells = [[before[r], after[r]] for r in range(n)]
    return render_grid(title, subtitle, ["before", "after"], cells, [bl, al], [nb, na])


def frame_svg(name: str, op: str | None, src: int | None, frame: Any, index: int, total: int,
              colors: ValueColors, n: int) -> str:
    """One frame of the logical-schedule animation as SVG (holdings after the step, arrows for transfers)."""
    title = f"{name}{f' (op {op})' if op else ''} — logical schedule, step {index}/{total - 1}"
    bl, al = entry_labels(name, n, src or 0)
    labels = al if (index > 0 and al) else bl
    _, na = nothing_text(name, src or 0)
    cells = [[h] for h in frame.holdings]
    return render_grid(title, frame.caption, ["holds"], cells, [labels], [na if index else "nothing"],
                       frame.transfers, frame.highlight, colors)
