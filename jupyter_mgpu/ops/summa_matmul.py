"""The SUMMA matmul strategy on the ranks: A, B and C in ``Block2D(rows, cols)``, panels broadcast along the grid.

For each k-panel the owner of that A column panel broadcasts it along its grid row and the owner of the
B row panel along its grid column, over row and column process groups made once per grid and process
group generation. Panel widths come from ``ops/matmul_chunks.py``, as the planner predicted them.
Called by ``ops/sharded_matmul.py``'s ``run``.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops.matmul_chunks import summa_panels
from jupyter_mgpu.ops.matmul_strategies import Steps, _nbytes

_GROUPS: dict[tuple[int, int, int], tuple[Any, Any]] = {}  # (rows, cols, generation) -> row, column group


def _grid_groups(rows: int, cols: int) -> tuple[Any, Any]:
    """This rank's row and column process groups of a ``rows × cols`` grid (made once, cached)."""
    import torch.distributed as dist

    st = rank_state.get()
    key = (rows, cols, st.pg_generation)  # not id() of the default group: a rebuilt group can reuse the address
    if key not in _GROUPS:
        r = st.rank
        mine: list[Any] = [None, None]
        # A rank waiting inside new_group waits on the store, where the stop button's release cannot reach
        # it: so every rank first meets in a barrier (a collective the release does end), and the stop is
        # held until all groups exist on every rank that got past it.
        with deferred_interrupt():
            dist.barrier()
            for i in range(rows):  # every rank creates every group, in the same order
                g = dist.new_group([i * cols + j for j in range(cols)])
                if r // cols == i:
                    mine[0] = g
            for j in range(cols):
                g = dist.new_group([i * cols + j for i in range(rows)])
                if r % cols == j:
                    mine[1] = g
            _GROUPS.clear()
            _GROUPS[key] = tuple(mine)
    return _GROUPS[key]


def summa(a: Any, b: Any, c: Any, shapes: Any, params: dict[str, Any], steps: Steps) -> None:
    """A, B, C in Block2D(rows, cols): SUMMA panel broadcasts along grid rows and columns.

    For each k-panel the owner of that A column panel broadcasts it along its grid row and the
    owner of the B row panel along its grid column; every rank adds ``A_panel @ B_panel`` into
    its C block. Panel ``t + 1`` is broadcast while panel ``t`` is multiplied (two buffers each).
    """
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    r = st.rank
    (_, k), _ = shapes
    rows, cols = params["grid"]
    if rows * cols == 1:
        steps.add(0, "compute", panel=0)
        torch.mm(a, b, out=c)
        return
    gi, gj = divmod(r, cols)
    kc, kr = pl.split(k, cols), pl.split(k, rows)
    panels = summa_panels(k, (rows, cols), params["panel"])
    row_group, col_group = _grid_groups(rows, cols) if rows * cols > 1 else (None, None)
    width = max((hi - lo for lo, hi in panels), default=0)
    # flat buffers, viewed per panel, so a narrower last panel is still one contiguous block
    abuf = [torch.empty(c.shape[0] * width, dtype=c.dtype, device=c.device) for _ in range(2)]
    bbuf = [torch.empty(width * c.shape[1], dtype=c.dtype, device=c.device) for _ in range(2)]

    def post(t: int) -> tuple[Any, Any, list[Any]]:
        lo, hi = panels[t]
        w = hi - lo
        a_owner = next(j for j, (x, y) in enumerate(kc) if x <= lo < y)
        b_owner = next(i for i, (x, y) in enumerate(kr) if x <= lo < y)
        ap = abuf[t % 2][: c.shape[0] * w].view(c.shape[0], w)  # noqa: F821  (bound above; deleted once the panels are done)
        bp = bbuf[t % 2][: w * c.shape[1]].view(w, c.shape[1])  # noqa: F821
        works = []
        if a_owner == gj:
            ap.copy_(a[:, lo - kc[gj][0] : hi - kc[gj][0]])
        else:
            steps.received += _nbytes(ap)
        if b_owner == gi:
            bp.copy_(b[lo - kr[gi][0] : hi - kr[gi][0]])
        else:
            steps.received += _nbytes(bp)
        steps.add(t, "broadcast", panel=t, a_from=(gi, a_owner), b_from=(b_owner, gj))
        if cols > 1 and ap.numel():
            works.append(dist.broadcast(ap, gi * cols + a_owner, group=row_group, async_op=True))
        if rows > 1 and bp.numel():
            works.append(dist.broadcast(bp, b_owner * cols + gj, group=col_group, async_op=True))
        return ap, bp, works

    c.zero_()
    nxt = post(0) if panels else None
    for t in range(len(panels)):
        assert nxt is not None  # post(t) ran for this panel
        ap, bp, works = nxt
        for w in works:
            w.wait()
        nxt = post(t + 1) if t + 1 < len(panels) else None
        steps.add(t, "compute", panel=t)
        c.addmm_(ap, bp)
    del abuf, bbuf
