"""The before/after picture of a collective and the frames of its logical-schedule animation.

Hand-written SVG (no matplotlib, no kaleido): one row per rank, a "before" and an "after" column,
each tensor drawn as a grid of cells coloured by *origin* — the rank whose data a value came from,
stripes of several ranks' colours where a reduction combined them, white for 0 (see
:mod:`.collective_colors`); small grids print the values, every cell of the before/after figure says
its value and origin on hover. List-valued holdings (all_gather's output, reduce_scatter's input
chunks, …) are drawn entry by entry; a rank that receives (or sends) nothing gets a dashed box that
says so. The figure is at most :data:`WIDTH` px wide and scales down with the cell.
"""

from __future__ import annotations

import html
import math
from typing import Any

from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.widgets.collective_colors import OriginFill, attach, cell_title, track
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.rank_names import rank_names

WIDTH = 860  # the widest figure (fits a notebook cell next to JupyterLab's file browser at 1280 px)
MAX_CELLS = 40  # rows/columns drawn per tensor; larger tensors are sampled with a stride
FONT = "font-family='sans-serif'"
CHAR = 0.62  # width of an average sans-serif character, in font sizes (for laying out text)
LEFT = 84  # rank labels
GAP, COL_GAP = 10.0, 26.0  # between entries of a list, between columns


def _text_w(s: str, size: float) -> float:
    return len(s) * size * CHAR


def _wrap(s: str, width: float, size: float) -> list[str]:
    """``s`` broken into lines of at most ``width`` px at font ``size``."""
    per = max(4, int(width / (size * CHAR)))
    lines, line = [], ""
    for word in s.split():
        if line and len(line) + 1 + len(word) > per:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + [line] if line else lines


def _grid(t: Any) -> tuple[list[list[tuple[float, int]]], bool]:
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
    values, masks = x.real.tolist(), x.imag.long().tolist()
    return [list(zip(v, m)) for v, m in zip(values, masks)], sampled


def _dims(t: Any) -> tuple[int, int]:
    grid, _ = _grid(t)
    return len(grid), len(grid[0])


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:.0f}" if v == int(v) and abs(v) < 1e5 else f"{v:.2g}"


class _Canvas:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(
        self,
        x: float,
        y: float,
        s: str,
        size: float = 12,
        anchor: str = "start",
        weight: str = "normal",
        fill: str = "#222",
    ) -> None:
        self.parts.append(
            f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size:g}' text-anchor='{anchor}' "
            f"font-weight='{weight}' fill='{fill}' {FONT}>{html.escape(s)}</text>"
        )

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        fill: str,
        stroke: str = "none",
        sw: float = 0,
        dash: str = "",
        title: str = "",
    ) -> None:
        d = f" stroke-dasharray='{dash}'" if dash else ""
        head = (
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' fill='{fill}' "
            f"stroke='{stroke}' stroke-width='{sw:g}'{d}"
        )
        self.parts.append(f"{head}><title>{title}</title></rect>" if title else f"{head}/>")


def _tensor(
    c: _Canvas,
    t: Any,
    x: float,
    y: float,
    cell: float,
    fill: OriginFill,
    outline: tuple[int, int] | None = None,
    hover: bool = False,
) -> None:
    grid, sampled = _grid(t)
    rows, cols = len(grid), len(grid[0])
    numbers = rows * cols <= 64 and cell >= 14
    flat_cols = t.shape[-1] if t.dim() >= 1 else 1
    for i, row in enumerate(grid):
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
                    _fmt(v),
                    size=max(8, int(cell * 0.5)),
                    anchor="middle",
                    fill="#c8c8c8" if v == 0 else fill.ink(f),
                )
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
    lines = _wrap(what, w - 10, 11)
    c.parts.append("<g class='mgpu-nothing'>")
    c.rect(x, y, w, h, "#fafafa", "#999999", 1, "4 3")
    y0 = y + h / 2 - (len(lines) - 1) * 7 + 4
    for k, line in enumerate(lines):
        c.text(x + w / 2, y0 + 14 * k, line, size=11, anchor="middle", fill="#666")
    c.parts.append("</g>")


def _slots(h: Any) -> list[Any]:
    return h if isinstance(h, list) else [h]


