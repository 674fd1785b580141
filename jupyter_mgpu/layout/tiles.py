"""Pure block layout for the placement pictures: which tiles to draw and which ranks own each.

A tensor of any rank is drawn as a grid over two chosen dims (``dims``, default the first two; a 1-D
tensor is one row, a 0-D one a single tile). The grid lines are every boundary of every box that
some rank holds, so each tile lies entirely inside or outside each box: the tiles cover the drawn
plane exactly once and each tile's owners are the ranks whose box covers it. Dims that are not drawn
but are split by some box become small multiples (one panel per range). No torch, nothing drawn here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from jupyter_mgpu.layout import placement as pl

Box = tuple[tuple[int, int], ...]
MAX_PANELS = 64


def cuts(size: int, ranges: Iterable[tuple[int, int]]) -> list[int]:
    """Sorted boundaries ``0 = c0 < c1 < … = size`` from the ranges (empty ranges add nothing)."""
    out = {0, size}
    for a, b in ranges:
        if b > a:
            out.update((max(0, min(size, a)), max(0, min(size, b))))
    return sorted(out)


def check_dims(ndim: int, dims: Sequence[int] | None) -> tuple[int, ...]:
    """The drawn dims: two for ≥ 2-D tensors (default (0, 1)), one for 1-D, none for 0-D."""
    if ndim == 0:
        return ()
    if ndim == 1:
        if dims not in (None, (0,), [0], (0, 0)):
            raise ValueError(f"a 1-D tensor can only draw dim 0, got dims={dims!r}")
        return (0,)
    d = (0, 1) if dims is None else tuple(int(x) + (ndim if int(x) < 0 else 0) for x in dims)
    if len(d) != 2 or d[0] == d[1] or not all(0 <= x < ndim for x in d):
        raise ValueError(f"dims must be two different dims of this {ndim}-D tensor (0-{ndim - 1}), got {dims!r}")
    return d


def layout(
    shape: Sequence[int], owned: Sequence[tuple[int, Box]], dims: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Panels of tiles for ``owned`` = ``[(rank, box), ...]``; see the module docstring.

    Each panel: ``fixed`` (``[(dim, (a, b)), ...]`` for the dims not drawn), ``rows``/``cols`` (the
    grid cuts of the drawn dims; a 1-D tensor has rows ``[0, 1]``) and ``tiles`` (``rows``, ``cols``
    ranges and sorted ``owners``). A tile no rank holds has no owners.
    """
    shape = tuple(int(s) for s in shape)
    d = check_dims(len(shape), dims)
    others = [i for i in range(len(shape)) if i not in d]
    boxes = [(r, tuple((a, b) for a, b in box)) for r, box in owned if all(b > a for a, b in box)]
    other_cuts = [cuts(shape[i], (box[i] for _, box in boxes)) for i in others]
    groups = [list(zip(c, c[1:])) or [(0, 0)] for c in other_cuts]
    n_panels = math.prod(len(g) for g in groups)
    if n_panels > MAX_PANELS:
        raise ValueError(
            f"{n_panels} panels of small multiples is too many to draw; choose dims that are split (dims={d})"
        )
    rdim = d[0] if len(d) == 2 else None
    cdim = d[-1] if d else None
    rows = cuts(shape[rdim], (box[rdim] for _, box in boxes)) if rdim is not None else [0, 1]
    cols = cuts(shape[cdim], (box[cdim] for _, box in boxes)) if cdim is not None else [0, 1]
    panels: list[dict[str, Any]] = []
    for fixed in itertools.product(*groups):
        fixed_map = dict(zip(others, fixed))
        inside = [
            (r, box)
            for r, box in boxes
            if all(box[i][0] <= a and b <= box[i][1] for i, (a, b) in fixed_map.items() if b > a)
        ]
        tiles = []
        for (r0, r1), (c0, c1) in itertools.product(zip(rows, rows[1:]), zip(cols, cols[1:])):
            owners = sorted(
                {
                    r
                    for r, box in inside
                    if (rdim is None or (box[rdim][0] <= r0 and r1 <= box[rdim][1]))
                    and (cdim is None or (box[cdim][0] <= c0 and c1 <= box[cdim][1]))
                }
            )
            tiles.append({"rows": (r0, r1), "cols": (c0, c1), "owners": owners})
        panels.append({"fixed": list(fixed_map.items()), "rows": rows, "cols": cols, "tiles": tiles})
    return panels


def placement_layout(
    shape: Sequence[int], placement: pl.Placement, world_size: int, dims: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """:func:`layout` of a tensor in ``placement`` (every rank's box from :func:`placement.shard_table`)."""
    table = pl.shard_table(shape, placement, world_size)
    return layout(shape, [(s.rank, s.ranges) for s in table], dims)


def tile_cells(panel: dict[str, Any]) -> int:
    """Elements the panel's tiles cover (``rows × cols`` cells), for checks."""
    return sum((t["rows"][1] - t["rows"][0]) * (t["cols"][1] - t["cols"][0]) for t in panel["tiles"])
