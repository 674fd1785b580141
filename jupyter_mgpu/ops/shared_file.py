"""Scatter and gather through a one-off shared file, on the ranks: each rank maps only its shard's stretch.

The kernel stages the global tensor in a shared file (or gives the ranks a fresh one to fill) when its
faster paths do not apply, GPU ranks above all (``tensors/transfer_paths.py`` chooses); each rank maps
just the bytes of the file its shard covers and copies between that view and its shard. The DTensor
path (``ops/dtensor_handle.py``) writes through the same view.
"""

from __future__ import annotations

import mmap
import os
import warnings
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops.dist_tensor import _me, _trace_gather, _trace_one, dtype_of


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


def _file_view(
    path: str, shape: tuple[int, ...], box: tuple[pl.Range, ...], dtype: Any, write: bool
) -> tuple[Any, mmap.mmap]:
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
    return int(local.numel() * local.element_size())
