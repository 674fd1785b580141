"""Where things go in the rank × column figure of the collective pictures (``widgets/rank_grid.py``).

One :class:`Geometry` serves a whole series of frames (a player's frames all have one size: nothing
jumps while it plays), planned by :func:`plan` from every frame's holdings. Two ways to draw:

- **cells** (few ranks, small tensors): each holding a grid of cells with its values, as
  ``widgets/tensor_cells.py`` draws it, a label above each entry of a list;
- **strips** (more than :data:`DETAIL_RANKS` ranks, more than :data:`DETAIL_CELLS` cells, or cells that
  would not fit): each holding one strip (``widgets/holding_strips.py``), the entries of a list side by
  side and folded onto more lines rather than shrunk past :data:`MIN_ENTRY` px (32 on one line), a
  tensor held alone across its whole column (an all_gather's input fills its row, not one entry's place).

Nothing is drawn wider than :data:`WIDTH` px: cells that would not fit are drawn as strips, and long
titles wrap.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from jupyter_mgpu.widgets.slot_codes import tenths
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, text_width, wrap
from jupyter_mgpu.widgets.tensor_cells import dims, slots

WIDTH = 860  # the widest figure (fits a notebook cell next to JupyterLab's file browser at 1280 px)
LEFT = 84  # rank labels
RIGHT = 16
GAP, COL_GAP = 10.0, 26.0  # between entries of a list, between columns
DETAIL_RANKS = 8  # more ranks: strips
DETAIL_CELLS = 20_000  # cells in one frame; more: strips
STRIP_H, LINE, ENTRY_GAP = 14.0, 18.0, 2.0  # a strip's height, the pitch of folded lines, between entries
MIN_ENTRY, MAX_ENTRY = 18.0, 44.0  # an entry of a list drawn as strips: "63" printed fits 18 px
TENSOR_MIN, TENSOR_MAX = 72.0, 260.0  # a tensor drawn as one strip


def fit_label(label: str, width: float, size: float = 10) -> str:
    """``label`` as printed above an entry ``width`` px wide: whole, or without its first words
    (``chunk 7 → rank 7``, ``7 → rank 7``, ``→ rank 7``, ``rank 7``, ``7``); at least its last word."""
    words = label.split()
    for i in range(len(words)):
        short = " ".join(words[i:])
        if text_width(short, size) <= width:
            return short
    return words[-1] if words else ""


def layout(
    cells: list[list[Any]],
    labels: list[list[str] | None],
    nothing: list[str],
    cell: float | None,
    gutter: float = 16.0,
) -> tuple[float, list[float], float, float]:
    """Cells drawn: the cell size, each column's entry width, the tallest block and the nothing-box height.

    ``gutter`` is the room the transfer arrows take left of the columns; labels count as short as
    :func:`fit_label` may print them."""
    ncol = len(labels)
    tensors = [t for row in cells for h in row for t in slots(h) if t is not None]
    entries = [max([len(slots(row[k])) for row in cells] + [1]) for k in range(ncol)]
    tcols = max([dims(t)[1] for t in tensors] + [1])
    trows = max([dims(t)[0] for t in tensors] + [1])
    if cell is None:
        room = WIDTH - LEFT - gutter - RIGHT - COL_GAP * (ncol - 1) - GAP * sum(e - 1 for e in entries)
        cell = max(3.0, min(22.0, room / (tcols * sum(entries)), 150 / trows))
    bw, bh = tcols * cell, trows * cell
    widths = []
    for k in range(ncol):
        need = [bw, 96.0 if entries[k] == 1 and any(row[k] is None for row in cells) else 0.0]
        if any(isinstance(row[k], list) and any(s is None for s in row[k]) for row in cells):
            need.append(text_width("not yet", 11) + 10)  # an entry not filled yet says so
        need += [text_width(fit_label(s, 0), 10) for s in labels[k] or []]
        widths.append(max(need))
    spans = [w * e + GAP * (e - 1) for w, e in zip(widths, entries)]  # a holding of nothing spans its column
    lines = max(len(wrap(nothing[k], w - 10, 11)) for k, w in enumerate(spans))
    return cell, widths, bh, max(bh, 14.0 * lines + 12)


@dataclass
class Geometry:
    """Where things go in every frame of one figure."""

    compact: bool  # strips, not cells
    cell: float  # px a value (cells)
    widths: list[float]  # of one entry, per column
    entries: list[int]  # the most entries of a holding, per column
    per_line: list[int]  # entries side by side, per column
    col_w: list[float]  # of the whole column, per column
    bh: float  # the tallest block
    box_h: float  # a rank's box: the tallest block, or a nothing box
    left: float  # where the columns start: rank labels, then the transfer arrows' gutter
    title_lines: int = 1
    sub_lines: int = 1
    notes: list[str] = field(default_factory=list)  # under each column's name (strips: what its entries are)
    heights: list[float] = field(default_factory=list)  # strips: each rank's box (its own lines), else box_h
    n: int = 0  # ranks

    @property
    def head_y(self) -> float:
        """The baseline of the column names."""
        return 22 + 18 * self.title_lines + 14 * (self.sub_lines - 1) + 20

    @property
    def top(self) -> float:
        return self.head_y + 6 + (12 if any(self.notes) else 0)

    @property
    def label_h(self) -> float:
        """Room above a rank's boxes (cells: each entry's label)."""
        return 0.0 if self.compact else 14.0

    @property
    def row_h(self) -> float:
        return self.box_h + (8 if self.compact else self.label_h + 16)

    def box(self, r: int) -> float:
        """The height of rank ``r``'s boxes."""
        return self.heights[r] if self.heights else self.box_h

    @cached_property
    def _above(self) -> list[float]:
        """Strips: the height of the boxes above each rank's, and of all of them (a frame asks for each
        rank's place many times: summed once per figure, not per call)."""
        return [0.0, *itertools.accumulate(self.heights)]

    def row_y(self, r: int) -> float:
        """The top of rank ``r``'s boxes."""
        if self.heights:
            return self.top + self._above[min(r, len(self.heights))] + r * (self.row_h - self.box_h)
        return self.top + r * self.row_h + self.label_h

    def bottom(self, n: int) -> float:
        """Below the last of ``n`` ranks' rows."""
        return self.row_y(n) - self.label_h

    def mid(self, r: int) -> float:
        """Where the transfer arrows of rank ``r`` end."""
        return self.row_y(r) + (STRIP_H if self.compact else self.bh) / 2

    def col_x(self, k: int) -> float:
        return self.left + sum(self.col_w[:k]) + COL_GAP * k

    def slot_xy(self, r: int, k: int, j: int) -> tuple[float, float]:
        """The top left of entry ``j`` of rank ``r``'s holding in column ``k``."""
        if not self.compact:
            return self.col_x(k) + j * (self.widths[k] + GAP), self.row_y(r)
        line, pos = divmod(j, self.per_line[k])
        return self.col_x(k) + pos * (self.widths[k] + ENTRY_GAP), self.row_y(r) + line * LINE

    def entry_w(self, k: int, listed: bool) -> float:
        """The width of an entry of a list (``listed``) in column ``k``, or of a tensor held alone: strips
        draw it across the whole column (the input of an all_gather fills its row, not one entry's place)."""
        return self.widths[k] if listed or not self.compact else self.col_w[k]

    def slot_index(self, r: int, k: int, j: int) -> int:
        """Entry ``j`` of rank ``r``'s holding in column ``k`` in the order of every rank's entries: rank,
        column, entry."""
        return r * sum(self.entries) + sum(self.entries[:k]) + j

    @cached_property
    def grid(self) -> dict[str, Any]:
        """Where each entry is drawn, in tenths of a px, as the browser draws codes
        (``widgets/slot_codes.py``): each column's x of each place on a line (``xs``), each rank's y
        (``ys``), the pitch of lines, a strip's height, each column's entry and tensor widths."""
        ncol = len(self.entries)
        return {
            "entries": list(self.entries),
            "per": list(self.per_line),
            "xs": [[tenths(self.slot_xy(0, k, pos)[0]) for pos in range(self.per_line[k])] for k in range(ncol)],
            "ys": [tenths(self.row_y(r)) for r in range(self.n)],
            "line": tenths(LINE),
            "h": tenths(STRIP_H),
            "w": [tenths(w) for w in self.widths],
            "tw": [tenths(self.entry_w(k, False)) for k in range(ncol)],
        }

    def slot10(self, r: int, k: int, j: int) -> tuple[int, int]:
        """The top left of entry ``j`` of rank ``r``'s holding in column ``k`` in tenths of a px, as
        :attr:`grid` places it."""
        line, pos = divmod(j, self.per_line[k])
        return self.grid["xs"][k][pos], self.grid["ys"][r] + line * self.grid["line"]

    @property
    def body_w(self) -> float:
        return self.left + sum(self.col_w) + COL_GAP * (len(self.col_w) - 1) + RIGHT


