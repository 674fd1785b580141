"""Rank-side shard work: create, read/write through a shared-memory file, redistribute, free.

These run on the engines (``session.run(dist_tensor.create, ...)``); the controller-side handle lives in
``jupyter_mgpu/tensors/dist_tensor.py``. Placements come from the pure ``layout.placement`` module, so every rank
computes the same shard table without talking to the others.
"""

from __future__ import annotations

import math
import mmap
import os
import warnings
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.engine.shards import seeding, shared_blocks
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl


def dtype_of(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _me(shape: tuple[int, ...], placement: pl.Placement) -> pl.ShardInfo:
    st = rank_state.get()
    return pl.shard_table(shape, placement, st.world_size)[st.rank]


def _sub(box: tuple[pl.Range, ...], origin: tuple[pl.Range, ...]) -> tuple[slice, ...]:
    """Slices selecting global ``box`` inside a local tensor that covers ``origin``."""
    return tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(box, origin))


def create(
    hid: str,
    kind: str,
    shape: tuple[int, ...],
    placement: pl.Placement,
    dtype: str,
    seed: int | None,
    fill_value: float | None = None,
) -> int:
    """Make this rank's shard of a new global tensor on the device; returns its bytes."""
    import torch

    me = _me(shape, placement)
    out = torch.empty(me.shape, dtype=dtype_of(dtype), device=rank_state.get().device)
    if kind in ("randn", "rand"):
        seeding.fill(out, kind, shape, me.ranges, seed or 0)
    elif kind == "arange":
        seeding.arange_fill(out, shape, me.ranges)
    elif kind == "full":
        assert fill_value is not None  # the controller's full() always sends its value
        out.fill_(fill_value)
    else:
        out.fill_(0 if kind == "zeros" else 1)
    store.put(hid, out)
    if etrace.active():
        _trace_one(f"mg.{kind}", hid, shape, out, me.ranges, "hold")
    return out.numel() * out.element_size()


def _trace_one(
    label: str, hid: str, shape: tuple[int, ...], t: Any, box: Any, action: str, peer: int | None = None
) -> None:
    """Trace a one-step op on this rank: ``action`` on its shard ``box`` of tensor ``hid``."""
    etrace.begin_op(label)
    etrace.declare(hid, shape, t.element_size(), "tensor")
    etrace.record(0, action, [etrace.block(hid, box)], t.numel() * t.element_size(), peer)
    etrace.end_op()


def _map(path: str, offset: int, length: int, write: bool) -> tuple[mmap.mmap, int]:
    """Map ``length`` bytes of ``path`` from ``offset`` (page-aligned down); returns (map, skip)."""
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
    try:
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
        m = mmap.mmap(fd, length + offset - start, flags=flags, prot=prot, offset=start)
    finally:
        os.close(fd)
    return m, offset - start


def _span(shape: tuple[int, ...], box: tuple[pl.Range, ...], itemsize: int) -> tuple[int, int]:
    """First byte and length of the stretch of a row-major file that contains ``box``."""
    strides = [itemsize]
    for s in reversed(shape[1:]):
        strides.insert(0, strides[0] * s)
    first = sum(a * st for (a, _), st in zip(box, strides))
    last = sum((b - 1) * st for (_, b), st in zip(box, strides)) + itemsize
    return first, last - first


def _file_view(path: str, shape: tuple[int, ...], box: tuple[pl.Range, ...], dtype: Any, write: bool):
    """A tensor view of the part of the global tensor in ``path`` that ``box`` selects."""
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    first, length = _span(shape, box, itemsize)
    m, skip = _map(path, first, length, write)
    with warnings.catch_warnings():  # a read-only map warns that the tensor is not writable; we only read it
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(m, dtype=torch.uint8, count=length, offset=skip).view(dtype)
    strides = [1]
    for s in reversed(shape[1:]):
        strides.insert(0, strides[0] * s)
    sizes = tuple(b - a for a, b in box)
    return flat.as_strided(sizes, tuple(strides) if shape else ()), m


def scatter_from_file(hid: str, path: str, shape: tuple[int, ...], placement: pl.Placement, dtype: str) -> int:
    """Copy this rank's slice of the global tensor in the shared file ``path`` into its shard."""
    import torch

    me = _me(shape, placement)
    dt = dtype_of(dtype)
    out = torch.empty(me.shape, dtype=dt, device=rank_state.get().device)
    if out.numel():
        view, m = _file_view(path, shape, me.ranges, dt, write=False)
        out.copy_(view)
        del view
        m.close()
    store.put(hid, out)
    if etrace.active():
        _trace_one("scatter", hid, shape, out, me.ranges, "recv", etrace.HOST)
    return out.numel() * out.element_size()


def _address(t: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "addr": t.data_ptr(), "nbytes": t.numel() * t.element_size()}


def gather_address(hid: str, shape: tuple[int, ...], placement: pl.Placement) -> dict[str, Any] | None:
    """Where the kernel can read this rank's shard in place ({}: nothing to send, None: not readable)."""
    local = store.get(hid)
    _trace_gather(hid, shape, placement, local)
    if (isinstance(placement, pl.Replicate) and rank_state.get().rank != 0) or not local.numel():
        return {}
    if local.device.type != "cpu" or not local.is_contiguous():
        return None
    return _address(local)