def _layout(
    cells: list[list[Any]], labels: list[list[str] | None], nothing: list[str], cell: float | None
) -> tuple[float, list[float], float, float]:
    """Cell size, each column's entry width, the tallest block and the nothing-box height."""
    ncol = len(labels)
    tensors = [t for row in cells for h in row for t in _slots(h) if t is not None]
    entries = [max([len(_slots(row[k])) for row in cells] + [1]) for k in range(ncol)]
    tcols = max([_dims(t)[1] for t in tensors] + [1])
    trows = max([_dims(t)[0] for t in tensors] + [1])
    if cell is None:
        room = WIDTH - LEFT - 40 - COL_GAP * ncol - GAP * sum(e - 1 for e in entries)
        cell = max(3.0, min(22.0, room / (tcols * sum(entries)), 150 / trows))
    bw, bh = tcols * cell, trows * cell
    widths = []
    for k in range(ncol):
        need = [bw, 96.0 if any(s is None for row in cells for s in _slots(row[k])) else 0.0]
        need += [_text_w(s, 10) for s in labels[k] or []]
        widths.append(max(need))
    lines = max(len(_wrap(nothing[k], w - 10, 11)) for k, w in enumerate(widths))
    return cell, widths, bh, max(bh, 14.0 * lines + 12)


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
    n, ncol = len(cells), len(columns)
    fill = OriginFill(op)
    cell, widths, bh, box_h = _layout(cells, labels, nothing, cell)
    entries = [max([len(_slots(row[k])) for row in cells] + [1]) for k in range(ncol)]
    col_w = [widths[k] * entries[k] + GAP * (entries[k] - 1) for k in range(ncol)]
    gutter = 16 + 10 * min(8, len(transfers or []))
    left = LEFT + gutter
    top, label_h = 66.0, 14.0
    row_h = box_h + label_h + 16
    c = _Canvas()
    c.text(12, 22, title, size=16, weight="bold")
    c.text(12, 40, subtitle, size=12, fill="#555")
    x: float = left
    for k, name in enumerate(columns):
        c.text(x + col_w[k] / 2, top - 6, name, size=13, anchor="middle", weight="bold")
        x += col_w[k] + COL_GAP
    where = rank_names(n)  # a cluster across hosts: each rank's host:kind:index under its name
    for r in range(n):
        y = top + r * row_h + label_h
        c.rect(12, y, 12, 12, rank_color(r))
        c.text(30, y + 11, f"rank {r}", size=12, weight="bold", fill=rank_color(r) if r < 10 else "#333")
        if where:
            for i, part in enumerate(_wrap(where[r].replace(":", ": ", 1), left - 34, 10)[:2]):
                c.text(30, y + 24 + 11 * i, part.replace(": ", ":"), size=10, fill="#555")
        x = left
        for k in range(ncol):
            h = cells[r][k]
            hl = (highlight or {}).get(r) if k == ncol - 1 else None
            if h is None:
                _nothing(c, x, y, widths[k], box_h, nothing[k])
            elif isinstance(h, list):
                names = labels[k]
                for j, slot in enumerate(h):
                    sx = x + j * (widths[k] + GAP)
                    c.text(sx, y - 3, names[j] if names else f"[{j}]", size=10, fill="#555")
                    if slot is None:
                        _nothing(c, sx, y, widths[k], box_h, "not yet")
                    else:
                        _tensor(c, slot, sx, y, cell, fill, hover=hover)
                    if hl == j:
                        sw = _dims(slot)[1] * cell if slot is not None else widths[k]
                        sh = _dims(slot)[0] * cell if slot is not None else box_h
                        c.rect(sx - 3, y - 3, sw + 6, sh + 6, "none", "#000000", 2.2)
            else:
                _tensor(c, h, x, y, cell, fill, hl if isinstance(hl, tuple) else None, hover)
            x += col_w[k] + COL_GAP
    for i, (a, b, what) in enumerate(transfers or []):
        ya = top + a * row_h + label_h + bh / 2
        yb = top + b * row_h + label_h + bh / 2
        gx = left - 10 - (i % 8) * 10
        tip = html.escape(f"rank {a} → rank {b}: {what}")
        c.parts.append(
            f"<path d='M {left - 6:.1f} {ya:.1f} C {gx - 24:.1f} {ya:.1f}, {gx - 24:.1f} {yb:.1f}, "
            f"{left - 8:.1f} {yb:.1f}' fill='none' stroke='{rank_color(a)}' stroke-width='2' "
            f"marker-end='url(#mgpu-arrow-{a % 20})'><title>{tip}</title></path>"
        )
    markers = "".join(
        f"<marker id='mgpu-arrow-{a % 20}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' "
        f"markerHeight='6' orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='{rank_color(a)}'/>"
        "</marker>"
        for a in sorted({a for a, _, _ in transfers or []})
    )
    body_w = left + sum(col_w) + COL_GAP * (ncol - 1) + 16
    width = max(body_w, 24 + _text_w(title, 16), 24 + _text_w(subtitle, 12))
    ly = top + n * row_h + 8
    legend_h = _legend(c, fill, 12, ly, max(width, 520) - 24)
    width = max(width, 520)
    height = ly + legend_h + 8
    defs = f"<defs>{markers}{fill.defs()}</defs>"
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' class='mgpu-collective-svg' width='{width:.0f}' "
        f"height='{height:.0f}' viewBox='0 0 {width:.0f} {height:.0f}' "
        f"style='background:#fff;max-width:100%;height:auto'>{defs}" + "".join(c.parts) + "</svg>"
    )