def _entries(frames: list[list[list[Any]]], k: int) -> int:
    return max([len(slots(row[k])) for cells in frames for row in cells] + [1])


def _cells_drawn(cells: list[list[Any]]) -> int:
    return sum(math.prod(dims(t)) for row in cells for h in row for t in slots(h) if t is not None)


def plan(
    frames: list[list[list[Any]]],
    labels: list[list[list[str] | None]],
    nothing: list[list[str]],
    transfers: int = 0,
    cell: float | None = None,
    texts: tuple[list[str], list[str]] = ([""], [""]),
    host_lines: int = 0,
) -> Geometry:
    """One geometry for every frame: ``frames[f][r][k]`` is rank r's holding in column k of frame f (a
    tracked tensor, a list of slots, None), ``labels[f][k]`` its entries' labels, ``nothing[f][k]`` the
    text of a None; ``transfers`` the most arrows of a frame, ``texts`` every title and subtitle, and
    ``host_lines`` the lines under a rank's name (a cluster across hosts)."""
    ncol = len(labels[0])
    n = max(len(cells) for cells in frames)
    gutter = 16.0 + 10 * min(8, transfers)
    titles, subs = texts
    tl = max(len(wrap(t, WIDTH - 24, 16)) or 1 for t in titles)
    sl = max(len(wrap(t, WIDTH - 24, 12)) or 1 for t in subs)
    cells_fit = n <= DETAIL_RANKS and max(_cells_drawn(c) for c in frames) <= DETAIL_CELLS
    if cells_fit:
        every = [row for cells in frames for row in cells]
        every_labels = [[x for lab in labels for x in (lab[k] or [])] or None for k in range(ncol)]
        longest = [max((nothing[f][k] for f in range(len(nothing))), key=len) for k in range(ncol)]
        c, widths, bh, box_h = layout(every, every_labels, longest, cell, gutter)
        entries = [_entries(frames, k) for k in range(ncol)]
        col_w = [widths[k] * entries[k] + GAP * (entries[k] - 1) for k in range(ncol)]
        g = Geometry(False, c, widths, entries, entries, col_w, bh, box_h, LEFT + gutter, tl, sl, n=n)
        if g.body_w <= WIDTH:
            return g
    return _strips(frames, labels, nothing, gutter, tl, sl, host_lines)


