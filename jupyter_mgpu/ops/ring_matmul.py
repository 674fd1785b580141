"""The ring matmul strategy on the ranks: A S(0) x B S(0) -> C S(0), B's row blocks passed around the ring.

B travels in column chunks through RING_SLOTS rotating buffers (``ops/matmul_chunks.py`` sizes them as
the planner predicted), so no rank ever holds all of B. :class:`_RingChunks` owns the buffers, the sends
in flight and the receives posted ahead; :func:`ring` walks the chunks. Called by
``ops/sharded_matmul.py``'s ``run``.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops.matmul_chunks import RING_LOOKAHEAD, RING_SLOTS
from jupyter_mgpu.ops.matmul_strategies import Steps, _nbytes


class _RingChunks:
    """One ring's chunk buffers: RING_SLOTS rotating slots, the sends in flight, the receives posted ahead.

    Item ``i`` of :attr:`items` is ``(s, j, ci)``: at step ``s`` this rank holds column chunk ``ci``
    of B's row block ``j``.
    """

    def __init__(self, c: Any, kr: list[pl.Range], cols: list[pl.Range], r: int, p: int, steps: Steps) -> None:
        import torch

        self.kr, self.cols, self.steps = kr, cols, steps
        biggest = max(hi - lo for lo, hi in kr) * max(hi - lo for lo, hi in cols)
        self.pool = [torch.empty(biggest, dtype=c.dtype, device=c.device) for _ in range(RING_SLOTS)]
        self.items = [(s, (r - s) % p, ci) for ci in range(len(cols)) for s in range(p)]
        self.nxt, self.prv = (r + 1) % p, (r - 1) % p
        self.sends: dict[int, Any] = {}
        self.recvs: dict[int, tuple[Any, Any]] = {}

    def buffer(self, i: int) -> Any:
        """Item ``i``'s slot, once the chunk that used it before is on its way."""
        old = self.sends.pop(i - RING_SLOTS, None)
        if old is not None:
            self.steps.add(i, "wait_send", item=i - RING_SLOTS)
            old.wait()
        _, j, ci = self.items[i]
        self.steps.add(i, "buffer", slot=i % RING_SLOTS)
        rows, width = self.kr[j][1] - self.kr[j][0], self.cols[ci][1] - self.cols[ci][0]
        return self.pool[i % RING_SLOTS][: rows * width].view(rows, width)

    def post_recv(self, i: int) -> None:
        import torch.distributed as dist

        if i >= len(self.items) or i in self.recvs or self.items[i][0] == 0:
            return
        buf = self.buffer(i)
        if buf.numel():
            self.recvs[i] = (dist.irecv(buf, self.prv), buf)

    def chunk(self, i: int, b: Any) -> Any:
        """Item ``i``'s chunk of B: this rank's own, packed once (it is sent on), a received one, or None."""
        s, j, ci = self.items[i]
        if s == 0:
            blk = self.buffer(i)
            blk.copy_(b[:, self.cols[ci][0] : self.cols[ci][1]])  # own block: pack the column chunk once
            return blk
        if i in self.recvs:
            work, blk = self.recvs.pop(i)
            self.steps.add(i, "recv", block=j, chunk=ci, frm=self.prv)
            work.wait()
            self.steps.received += _nbytes(blk)
            return blk
        return None  # an empty chunk: nothing was sent


def ring(a: Any, b: Any, c: Any, shapes: Any, params: dict[str, Any], steps: Steps) -> None:
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
    chunks = _RingChunks(c, kr, cols, r, p, steps)
    for ahead in range(1, RING_LOOKAHEAD + 1):
        chunks.post_recv(ahead)
    for i, (s, j, ci) in enumerate(chunks.items):
        (k0, k1), (c0, c1) = kr[j], cols[ci]
        blk = chunks.chunk(i, b)
        chunks.post_recv(i + RING_LOOKAHEAD)
        if blk is None or not blk.numel():
            if s == 0 and c1 > c0:
                c[:, c0:c1].zero_()  # K == 0 for this block: the first update is a zero
            continue
        if s < p - 1:
            steps.add(i, "send", block=j, chunk=ci, to=chunks.nxt)
            chunks.sends[i] = dist.isend(blk, chunks.nxt)
        steps.add(i, "compute", block=j, chunk=ci)
        c[:, c0:c1].addmm_(a[:, k0:k1], blk, beta=0 if s == 0 else 1)
    for w in chunks.sends.values():
        w.wait()
    del chunks
