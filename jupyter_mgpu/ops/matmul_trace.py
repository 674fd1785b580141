"""Trace events of a sharded matmul on one rank: the strategy's steps turned into blocks of A, B and C.

``ops/sharded_matmul.py`` reports each step through ``Steps.hook(step, action, **info)`` (block index,
chunk, panel, peer); :class:`MatmulTracer` knows the shapes, placements and parameters, so it turns
those into global index boxes: which block of B a ring rank receives from whom, which panel of A a
SUMMA rank gets along its grid row, which C block a compute step writes. Temporary copies (ring
chunk slots, SUMMA panel buffers, inner's partial sums, inputs redistributed into the strategy's
layout) are blocks with a buffer tag, held from the step they are filled to the step they are
reused or freed, so the replay's memory per rank follows the op's real buffers.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops.matmul_chunks import RING_SLOTS, summa_panels


def _nb(box: Any, item: int) -> int:
    return pl.box_numel(box) * item


class MatmulTracer:
    """Records one matmul on this rank (made only when tracing is on)."""

    orig_pl: dict[str, pl.Placement]  # where A and B were before the matmul; start() sets it

    def __init__(
        self,
        strategy: str,
        a_id: str,
        a_pl: pl.Placement,
        b_id: str,
        b_pl: pl.Placement,
        c_id: str,
        shapes: Any,
        params: dict[str, Any],
        need: tuple[Any, ...],
        itemsize: int,
    ):
        st = rank_state.get()
        self.r, self.p = st.rank, st.world_size
        self.strategy, self.params, self.item = strategy, params, itemsize
        (self.m, self.k), (_, self.n) = shapes
        self.need_a, self.need_b, self.c_pl = need
        self.c_id = c_id
        self.base = 2 * self.p  # strategy steps come after the redistribution steps
        etrace.begin_op(f"matmul:{strategy}")
        etrace.declare(a_id, (self.m, self.k), itemsize, "A")
        etrace.declare(b_id, (self.k, self.n), itemsize, "B")
        etrace.declare(c_id, (self.m, self.n), itemsize, "C")
        a_box = pl.shard_table((self.m, self.k), a_pl, self.p)[self.r].ranges
        b_box = pl.shard_table((self.k, self.n), b_pl, self.p)[self.r].ranges
        etrace.record(
            0,
            "hold",
            [etrace.block(a_id, a_box), etrace.block(b_id, b_box)],
            _nb(a_box, itemsize) + _nb(b_box, itemsize),
        )
        self.a_name, self.b_name = a_id, b_id
        self.copies: list[tuple[Any, ...]] = []
        self.slots: dict[Any, tuple[Any, ...]] = {}
        if pl.normalize(a_pl, 2, self.p) != self.need_a:
            self.a_name = self._copy(a_id, (self.m, self.k), self.need_a, "A")
        if pl.normalize(b_pl, 2, self.p) != self.need_b:
            self.b_name = self._copy(b_id, (self.k, self.n), self.need_b, "B")
        self.a_box = pl.shard_table((self.m, self.k), self.need_a, self.p)[self.r].ranges
        self.b_box = pl.shard_table((self.k, self.n), self.need_b, self.p)[self.r].ranges
        self.c_box = pl.shard_table((self.m, self.n), self.c_pl, self.p)[self.r].ranges

    def _copy(self, src: str, shape: tuple[Any, ...], target: pl.Placement, what: str) -> str:
        name = f"{src}@{target.label}"
        etrace.declare(name, shape, self.item, f"{what} as {target.label} (copy)")
        self.copies.append((name, shape, target))
        return name

    def exchange_names(self, which: str) -> tuple[str, str] | None:
        """Names for ``shards.exchange`` of input ``which`` ("a"/"b"), or None if it is not redistributed."""
        src, dst = (self.a_id_orig, self.a_name) if which == "a" else (self.b_id_orig, self.b_name)
        return None if src == dst else (src, dst)

    @property
    def a_id_orig(self) -> str:
        return self.a_name.split("@")[0]

    @property
    def b_id_orig(self) -> str:
        return self.b_name.split("@")[0]

    def allocated(self) -> None:
        """The output shard was allocated (empty) on this rank."""
        etrace.record(self.base - 1, "hold", [etrace.block(self.c_id, self.c_box)], _nb(self.c_box, self.item))

    # -- temporaries --------------------------------------------------------------------------
    def _fill(self, step: int, slot: Any, blk: tuple[Any, ...], action: str = "hold", peer: int | None = None) -> None:
        old = self.slots.pop(slot, None)
        if old is not None:
            etrace.record(step, "free", [old], _nb(old[1], self.item))
        self.slots[slot] = blk
        etrace.record(step, action, [blk], _nb(blk[1], self.item), peer)

    def on_step(self, step: int, action: str, **info: Any) -> None:
        """``Steps.hook``: one step of the strategy."""
        s = self.base + step
        getattr(self, f"_{self.strategy}", self._simple)(s, step, action, info)

    def _simple(self, s: int, step: int, action: str, info: dict[str, Any]) -> None:
        if action == "compute":
            etrace.record(
                s,
                "compute",
                [
                    etrace.block(self.a_name, self.a_box),
                    etrace.block(self.b_name, self.b_box),
                    etrace.block(self.c_id, self.c_box),
                ],
                2 * pl.box_numel(self.c_box) * self.k,
            )

    def _inner(self, s: int, step: int, action: str, info: dict[str, Any]) -> None:
        if self.p == 1:
            return self._simple(s, step, action, info)
        d = info["block"]
        rows = pl.split(self.m, self.p)[d]
        target = (
            etrace.block(self.c_id, (rows, (0, self.n)))
            if d == self.r
            else etrace.block(f"{self.c_id}~partial", (rows, (0, self.n)), f"partial{d % 2}")
        )
        if action == "compute":
            if d != self.r:
                etrace.declare(f"{self.c_id}~partial", (self.m, self.n), self.item, "C partial sums")
                self._fill(s, d % 2, target)
            a_part = etrace.block(self.a_name, (rows, self.a_box[1]))
            etrace.record(
                s,
                "compute",
                [a_part, etrace.block(self.b_name, self.b_box), target],
                2 * pl.box_numel(target[1]) * (self.a_box[1][1] - self.a_box[1][0]),
            )
        elif action == "reduce":
            if d != self.r:
                etrace.record(s, "reduce", [target], _nb(target[1], self.item), d)
            else:
                etrace.record(s, "compute", [target], (self.p - 1) * _nb(target[1], self.item), reduce_from="all")

    def _ring(self, s: int, step: int, action: str, info: dict[str, Any]) -> None:
        if self.p == 1:
            return self._simple(s, step, action, info)
        kr, cols = pl.split(self.k, self.p), pl.split(self.n, self.params["chunks"])
        items = [(q, (self.r - q) % self.p, ci) for ci in range(self.params["chunks"]) for q in range(self.p)]
        slot = step % RING_SLOTS
        if action == "buffer":
            q, j, ci = items[step]
            if q == 0:  # own block: its column chunk is packed into the slot
                self._fill(s, slot, etrace.block(self.b_name, (kr[j], cols[ci]), f"slot{slot}"))
            else:
                old = self.slots.pop(slot, None)
                if old is not None:
                    etrace.record(s, "free", [old], _nb(old[1], self.item))
        elif action == "recv":
            blk = etrace.block(self.b_name, (kr[info["block"]], cols[info["chunk"]]), f"slot{slot}")
            self._fill(s, slot, blk, "recv", info["frm"])
        elif action == "send":
            blk = etrace.block(self.b_name, (kr[info["block"]], cols[info["chunk"]]), f"slot{slot}")
            etrace.record(s, "send", [blk], _nb(blk[1], self.item), info["to"])
        elif action == "compute":
            j, ci = info["block"], info["chunk"]
            etrace.record(
                s,
                "compute",
                [
                    etrace.block(self.a_name, (self.a_box[0], kr[j])),
                    etrace.block(self.b_name, (kr[j], cols[ci]), f"slot{slot}"),
                    etrace.block(self.c_id, (self.c_box[0], cols[ci])),
                ],
                2 * (self.c_box[0][1] - self.c_box[0][0]) * (kr[j][1] - kr[j][0]) * (cols[ci][1] - cols[ci][0]),
            )

    def _summa(self, s: int, step: int, action: str, info: dict[str, Any]) -> None:
        rows, cols = self.params["grid"]
        if rows * cols == 1:
            return self._simple(s, step, action, info)
        gi, gj = divmod(self.r, cols)
        t = info["panel"]
        lo, hi = summa_panels(self.k, (rows, cols), self.params["panel"])[t]
        ap = etrace.block(self.a_name, (self.c_box[0], (lo, hi)), f"apanel{t % 2}")
        bp = etrace.block(self.b_name, ((lo, hi), self.c_box[1]), f"bpanel{t % 2}")
        if action == "broadcast":
            a_owner = info["a_from"][0] * cols + info["a_from"][1]
            b_owner = info["b_from"][0] * cols + info["b_from"][1]
            if a_owner == self.r:
                self._fill(s, ("a", t % 2), ap)
                for j in range(cols):
                    if gi * cols + j != self.r:
                        etrace.record(s, "send", [ap], _nb(ap[1], self.item), gi * cols + j)
            else:
                self._fill(s, ("a", t % 2), ap, "recv", a_owner)
            if b_owner == self.r:
                self._fill(s, ("b", t % 2), bp)
                for i in range(rows):
                    if i * cols + gj != self.r:
                        etrace.record(s, "send", [bp], _nb(bp[1], self.item), i * cols + gj)
            else:
                self._fill(s, ("b", t % 2), bp, "recv", b_owner)
        elif action == "compute":
            etrace.record(
                s, "compute", [ap, bp, etrace.block(self.c_id, self.c_box)], 2 * pl.box_numel(self.c_box) * (hi - lo)
            )

    def finish(self, step: int) -> None:
        """The op ended: temporaries and redistributed copies are freed; C stays."""
        s = self.base + step + 1
        for blk in self.slots.values():
            etrace.record(s, "free", [blk], _nb(blk[1], self.item))
        self.slots.clear()
        for name, shape, target in self.copies:
            box = pl.shard_table(shape, target, self.p)[self.r].ranges
            mv = pl.moves(shape, self._orig_pl(name), target, self.p)
            pieces = [b for q in range(self.p) if (b := mv[q][self.r]) is not None]
            etrace.record(s, "free", [etrace.block(name, b) for b in pieces], _nb(box, self.item))
        etrace.end_op()

    def _orig_pl(self, name: str) -> pl.Placement:
        return self.orig_pl[name]


def start(
    strategy: str,
    a_id: str,
    a_pl: pl.Placement,
    b_id: str,
    b_pl: pl.Placement,
    c_id: str,
    shapes: Any,
    params: dict[str, Any],
    need: tuple[Any, ...],
    itemsize: int,
) -> MatmulTracer | None:
    """A tracer for this matmul when tracing is on, else None (nothing else is done)."""
    if not etrace.active():
        return None
    tr = MatmulTracer(strategy, a_id, a_pl, b_id, b_pl, c_id, shapes, params, need, itemsize)
    tr.orig_pl = {
        f"{a_id}@{need[0].label}": pl.normalize(a_pl, 2, tr.p),
        f"{b_id}@{need[1].label}": pl.normalize(b_pl, 2, tr.p),
    }
    return tr