def _strips(
    frames: list[list[list[Any]]],
    labels: list[list[list[str] | None]],
    nothing: list[list[str]],
    gutter: float,
    tl: int,
    sl: int,
    host_lines: int,
) -> Geometry:
    """The strips geometry: tensors as strips, lists folded onto lines of entries at least MIN_ENTRY wide."""
    ncol = len(labels[0])
    left = LEFT + gutter
    avail = WIDTH - left - RIGHT - COL_GAP * (ncol - 1)
    entries = [_entries(frames, k) for k in range(ncol)]
    listed = [any(isinstance(row[k], list) for cells in frames for row in cells) for k in range(ncol)]
    n_lists = sum(listed)
    tensor_w = min(TENSOR_MAX, max(TENSOR_MIN, avail / ncol if not n_lists else avail * 0.2))
    rest = avail - tensor_w * (ncol - n_lists)
    share = sum(e for e, is_list in zip(entries, listed) if is_list) or 1
    widths, per_line, col_w = [], [], []
    for k in range(ncol):
        if not listed[k]:
            widths.append(tensor_w)
            per_line.append(1)
            col_w.append(tensor_w)
            continue
        room = max(MIN_ENTRY, rest * entries[k] / share)
        fits = max(1, int((room + ENTRY_GAP) // (MIN_ENTRY + ENTRY_GAP)))
        per = min(entries[k], fits)
        per = math.ceil(entries[k] / math.ceil(entries[k] / per))  # lines evenly filled
        ew = min(MAX_ENTRY, (room + ENTRY_GAP) / per - ENTRY_GAP)
        widths.append(ew)
        per_line.append(per)
        col_w.append(per * (ew + ENTRY_GAP) - ENTRY_GAP)
    lines = max(math.ceil(e / p) for e, p in zip(entries, per_line))
    block = lines * LINE - (LINE - STRIP_H)
    said = [[len(wrap(nothing[f][k], col_w[k] - 6, MIN_FONT)) for k in range(ncol)] for f in range(len(nothing))]
    box_h = max(block, 11.0 * max(max(x) for x in said) + 4, 14.0 + 12 * host_lines)
    heights = [
        max(
            [14.0 + 12 * host_lines]
            + [_row_box(cells[r][k], per_line[k], said[f][k]) for f, cells in enumerate(frames) for k in range(ncol)]
        )
        for r in range(max(len(cells) for cells in frames))
    ]
    notes = [_note(labels, k, entries[k], col_w[k]) for k in range(ncol)]
    return Geometry(
        True, 0.0, widths, entries, per_line, col_w, block, box_h, left, tl, sl, notes, heights, len(heights)
    )


def _row_box(h: Any, per_line: int, said: int) -> float:
    """The height of one holding drawn as strips: its lines of entries, one line where it is the same as
    another rank's (``widgets/row_folding.py``), or a nothing-box's ``said`` lines of text."""
    if h is None:
        return 11.0 * said + 4
    lines = math.ceil(len(h) / per_line) if isinstance(h, list) else 1
    return max(1, lines) * LINE - (LINE - STRIP_H)


def _note(labels: list[list[list[str] | None]], k: int, entries: int, width: float) -> str:
    """What column ``k``'s entries are, in the strips drawing (their labels are not drawn one by one)."""
    named = next((lab[k] for lab in labels if lab[k]), None)
    if not named or entries < 2:
        return ""
    for note in (f"[0] {named[0]} … [{len(named) - 1}] {named[-1]}", f"{named[0]} …"):
        if text_width(note, MIN_FONT) <= width:
            return note
    return ""
