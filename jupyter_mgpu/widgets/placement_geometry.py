"""Where the placement view and the trace player draw everything, for 1 to 64 ranks (pure, nothing drawn).

One set of rules for both pictures: ``placement_svg.py`` (the static SVG of exports) and
``static/placement.js`` (the live widget) read the same numbers, which the widget sends with its data
(``data["geo"]``), so the two cannot drift apart. The rules keep the picture legible at many ranks:
panels and the legend share :data:`LAYOUT_WIDTH` (a notebook cell; the SVG scales down, never up, when
the cell is narrower), every font is at least :data:`MIN_FONT` px, panels grow along a split dim until
each tile is :data:`MIN_TILE` px, room for its rank number with :data:`LABEL_PAD` px to spare on each
side (a lone panel of 64 column strips so grows to :data:`MAX_WIDTH`, which nothing exceeds; a label
is drawn only where it has that room, so none ever touches a tile's edge), and the rank legend wraps
into rows (8 roomy boxes, or 16 compact ones above 16 ranks; one group of rows per host when the ranks
carry hosts). What this adds to the data grows linearly with the ranks (one position per rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MAX_RANKS = 64  # the most ranks the view draws; above it, the text form (see :func:`check_world`)
LAYOUT_WIDTH = 760  # px: what the panels share and the legend fills: a notebook cell's width
MAX_WIDTH = 860  # px: no picture is wider (the collective view's limit too): only a lone panel of thin strips
MIN_FONT = 10  # px: the smallest text in the picture
CAPTION_FONT, LABEL_FONT = 13, 11
CAPTION_LINE = 17  # px between caption lines
MAX_CAPTION_LINES = 3
LABEL_PAD = 1.5  # px: at least this between a tile's label (MIN_FONT px high) and the tile's edges
MIN_TILE = MIN_FONT + 2 * LABEL_PAD  # px: a tile this high (or wide) has room for its rank number
PANEL = 200  # px: the longer side of a panel before it grows for thin tiles
PANEL_MAX_H = 840  # px: one panel's 64 row shards of MIN_TILE px each, and no more
PANELS_MAX_H = 420  # px: the same with several panels (a trace's tensors), which share one row
ROOMY, COMPACT = (78, 40), (42, 36)  # rank legend boxes: up to 16 ranks (8 a row), and more (16 a row)
GAP = 4  # px between legend boxes
ARROW_ROOM = 56  # px at most above the legend for the transfer arrows, only when some frame has arrows
ROW_ROOM = 24  # px between legend rows for the arrows within a row, likewise
MARGIN = 10


def check_world(world_size: int, what: str, instead: str) -> None:
    """Refuse a world size the pictures do not draw, in one sentence naming what to do ``instead``."""
    if not 1 <= world_size <= MAX_RANKS:
        raise ValueError(f"{what} draws 1 to {MAX_RANKS} ranks and this one has {world_size}; {instead}")


def text_width(text: str, size: float) -> float:
    """A generous estimate of ``text``'s width at font ``size`` in sans-serif (digits are 0.56 em)."""
    return len(text) * size * 0.6


def wrap(text: str, chars: int, lines: int = MAX_CAPTION_LINES) -> list[str]:
    """``text`` in at most ``lines`` lines of about ``chars`` characters, cut at spaces (the last ends in …
    when it does not fit). The same rule as ``wrap`` in ``static/placement.js``."""
    out: list[str] = []
    cur = ""
    for word in text.split(" "):
        if cur and len(cur) + 1 + len(word) > chars:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    out.append(cur)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: max(1, chars - 1)] + "…"
    return out


def tile_label(ranks: Sequence[int], world_size: int) -> str:
    """What a tile says: its holders (``0``, ``0,1``), ``all`` when every rank holds it, else how many."""
    if len(ranks) == world_size > 1:
        return "all"
    if len(ranks) <= 3:
        return ",".join(map(str, ranks))
    return f"{len(ranks)} ranks"


