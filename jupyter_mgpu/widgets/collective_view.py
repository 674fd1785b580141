"""The before/after picture of a collective and the frames of its logical-schedule animation.

Hand-written SVG (no matplotlib, no kaleido): one row per rank, a "before" and an "after" column,
each holding coloured by *origin* — the rank whose data a value came from, stripes of several ranks'
colours where a reduction combined them, white for 0 (see :mod:`.collective_colors`). A few ranks'
tensors are drawn as grids of cells (small grids print the values, every cell of the before/after
figure says its value and origin on hover); many ranks' as strips split by origin with the rank
numbers printed (:mod:`.holding_strips`). List-valued holdings (all_gather's output, reduce_scatter's
input chunks, …) are drawn entry by entry; a rank that receives (or sends) nothing gets a dashed box
that says so. The figure is at most :data:`~.rank_grid.WIDTH` px wide.

The schedule player's frames are one :class:`~.rank_grid.Series`: the first frame, then only what each
step changed, so what a cell sends grows with the entries the schedule moves (N² for a ring on N
ranks), not with frames × ranks × entries.

This module says what each collective's picture holds; the drawing is :mod:`.rank_grid` (the figure),
:mod:`.grid_geometry` (where things go), :mod:`.slot_drawing`, :mod:`.tensor_cells` and
:mod:`.holding_strips` (one holding) and :mod:`.svg_canvas` (the SVG markup).
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.widgets.collective_colors import MAX_TRACKED_RANKS, attach, track
from jupyter_mgpu.widgets.grid_geometry import DETAIL_RANKS
from jupyter_mgpu.widgets.rank_grid import Series, draw_series, render_grid
from jupyter_mgpu.widgets.row_folding import fold_equal

REDUCING = ("reduce", "all_reduce", "reduce_scatter")  # the collectives that combine ranks' values


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


def _bits(name: str, n: int) -> list[range | None]:
    """The passes of ranks to track: one (every rank its own bit), or two for a reduction over more
    ranks than an OR of float64 masks keeps exactly."""
    if name in REDUCING and n > MAX_TRACKED_RANKS:
        return [range(MAX_TRACKED_RANKS), range(MAX_TRACKED_RANKS, n)]
    return [None]


def tracked_schedule(
    name: str, op: str | None, src: int | None, inputs: list[Any], bits: range | None = None
) -> list[sched.Frame]:
    """The logical schedule run on tracked inputs: every frame's values know which ranks they came from
    (the ranks in ``bits``; default every rank, or the first 52 of a reduction over more)."""
    if bits is None and name in REDUCING and len(inputs) > MAX_TRACKED_RANKS:
        bits = range(MAX_TRACKED_RANKS)
    return sched.schedule(name, [track(x, r, bits) for r, x in enumerate(inputs)], op or "sum", src or 0)


def tracked_passes(name: str, op: str | None, src: int | None, inputs: list[Any]) -> list[list[sched.Frame]]:
    """The tracked schedule: one pass, or two for a reduction over more than 52 ranks (the ranks past
    52 in the second); the figure and the player of one run share it."""
    return [tracked_schedule(name, op, src, inputs, bits) for bits in _bits(name, len(inputs))]


def before_after_svg(
    name: str,
    op: str | None,
    src: int | None,
    inputs: list[Any],
    after: list[Any],
    backend: str = "",
    seconds: float | None = None,
    passes: list[list[sched.Frame]] | None = None,
    fold: bool = True,
) -> str:
    """The before/after figure of one collective run: one row per rank, columns before and after.

    ``inputs`` are the ranks' input tensors, ``after`` what each rank held afterwards (captured on the
    ranks); the origin of every value comes from the logical schedule run on tracked inputs
    (``passes``, from :func:`tracked_passes`, when already run). ``fold``: past 8 ranks, a holding equal
    to the rank above's is one line (``widgets/row_folding.py``)."""
    n = len(inputs)
    title = name + (f" (op {op})" if op else "") + (f", root rank {src}" if src is not None else "")
    took = f", {seconds * 1e3:.2f} ms (slowest rank)" if seconds is not None else ""
    subtitle = f"{n} ranks{', ' + backend if backend else ''}{took} — real results captured on the ranks"
    grids = []
    for bits, frames in zip(_bits(name, n), passes or tracked_passes(name, op, src, inputs)):
        final = frames[-1].holdings
        before = [sched.before_entries(name, track(x, r, bits), r, src or 0, n) for r, x in enumerate(inputs)]
        grids.append([[before[r], attach(after[r], final[r])] for r in range(n)])
    if fold and n > DETAIL_RANKS and len(grids) == 1:  # strips: a rank holding what the rank above holds is one line
        columns = [fold_equal([row[k] for row in grids[0]]) for k in range(2)]
        grids = [[[columns[0][r], columns[1][r]] for r in range(n)]]
    bl, al = entry_labels(name, n)
    nb, na = nothing_text(name, src or 0)
    series = draw_series(
        [title], [subtitle], ["before", "after"], grids[:1], [[bl, al]], [[nb, na]], op, hover=True, high=grids[1:]
    )
    return series.frame(0)


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


def schedule_series(
    name: str, op: str | None, src: int | None, inputs: list[Any], passes: list[list[sched.Frame]] | None = None
) -> tuple[Series, list[str]]:
    """Every frame of the logical schedule on one geometry, as a first frame and the changes of each
    step (:class:`~.rank_grid.Series`), and the captions (``passes``: :func:`tracked_passes`, if run)."""
    passes = passes or tracked_passes(name, op, src, inputs)
    frames, n = passes[0], len(inputs)
    total = len(frames)
    titles = [f"{name}{f' (op {op})' if op else ''} — logical schedule, step {i}/{total - 1}" for i in range(total)]
    bl, al = entry_labels(name, n)
    _, na = nothing_text(name, src or 0)
    series = draw_series(
        titles,
        [f.caption for f in frames],
        ["holds"],
        [[[h] for h in f.holdings] for f in frames],
        [[al if (i > 0 and al) else bl] for i in range(total)],
        [[na if i else "nothing"] for i in range(total)],
        op,
        [f.transfers for f in frames],
        [f.highlight for f in frames],
        high=[[[h] for h in f.holdings] for f in passes[1]] if len(passes) > 1 else None,
    )
    return series, [f.caption for f in frames]


def schedule_frames(name: str, op: str | None, src: int | None, inputs: list[Any]) -> tuple[list[str], list[str]]:
    """Every frame of the logical schedule as a whole SVG (one geometry for all), and the captions."""
    series, captions = schedule_series(name, op, src, inputs)
    return [series.frame(i) for i in range(len(series))], captions
