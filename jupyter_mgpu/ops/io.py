"""Rank-side file reading and writing: each rank touches only the bytes of its own shard.

``.npy`` files are memory-mapped (``numpy.load(mmap_mode="r")``): a rank's rows are the only pages
it reads. ``.pt`` files saved by ``torch.save`` (zip format) are opened with ``torch.load(mmap=True)``
so slicing reads only the slice; safetensors files are read through ``safe_open(...).get_slice``.
Writing a ``.npy`` is parallel too: the controller writes the header, every rank its rows.

The other half: ``tensors/io.py``, its controller side.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl


def _me(shape: tuple[int, ...], placement: pl.Placement) -> pl.ShardInfo:
    st = rank_state.get()
    return pl.shard_table(shape, placement, st.world_size)[st.rank]


def _index(info: pl.ShardInfo) -> tuple[slice, ...]:
    return tuple(slice(a, b) for a, b in info.ranges)


def _store(hid: str, local: Any) -> int:
    import torch

    dev = rank_state.get().device
    if not isinstance(local, torch.Tensor):
        import numpy as np

        local = torch.from_numpy(np.ascontiguousarray(local))
    out = torch.empty(local.shape, dtype=local.dtype, device=dev)
    out.copy_(local)
    store.put(hid, out)
    return out.numel() * out.element_size()


def load_npy(hid: str, path: str, shape: tuple[int, ...], placement: pl.Placement) -> int:
    """Read this rank's part of the ``.npy`` file ``path`` into shard ``hid``; returns its bytes."""
    import numpy as np

    arr = np.load(path, mmap_mode="r")
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{path} changed while loading: shape {arr.shape}, expected {shape}")
    me = _me(shape, placement)
    part = arr[_index(me)]
    try:
        return _store(hid, part)
    finally:
        del part, arr


def load_pt(hid: str, path: str, key: str | None, shape: tuple[int, ...], placement: pl.Placement) -> int:
    """Read this rank's part of a tensor saved with ``torch.save`` (memory-mapped, zip format)."""
    import torch

    obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    t = obj[key] if key is not None else obj
    me = _me(shape, placement)
    try:
        return _store(hid, t[_index(me)])
    finally:
        del t, obj


def load_safetensors(hid: str, path: str, key: str, shape: tuple[int, ...], placement: pl.Placement) -> int:
    """Read this rank's slice of tensor ``key`` of a safetensors file (only those bytes are read)."""
    from safetensors import safe_open

    me = _me(shape, placement)
    with safe_open(path, framework="pt") as f:
        part = f.get_slice(key)[_index(me)] if shape else f.get_tensor(key)
    return _store(hid, part)


def save_npy(hid: str, path: str, shape: tuple[int, ...], placement: pl.Placement) -> int:
    """Write this rank's shard into its place of the ``.npy`` file ``path`` (header already written).

    Replicated tensors are written by rank 0 only. Returns the bytes this rank wrote.
    """
    import numpy as np

    st = rank_state.get()
    if isinstance(placement, pl.Replicate) and st.rank != 0:
        return 0
    local = store.get(hid).detach().to("cpu")
    if not local.numel():
        return 0
    arr = np.load(path, mmap_mode="r+")
    try:
        arr[_index(_me(shape, placement))] = local.numpy()
        arr.flush()
    finally:
        del arr
    nbytes: int = local.numel() * local.element_size()
    return nbytes
