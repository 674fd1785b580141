"""The before/after picture of a collective and the frames of its logical-schedule animation.

Hand-written SVG (no matplotlib, no kaleido): one row per rank, a "before" and an "after" column,
each tensor drawn as a grid of cells coloured by *origin* — the rank whose data a value came from,
stripes of several ranks' colours where a reduction combined them, white for 0 (see
:mod:`.collective_colors`); small grids print the values, every cell of the before/after figure says
its value and origin on hover. List-valued holdings (all_gather's output, reduce_scatter's input
chunks, …) are drawn entry by entry; a rank that receives (or sends) nothing gets a dashed box that
says so. The figure is at most :data:`~.rank_grid.WIDTH` px wide and scales down with the cell.

This module says what each collective's picture holds; the drawing is :mod:`.rank_grid` (the figure),
:mod:`.tensor_cells` (one holding) and :mod:`.svg_canvas` (the SVG markup).
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.widgets.collective_colors import attach, track
from jupyter_mgpu.widgets.rank_grid import layout, render_grid


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
    cell, _, _, _ = layout(every, [al or bl], ["nothing"], None)
    svgs = [frame_svg(name, op, src, f, i, len(frames), n, cell) for i, f in enumerate(frames)]
    return svgs, [f.caption for f in frames]