def _legend(c: _Canvas, fill: OriginFill, x0: float, y0: float, width: float) -> float:
    """Draw the colour key (wrapping to ``width``); returns its height."""
    head = "colour = whose data a value holds:"
    c.text(x0, y0 + 10, head, size=11, fill="#555")
    x, y = x0 + _text_w(head, 11) * 0.9 + 8, y0
    for f, label in fill.legend():
        w = 20 + _text_w(label, 11) * 0.9  # the key's gaps may be a little tight, never its boxes
        if x + w > x0 + width:
            x, y = x0 + 12, y + 18
        c.rect(x, y, 12, 12, f, "#888", 0.5)
        c.text(x + 16, y + 10, label, size=11)
        x += w + 12
    return y - y0 + 18


def entry_labels(name: str, n: int) -> tuple[list[str] | None, list[str] | None]:
    """Labels of list entries in the before and after columns of collective ``name``."""
    before = (
        [f"chunk {j} → rank {j}" for j in range(n)] if name in ("reduce_scatter", "all_to_all", "scatter") else None
    )
    after = [f"from rank {j}" for j in range(n)] if name in ("all_gather", "gather", "all_to_all") else None
    return before, after


def nothing_text(name: str, src: int) -> tuple[str, str]:
    """What the dashed box says for a rank with no data in the before / after column."""
    before = f"sends nothing (root is rank {src})" if name == "scatter" else "nothing"
    after = f"receives nothing (root is rank {src})" if name in ("reduce", "gather") else "nothing"
    return before, after


def tracked_schedule(name: str, op: str | None, src: int | None, inputs: list[Any]) -> list[sched.Frame]:
    """The logical schedule run on tracked inputs: every frame's values know which ranks they came from."""
    return sched.schedule(name, [track(x, r) for r, x in enumerate(inputs)], op or "sum", src or 0)


def before_after_svg(
    name: str,
    op: str | None,
    src: int | None,
    inputs: list[Any],
    after: list[Any],
    backend: str = "",
    seconds: float | None = None,
) -> str:
    """The before/after figure of one collective run: one row per rank, columns before and after.

    ``inputs`` are the ranks' input tensors, ``after`` what each rank held afterwards (captured on the
    ranks); the origin of every value comes from the logical schedule run on tracked inputs."""
    n = len(inputs)
    title = name + (f" (op {op})" if op else "") + (f", root rank {src}" if src is not None else "")
    took = f", {seconds * 1e3:.2f} ms (slowest rank)" if seconds is not None else ""
    subtitle = f"{n} ranks{', ' + backend if backend else ''}{took} — real results captured on the ranks"
    final = tracked_schedule(name, op, src, inputs)[-1].holdings
    before = [sched.before_entries(name, track(x, r), r, src or 0, n) for r, x in enumerate(inputs)]
    cells = [[before[r], attach(after[r], final[r])] for r in range(n)]
    bl, al = entry_labels(name, n)
    nb, na = nothing_text(name, src or 0)
    return render_grid(title, subtitle, ["before", "after"], cells, [bl, al], [nb, na], op, hover=True)


def frame_svg(
    name: str,
    op: str | None,
    src: int | None,
    frame: sched.Frame,
    index: int,
    total: int,
    n: int,
    cell: float | None = None,
) -> str:
    """One frame of the logical-schedule animation (tracked holdings after the step, arrows for transfers)."""
    title = f"{name}{f' (op {op})' if op else ''} — logical schedule, step {index}/{total - 1}"
    bl, al = entry_labels(name, n)
    labels = al if (index > 0 and al) else bl
    _, na = nothing_text(name, src or 0)
    cells = [[h] for h in frame.holdings]
    return render_grid(
        title,
        frame.caption,
        ["holds"],
        cells,
        [labels],
        [na if index else "nothing"],
        op,
        frame.transfers,
        frame.highlight,
        cell,
    )


def schedule_frames(name: str, op: str | None, src: int | None, inputs: list[Any]) -> tuple[list[str], list[str]]:
    """Every frame of the logical schedule as SVG (one scale for all), and the captions."""
    frames = tracked_schedule(name, op, src, inputs)
    n = len(inputs)
    every = [[h] for f in frames for h in f.holdings]
    bl, al = entry_labels(name, n)
    cell, _, _, _ = _layout(every, [al or bl], ["nothing"], None)
    svgs = [frame_svg(name, op, src, f, i, len(frames), n, cell) for i, f in enumerate(frames)]
    return svgs, [f.caption for f in frames]