def label_fit(text: str, w: float, h: float) -> str:
    """How a tile's label fits a ``w × h`` tile: ``"h"`` across, ``"v"`` turned up, ``""`` not at all. A
    label is ``MIN_FONT`` px high and ``text_width`` long, centred, with ``LABEL_PAD`` px or more to each
    edge of its tile (2 px at its ends)."""
    need = text_width(text, MIN_FONT) + 4
    if w >= need and h >= MIN_TILE:
        return "h"
    if h >= need and w >= MIN_TILE:
        return "v"
    return ""


def label_runs(tiles: Sequence[Sequence[int]], owners: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """``(first, last)`` tile indices of each run of side-by-side tiles (one grid row, the same holders): a
    shard cut into many tiles by other blocks' edges is labelled once, across its whole width."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(tiles):
        if runs and i == runs[-1][1] + 1:
            p = tiles[i - 1]
            if (p[0], p[1], p[3]) == (t[0], t[1], t[2]) and list(owners[i - 1]) == list(owners[i]):
                runs[-1] = (runs[-1][0], i)
                continue
        runs.append((i, i))
    return runs


def _min_fraction(cuts: Sequence[int]) -> float:
    """The thinnest tile between ``cuts`` as a fraction of the whole (1 with one tile)."""
    gaps = [b - a for a, b in zip(cuts, cuts[1:]) if b > a]
    return min(gaps) / max(cuts[-1] - cuts[0], 1) if len(gaps) > 1 else 1.0


def _panel_size(p: dict[str, Any], side: float, max_w: float, max_h: float) -> tuple[float, float]:
    """A panel's ``(w, h)``: the tensor's aspect within 1:6, grown along a dim until its thinnest tile is
    ``MIN_TILE`` px (the other side grows by the square root of that, so the shape still reads)."""
    rows, cols = p["size"]
    ratio = min(6.0, max(1 / 6, (rows or 1) / (cols or 1)))
    h = side if ratio >= 1 else max(34.0, side * ratio)
    w = max(34.0, side / ratio) if ratio >= 1 else side
    need_h = min(max_h, MIN_TILE / _min_fraction(p.get("rows") or [0, 1]))
    need_w = min(max_w, MIN_TILE / _min_fraction(p.get("cols") or [0, 1]))
    gh, gw = max(1.0, need_h / h), max(1.0, need_w / w)
    return max(w, min(max_w, w * max(gw, math.sqrt(gh)))), max(h, min(max_h, h * max(gh, math.sqrt(gw))))


def _hosts(names: Sequence[str] | None, world_size: int) -> list[tuple[str, list[int]]]:
    """Consecutive ranks grouped by host (``node2`` of ``node2:cuda:1``); one unnamed group on one host."""
    if not names or len(names) != world_size:
        return [("", list(range(world_size)))]
    groups: list[tuple[str, list[int]]] = []
    for r, name in enumerate(names):
        host = str(name).split(":")[0]
        if not groups or groups[-1][0] != host:
            groups.append((host, []))
        groups[-1][1].append(r)
    return groups


def geometry(data: dict[str, Any]) -> dict[str, Any]:
    """Every position the pictures need for ``data`` (``placement_data``'s format); see the module docstring.

    ``width``/``height``; ``caption`` (first baseline, reserved lines, characters per line); ``panels``
    (``[x, y, w, h]`` each); ``titles`` (whether panel titles are drawn: only when they say something the
    caption does not); ``ranks`` (each rank's legend box, ``[x, y]``); ``box`` (its ``[w, h]``);
    ``compact`` (numbers only, above 16 ranks); ``groups`` (host headers ``[x, y, text]``); ``host`` (the
    notebook's box when the notebook sends or receives, else None); ``arrow_room`` and ``row_room`` (the
    px kept for arrows above the legend and above each further row: 0 when no frame has any).
    """
    world = int(data.get("world_size", 1))
    frames = data.get("frames") or []
    panels = data.get("panels") or []
    titles = any(p.get("title") for p in panels)
    n = len(panels)
    side = PANEL if n <= 3 else max(64.0, min(PANEL, (LAYOUT_WIDTH - MARGIN) / min(n, 8) - 24))
    # a lone panel may take MAX_WIDTH for room to label thin column strips; several share LAYOUT_WIDTH
    share = (
        MAX_WIDTH - 2 * MARGIN if n <= 1 else max(side, (LAYOUT_WIDTH - 2 * MARGIN - 24 * (min(n, 3) - 1)) / min(n, 3))
    )
    sizes = [_panel_size(p, side, share, PANEL_MAX_H if n <= 1 else PANELS_MAX_H) for p in panels]
    compact = world > 16
    bw, bh = COMPACT if compact else ROOMY
    per_row = 16 if compact else 8
    groups = _hosts(data.get("rank_names"), world)
    host_used = any(a[0] < 0 or a[1] < 0 for f in frames for a in f.get("arrows", []))
    first_x = MARGIN + (bw + GAP if host_used else 0)
    per_row = min(per_row, int((LAYOUT_WIDTH - MARGIN - first_x + GAP) // (bw + GAP)))
    legend_w = first_x + min(world, per_row) * (bw + GAP)
    # panels, left to right, wrapping into rows that fit the width
    pos: list[list[float]] = []
    x, y, row_h, right = float(MARGIN), 0.0, 0.0, 0.0
    title_h = 18.0 if titles else 0.0
    for w, h in sizes:
        if pos and x + w > LAYOUT_WIDTH - MARGIN:
            x, y, row_h = float(MARGIN), y + row_h + 16, 0.0
        pos.append([x, y + title_h, w, h])
        right = max(right, x + w)
        x += w + 24
        row_h = max(row_h, title_h + h)
    width = min(MAX_WIDTH, max(360.0, right + MARGIN, legend_w + MARGIN))
    chars = int((width - 2 * MARGIN) / (CAPTION_FONT * 0.58))
    lines = max([len(wrap(str(f.get("caption", "")), chars)) for f in frames] + [1])
    top = 8 + lines * CAPTION_LINE + 6
    for p in pos:
        p[1] += top
    # room for the arcs over the first row: half the lift of the longest one (placement.js draws them)
    span = (min(world, per_row) - 1 + (1 if host_used else 0)) * (bw + GAP)
    room = round(min(ARROW_ROOM, 8 + (14 + span / 6) / 2), 1) if any(f.get("arrows") for f in frames) else 0
    gap_y = GAP + (ROW_ROOM if room else 0)
    y_legend = round(top + y + row_h + 12 + room, 1)
    ranks: list[list[float]] = [[0.0, 0.0] for _ in range(world)]
    headers: list[list[Any]] = []
    yy = y_legend
    for host, members in groups:
        if host:
            headers.append([MARGIN, yy + 10, host])
            yy += 14
        for i, r in enumerate(members):
            ranks[r] = [first_x + (i % per_row) * (bw + GAP), yy + (i // per_row) * (bh + gap_y)]
        yy += math.ceil(len(members) / per_row) * (bh + gap_y)
    return {
        "width": round(width, 1),
        "height": round(yy + 4, 1),
        "caption": [8 + CAPTION_FONT, lines, chars],
        "panels": [[round(v, 1) for v in p] for p in pos],
        "titles": titles,
        "ranks": [[round(v, 1) for v in r] for r in ranks],
        "box": [bw, bh],
        "compact": compact,
        "groups": headers,
        "host": [MARGIN, y_legend] if host_used else None,
        "arrow_room": room,
        "row_room": gap_y - GAP,
    }


def with_geometry(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``geo`` (a new dict; an empty ``data``, a live player's before its first event, as is)."""
    if not data or not data.get("frames"):
        return data
    return {**data, "geo": geometry(data)}
