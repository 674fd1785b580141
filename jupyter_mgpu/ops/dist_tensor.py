"""Rank-side shard work: create, scatter and gather by address or through shared blocks, free, memory status.

These run on the engines (``session.run(dist_tensor.create, ...)``); the controller-side handle lives in
``jupyter_mgpu/tensors/dist_tensor.py``. Placements come from the pure ``layout.placement`` module, so every rank
computes the same shard table without talking to the others. The shared-file path of scatter and gather is
``ops/shared_file.py``; redistribution between placements is ``ops/shard_exchange.py``.
"""

from __future__ import annotations

import math
import os
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


def _nbytes(t: Any) -> int:
    return int(t.numel() * t.element_size())


def free(ids: list[str]) -> int:
    """Free shards; returns bytes released on this rank."""
    return store.free(ids)


def local_copy(hid: str) -> Any:
    """This rank's shard as a CPU tensor (for ``dt.local(rank)``: small data only)."""
    return store.get(hid).detach().to("cpu", copy=True)


def shard_bytes(hid: str) -> int:
    t = store.get(hid)
    return int(t.numel() * t.element_size())


def memory_status() -> dict[str, Any]:
    """Free memory of this rank's device in bytes, as an allocation would see it."""
    st = rank_state.get()
    if st.device_kind == "cuda":
        import torch

        free_b, total = torch.cuda.mem_get_info(st.device)
        return {"free": int(free_b), "total": int(total), "budget": st.budget_bytes}
    from jupyter_mgpu.engine.shards import budget, held_failure

    shared_blocks.empty_cache()  # cached shard blocks hold budget a plain allocation cannot reclaim
    room = budget.room(st.budget_bytes)
    free_b = st.budget_bytes if room is None else room
    if budget.mode() == "allocator":  # an allocation that needs them lets the last failure's frames go
        free_b += held_failure.held_bytes()
    return {
        "free": int(free_b),
        "failure_held": held_failure.held_bytes(),
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
