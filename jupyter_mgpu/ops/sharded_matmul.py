"""Sharded matmul on the ranks: strategies row, col, inner, ring and summa (torch.distributed).

The controller (``jupyter_mgpu/tensors/sharded_matmul.py``) plans first, then calls :func:`run` on every
rank with handle ids. ``run`` redistributes inputs that are not in the strategy's layout, allocates
the output shard once, runs the strategy with ``torch.mm(out=)`` / in-place ``addmm_``, frees
temporaries at once and measures peak memory and time. Every strategy reports its steps through a
:class:`Steps` recorder (step index, action, block), the hook a trace recorder can use later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import matmul_trace
from jupyter_mgpu.ops.matmul_plan import RING_LOOKAHEAD, RING_SLOTS, required_placements, summa_panels


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
    return t.numel() * t.element_size()


# -- strategies: each fills the preallocated output shard ``c`` ---------------------------------
def row(a: Any, b: Any, c: Any, shapes: Any, params: dict, steps: Steps) -> None:
    """A S(0) x B replicated -> C S(0): one local mm, no communication."""
    import torch

    steps.add(0, "compute", a="A[r,:]", b="B")
    torch.mm(a, b, out=c)


def col(a: Any, b: Any, c: Any, shapes: Any, params: dict, steps: Steps) -> None:
    """A replicated x B S(1) -> C S(1): one local mm, no communication."""
    import torch

    steps.add(0, "compute", a="A", b="B[:,r]")
    torch.mm(a, b, out=c)


def inner(a: Any, b: Any, c: Any, shapes: Any, params: dict, steps: Steps) -> None:
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


def ring(a: Any, b: Any, c: Any, shapes: Any, params: dict, steps: Steps) -> None:
    """A S(0) x B S(0) -> C S(0): B's row blocks travel around the ring, in column chunks.

    Rank ``r`` starts with its own block; at step ``s`` it holds block ``j = (r - s) mod P`` and
    adds ``A[:, k_j] @ B_j[:, cols]`` into ``C[:, cols]``, forwarding the chunk to ``r + 1`` while
    receiving the next from ``r - 1``. Order: column chunk ``ci`` of every block, then ``ci + 1``,
    so a forwarded chunk is used by the next rank one item later. Chunks are column slices (each
    C element is updated P times with the full inner size of a block, not once per thin chunk);
    RING_SLOTS rotating chunk buffers bound the extra memory (receives are posted RING_LOOKAHEAD
    items ahead, so a rank may run ahead of its successor), and no rank ever holds all of B.
    """
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    r, p = st.rank, st.world_size
    (_, k), (_, n) = shapes
    if p == 1:
        steps.add(0, "compute", block=0)
        torch.mm(a, b, out=c)
        return
    kr = pl.split(k, p)
    nch = params["chunks"]
    cols = pl.split(n, nch)
    biggest = max(hi - lo for lo, hi in kr) * max(hi - lo for lo, hi in cols)
    pool = [torch.empty(biggest, dtype=c.dtype, device=c.device) for _ in range(RING_SLOTS)]
    items = [(s, (r - s) % p, ci) for ci in range(nch) for s in range(p)]
    nxt, prv = (r + 1) % p, (r - 1) % p
    sends: dict[int, Any] = {}
    recvs: dict[int, tuple[Any, Any]] = {}

    def chunk_buffer(i: int) -> Any:
        """Item ``i``'s slot, once the chunk that used it before is on its way."""
        old = sends.pop(i - RING_SLOTS, None)
        if old is not None:
            steps.add(i, "wait_send", item=i - RING_SLOTS)
            old.wait()
        _, j, ci = items[i]
        steps.add(i, "buffer", slot=i % RING_SLOTS)
        rows, width = kr[j][1] - kr[j][0], cols[ci][1] - cols[ci][0]
        return pool[i % RING_SLOTS][: rows * width].view(rows, width)  # noqa: F821  (bound below; deleted once the ring is done)

    def post_recv(i: int) -> None:
        if i >= len(items) or i in recvs or items[i][0] == 0:
            return
        buf = chunk_buffer(i)
        if buf.numel():
            recvs[i] = (dist.irecv(buf, prv), buf)

    for ahead in range(1, RING_LOOKAHEAD + 1):
        post_recv(ahead)
    for i, (s, j, ci) in enumerate(items):
        (k0, k1), (c0, c1) = kr[j], cols[ci]
        if s == 0:
            blk = chunk_buffer(i)
            blk.copy_(b[:, c0:c1])  # own block: pack the column chunk once (it is sent on)
        elif i in recvs:
            work, blk = recvs.pop(i)
            steps.add(i, "recv", block=j, chunk=ci, frm=prv)
            work.wait()
            steps.received += _nbytes(blk)
        else:
            blk = None  # an empty chunk: nothing was sent
        post_recv(i + RING_LOOKAHEAD)
        if blk is None or not blk.numel():
            if s == 0 and c1 > c0:
                c[:, c0:c1].zero_()  # K == 0 for this block: the first update is a zero
            continue
        if s < p - 1:
            steps.add(i, "send", block=j, chunk=ci, to=nxt)
            sends[i] = dist.isend(blk, nxt)
        steps.add(i, "compute", block=j, chunk=ci)
        c[:, c0:c1].addmm_(a[:, k0:k1], blk, beta=0 if s == 0 else 1)
    for w in sends.values():
        w.wait()
    del pool


_GROUPS: dict[Any, Any] = {}


