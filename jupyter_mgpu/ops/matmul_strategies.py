"""The simple matmul strategies on the ranks (row, col, inner) and the :class:`Steps` recorder of them all.

Each strategy fills the output shard ``c`` that ``ops/sharded_matmul.py``'s ``run`` preallocated, from
inputs already in the strategy's layout. The two that move B or panels around in pieces live apart:
``ops/ring_matmul.py`` and ``ops/summa_matmul.py``. Every strategy reports its steps through a
:class:`Steps` recorder (step index, action, block), the hook the trace recorder uses
(``ops/matmul_trace.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.layout import placement as pl


class Steps:
    """Counts a strategy's steps; ``hook(step, action, **block)`` (if set) sees each one."""

    hook: Callable[..., None] | None = None

    def __init__(self) -> None:
        self.count = 0
        self.received = 0

    def add(self, step: int, action: str, **block: Any) -> None:
        self.count = max(self.count, step + 1)
        if Steps.hook is not None:
            Steps.hook(step, action, **block)


def _nbytes(t: Any) -> int:
    return int(t.numel() * t.element_size())


# -- strategies: each fills the preallocated output shard ``c`` ---------------------------------
def row(a: Any, b: Any, c: Any, shapes: Any, params: dict[str, Any], steps: Steps) -> None:
    """A S(0) x B replicated -> C S(0): one local mm, no communication."""
    import torch

    steps.add(0, "compute", a="A[r,:]", b="B")
    torch.mm(a, b, out=c)


def col(a: Any, b: Any, c: Any, shapes: Any, params: dict[str, Any], steps: Steps) -> None:
    """A replicated x B S(1) -> C S(1): one local mm, no communication."""
    import torch

    steps.add(0, "compute", a="A", b="B[:,r]")
    torch.mm(a, b, out=c)


def inner(a: Any, b: Any, c: Any, shapes: Any, params: dict[str, Any], steps: Steps) -> None:
    """A S(1) x B S(0) -> C S(0): partial products of each C row block, reduced onto its owner.

    For destination ``d`` every rank computes ``A[rows_d, k_r] @ B[k_r, :]`` and a reduce sums
    them on ``d`` (into ``c`` itself when ``d`` is this rank). The reduce of block ``d`` runs while
    block ``d+1`` is computed; two block buffers alternate.
    """
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    r, p = st.rank, st.world_size
    (m, _), (_, n) = shapes
    rows = pl.split(m, p)
    if p == 1:
        steps.add(0, "compute", block=0)
        torch.mm(a, b, out=c)
        return
    biggest = max(hi - lo for lo, hi in rows)
    bufs = [torch.empty((biggest, n), dtype=c.dtype, device=c.device) for _ in range(2)]
    pending = None
    for d, (lo, hi) in enumerate(rows):
        target = c if d == r else bufs[d % 2][: hi - lo]
        steps.add(d, "compute", block=d)
        torch.mm(a[lo:hi], b, out=target)
        if pending is not None:
            pending.wait()
        steps.add(d, "reduce", block=d, to=d)
        pending = dist.reduce(target, d, async_op=True) if target.numel() else None
        if d == r:
            steps.received += (p - 1) * _nbytes(target)
    if pending is not None:
        pending.wait()
    del bufs