def scatter_place(hid: str, shape: tuple[int, ...], placement: pl.Placement, dtype: str) -> dict[str, Any]:
    """Make this rank's shard of a scatter now, on a private block, and say where it lies: the kernel
    then writes the slice into it by address (one round trip in all)."""
    import torch

    me = _me(shape, placement)
    dt = dtype_of(dtype)
    nbytes = math.prod(me.shape) * torch.empty((), dtype=dt).element_size()
    if nbytes:
        meta = shared_blocks.reserve(nbytes, shared=False)
        out = shared_blocks.adopt(meta["id"], me.shape, dt)
    else:
        meta, out = {}, torch.empty(me.shape, dtype=dt)
    store.put(hid, out)
    if etrace.active():
        _trace_one("scatter", hid, shape, out, me.ranges, "recv", etrace.HOST)
    return meta


def scatter_reserve(shape: tuple[int, ...], placement: pl.Placement, dtype: str) -> dict[str, Any] | None:
    """A shared block for this rank's shard of a scatter (None off a CPU device or for an empty shard)."""
    import torch

    if rank_state.get().device_kind != "cpu":
        return None
    me = _me(shape, placement)
    nbytes = math.prod(me.shape) * torch.empty((), dtype=dtype_of(dtype)).element_size()
    return shared_blocks.reserve(nbytes) if nbytes else None


def scatter_adopt(
    hid: str, block_ids: list[int | None], shape: tuple[int, ...], placement: pl.Placement, dtype: str
) -> int:
    """Make the block the kernel just filled this rank's shard ``hid``."""
    import torch

    me = _me(shape, placement)
    block = block_ids[rank_state.get().rank]
    dt = dtype_of(dtype)
    out = shared_blocks.adopt(block, me.shape, dt) if block else torch.empty(me.shape, dtype=dt)
    store.put(hid, out)
    if etrace.active():
        _trace_one("scatter", hid, shape, out, me.ranges, "recv", etrace.HOST)
    return out.numel() * out.element_size()


def scatter_abandon() -> None:
    """Give back this rank's block of a scatter that failed before its shards were made."""
    shared_blocks.release_pending()


def gather_locate(
    hid: str, shape: tuple[int, ...], placement: pl.Placement, trace: bool = True
) -> dict[str, Any] | None:
    """Which shard block the kernel can read this rank's shard from (None: it must be sent another way)."""
    local = store.get(hid)
    if trace:
        _trace_gather(hid, shape, placement, local)
    if isinstance(placement, pl.Replicate) and rank_state.get().rank != 0:
        return {}
    return shared_blocks.locate(local) if local.numel() else {}


def _trace_gather(hid: str, shape: tuple[int, ...], placement: pl.Placement, local: Any) -> None:
    if etrace.active():
        st = rank_state.get()
        me = _me(shape, placement)
        etrace.begin_op("gather")
        etrace.declare(hid, shape, local.element_size(), "tensor")
        etrace.record(0, "hold", [etrace.block(hid, me.ranges)], _nbytes(local))
        if local.numel() and (st.rank == 0 or not isinstance(placement, pl.Replicate)):
            etrace.record(1, "send", [etrace.block(hid, me.ranges)], _nbytes(local), etrace.HOST)
        etrace.end_op()


def gather_to_file(hid: str, path: str, shape: tuple[int, ...], placement: pl.Placement, trace: bool = True) -> int:
    """Write this rank's shard into its place in the shared file ``path`` (replicas: rank 0 only).

    ``trace=False`` after :func:`gather_locate` (which traced this gather already).
    """
    st = rank_state.get()
    local = store.get(hid)
    me = _me(shape, placement)
    if trace:
        _trace_gather(hid, shape, placement, local)
    if isinstance(placement, pl.Replicate) and st.rank != 0:
        return 0
    if not local.numel():
        return 0
    view, m = _file_view(path, shape, me.ranges, local.dtype, write=True)
    view.copy_(local)
    del view
    m.close()
    return local.numel() * local.element_size()


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


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
            del piece  # freed before the next step's copy: one send copy at a time (the planner counts one)
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


def free(ids: list[str]) -> int:
    """Free shards; returns bytes released on this rank."""
    return store.free(ids)


def local_copy(hid: str) -> Any:
    """This rank's shard as a CPU tensor (for ``dt.local(rank)``: small data only)."""
    return store.get(hid).detach().to("cpu", copy=True)


def shard_bytes(hid: str) -> int:
    t = store.get(hid)
    return t.numel() * t.element_size()


def memory_status() -> dict[str, Any]:
    """Free memory of this rank's device in bytes, as an allocation would see it."""
    st = rank_state.get()
    if st.device_kind == "cuda":
        import torch

        free_b, total = torch.cuda.mem_get_info(st.device)
        return {"free": int(free_b), "total": int(total), "budget": st.budget_bytes}
    from jupyter_mgpu.engine.shards import budget

    shared_blocks.empty_cache()  # cached shard blocks hold budget a plain allocation cannot reclaim
    room = budget.room(st.budget_bytes)
    free_b = st.budget_bytes if room is None else room
    return {
        "free": int(free_b),
        "total": int(st.budget_bytes),
        "budget": st.budget_bytes,
        "allocated": budget.allocated(),
        "budget_mode": budget.mode(),
        "resident": int(telemetry._proc_status().get("VmRSS", 0)),
    }


def empty_cache() -> dict[str, Any]:
    """Free this rank's cached shard blocks; the bytes released and the blocks the kernel should unmap."""
    released = shared_blocks.empty_cache()
    return {"released": released, "evicted": shared_blocks.take_evicted()}
