"""Redistribution on the ranks: each rank's piece of a tensor in a new placement, from the pieces the ranks hold.

Every rank reads the same pure shard tables (``layout.placement``), so each pair of ranks exchanges
exactly the overlap of their boxes with no size messages, in P-1 steps of one send and one receive.
Used by ``DistTensor.redistribute`` (:func:`redistribute`), by the matmul strategies' input layouts
(``ops/sharded_matmul.py``) and by DTensors made from our shards (``ops/dtensor_handle.py``).
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops.dist_tensor import _me, _nbytes


def _sub(box: tuple[pl.Range, ...], origin: tuple[pl.Range, ...]) -> tuple[slice, ...]:
    """Slices selecting global ``box`` inside a local tensor that covers ``origin``."""
    return tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(box, origin))


def exchange(
    local: Any,
    shape: tuple[int, ...],
    src_pl: pl.Placement,
    dst_pl: pl.Placement,
    names: tuple[str, str] | None = None,
    step0: int = 0,
) -> tuple[Any, int]:
    """This rank's piece of the global tensor in ``dst_pl``, built from its piece in ``src_pl``
    (:func:`exchange_boxes` between the two shard tables)."""
    p = rank_state.get().world_size
    src = [s.ranges for s in pl.shard_table(shape, src_pl, p)]
    dst = [s.ranges for s in pl.shard_table(shape, dst_pl, p)]
    replicated = isinstance(pl.normalize(src_pl, len(shape), p), pl.Replicate)
    return exchange_boxes(local, src, dst, replicated, names, step0)


def exchange_boxes(
    local: Any,
    src: list[tuple[pl.Range, ...]],
    dst: list[tuple[pl.Range, ...]],
    src_replicated: bool = False,
    names: tuple[str, str] | None = None,
    step0: int = 0,
) -> tuple[Any, int]:
    """This rank's piece ``dst[rank]`` of a global tensor, built from the pieces ``src[r]`` the ranks hold.

    Step ``d`` (1..P-1) sends to rank ``r+d`` and receives from ``r-d``: every pair exchanges
    exactly the overlap of its boxes, read from the pure tables on both sides (no size
    messages). Returns ``(tensor, bytes received)``. With ``names`` (source and result tensor names)
    and tracing on, each piece kept, sent and received is recorded (steps ``step0 + d``).
    """
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    tracing = names is not None and etrace.active()
    r, p = st.rank, st.world_size
    mv = pl.moves_between(src, dst, src_replicated)
    s_box, d_box = src[r], dst[r]
    out = torch.empty(tuple(b - a for a, b in d_box), dtype=local.dtype, device=local.device)
    if (kept := mv[r][r]) is not None:
        out[_sub(kept, d_box)].copy_(local[_sub(kept, s_box)])
        if tracing:
            assert names is not None  # tracing is on only with names
            etrace.record(step0, "hold", [etrace.block(names[1], kept)], pl.box_numel(kept) * local.element_size())
    received = 0
    for d in range(1, p):
        to, frm = (r + d) % p, (r - d) % p
        work = None
        if (sent := mv[r][to]) is not None:
            piece = local[_sub(sent, s_box)].contiguous()
            if tracing:
                assert names is not None
                etrace.record(step0 + d, "send", [etrace.block(names[0], sent)], _nbytes(piece), to)
            work = dist.isend(piece, to)
        if (got := mv[frm][r]) is not None:
            target = out[_sub(got, d_box)]
            buf = target if target.is_contiguous() else torch.empty(target.shape, dtype=out.dtype, device=out.device)
            receiving = dist.irecv(buf, frm)
            assert receiving is not None  # None only for a rank outside the group
            receiving.wait()
            if buf is not target:
                target.copy_(buf)
            received += buf.numel() * buf.element_size()
            if tracing:
                assert names is not None
                etrace.record(step0 + d, "recv", [etrace.block(names[1], got)], _nbytes(buf), frm)
            del buf, target
        if work is not None:
            work.wait()
            # the copy freed before the next step's (the planner counts one) and before the caller allocates
            # more: the send's work holds it too, and a frame kept past the return would keep the work
            del work, piece
    return out, received


def redistribute(src: str, dst: str, shape: tuple[int, ...], src_pl: pl.Placement, dst_pl: pl.Placement) -> int:
    """Store shard ``dst`` (placement ``dst_pl``) made from shard ``src``; returns bytes received."""
    local = store.get(src)
    tracing = etrace.active()
    if tracing:
        etrace.begin_op("redistribute")
        etrace.declare(src, shape, local.element_size(), f"before: {src_pl.label}")
        etrace.declare(dst, shape, local.element_size(), f"after: {dst_pl.label}")
        etrace.record(0, "hold", [etrace.block(src, _me(shape, src_pl).ranges)], _nbytes(local))
    out, received = exchange(local, shape, src_pl, dst_pl, (src, dst) if tracing else None, 1)
    store.put(dst, out)
    if tracing:
        etrace.end_op()
    return received