def _grid_groups(rows: int, cols: int) -> tuple[Any, Any]:
    """This rank's row and column process groups of a ``rows × cols`` grid (made once, cached)."""
    import torch.distributed as dist

    st = rank_state.get()
    key = (rows, cols, st.pg_generation)  # not id() of the default group: a rebuilt group can reuse the address
    if key not in _GROUPS:
        r = st.rank
        mine = [None, None]
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


def summa(a: Any, b: Any, c: Any, shapes: Any, params: dict, steps: Steps) -> None:
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


STRATEGY_FUNCTIONS = {"row": row, "col": col, "inner": inner, "ring": ring, "summa": summa}


def _peak_probe() -> Callable[[], int]:
    """Reset the peak and return a function giving the growth of peak memory since then (bytes)."""
    st = rank_state.get()
    telemetry.reset_peak()
    if st.device_kind == "cuda":
        import torch

        base = torch.cuda.memory_allocated(st.device)
        return lambda: int(torch.cuda.max_memory_allocated(st.device) - base)
    from jupyter_mgpu.engine.shards import allocator_budget, budget

    if budget.mode() == "allocator":  # the budget's own count: tensor bytes, exact
        base = allocator_budget.allocated()
        return lambda: int(allocator_budget.peak() - base)
    base = telemetry._proc_status().get("VmRSS", 0)
    return lambda: int(telemetry._proc_status().get("VmHWM", 0) - base)


def run(
    strategy: str,
    a_id: str,
    a_pl: pl.Placement,
    b_id: str,
    b_pl: pl.Placement,
    c_id: str,
    shapes: tuple[tuple[int, int], tuple[int, int]],
    params: dict,
) -> dict[str, Any]:
    """Run ``strategy`` on this rank: store C as ``c_id``; returns measured peak, time, bytes, steps.

    ``peak_bytes`` = bytes of the input shards this rank held before the op + the growth of its
    peak memory during the op (the allocator's peak minus what was allocated before: torch's on GPU,
    the budget's count on CPU virtual devices; VmHWM minus RSS where that count is not kept).
    """
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    (m, k), (_, n) = shapes
    a, b = store.get(a_id), store.get(b_id)
    held = _nbytes(a) + _nbytes(b)
    need_a, need_b, c_pl = required_placements(strategy, st.world_size, params.get("grid"))
    dist.barrier()
    growth = _peak_probe()
    start = time.perf_counter()
    steps = Steps()
    tracer = matmul_trace.start(
        strategy, a_id, a_pl, b_id, b_pl, c_id, shapes, params, (need_a, need_b, c_pl), a.element_size()
    )  # None unless mg.trace() is on
    redistribution_steps = 0
    if pl.normalize(a_pl, 2, st.world_size) != need_a:
        a, got = rank_tensor.exchange(
            a, (m, k), a_pl, need_a, tracer.exchange_names("a") if tracer is not None else None, 1
        )
        steps.received += got
        redistribution_steps += st.world_size - 1
    if pl.normalize(b_pl, 2, st.world_size) != need_b:
        b, got = rank_tensor.exchange(
            b, (k, n), b_pl, need_b, tracer.exchange_names("b") if tracer is not None else None, st.world_size
        )
        steps.received += got
        redistribution_steps += st.world_size - 1
    me = pl.shard_table((m, n), c_pl, st.world_size)[st.rank]
    c = torch.empty(me.shape, dtype=a.dtype, device=a.device)
    if tracer is not None:
        tracer.allocated()
        Steps.hook = tracer.on_step
    try:
        STRATEGY_FUNCTIONS[strategy](a, b, c, shapes, params, steps)
    finally:
        if tracer is not None:
            Steps.hook = None
    del a, b
    if tracer is not None:
        tracer.finish(steps.count)
    if st.device_kind == "cuda":
        torch.cuda.synchronize(st.device)
    compute_done = time.perf_counter()
    dist.barrier()
    elapsed = time.perf_counter() - start
    peak = held + growth()
    store.put(c_id, c)
    store.trim()
    return {
        "peak_bytes": peak,
        "time": elapsed,
        "compute_time": compute_done - start,
        "bytes_moved": steps.received,
        "steps": steps.count + redistribution_steps,
        "held_bytes": held,
    }


def check_against(c_id: str, shapes: Any, c_pl: pl.Placement, a_seed: int, b_seed: int, dtype: str) -> float:
    """Max abs error of this rank's C shard against ``torch.mm`` of the same seeded global inputs.

    Each rank rebuilds only the rows/cols of A and B its C block needs (counter-based seeding) and
    compares in blocks of 256 rows, so the check fits wherever C fits.
    """
    import torch

    from jupyter_mgpu.engine.shards import seeding

    st = rank_state.get()
    (m, k), (_, n) = shapes
    me = pl.shard_table((m, n), c_pl, st.world_size)[st.rank]
    (r0, r1), (c0, c1) = me.ranges
    c = store.get(c_id)
    dt = rank_tensor.dtype_of(dtype)
    calc = torch.float64 if dt == torch.float64 else torch.float32
    a = seeding.fill(torch.empty((r1 - r0, k), dtype=dt, device=c.device), "randn", (m, k), ((r0, r1), (0, k)), a_seed)
    b = seeding.fill(torch.empty((k, c1 - c0), dtype=dt, device=c.device), "randn", (k, n), ((0, k), (c0, c1)), b_seed)
    b = b.to(calc)
    worst = 0.0
    for lo in range(0, c.shape[0], 256):  # row blocks: the check never needs a second copy of C
        ref = torch.mm(a[lo : lo + 256].to(calc), b)
        worst = max(worst, float((c[lo : lo + 256].to(calc) - ref).abs().max()) if ref.numel() else 0.0)
    return worst
