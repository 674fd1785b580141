"""``mg.randn``, ``mg.rand``, ``mg.zeros``, ``mg.ones``, ``mg.arange``, ``mg.scatter`` and ``mg.empty_cache``:
DistTensors made on the ranks (never on the controller), or from a controller tensor through the
transfer paths; the global tensor is the same whatever the world size."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.tensors import shared_blocks, transfer_paths
from jupyter_mgpu.tensors.dist_tensor import DistTensor, new_handle
from jupyter_mgpu.tensors.handles import dtype_name, placement_of, run_creating, shape_of


def _split_args(args: Sequence[Any], placement: Any, dtype: Any, seed: Any) -> tuple[Any, ...]:
    """Accept ``(3, 4)``, ``((3, 4),)`` and ``((3, 4), placement, dtype, seed)`` positionally, like torch."""
    args = tuple(args)
    if args and isinstance(args[0], (tuple, list)):
        shape, rest = args[0], args[1:]
    else:
        n = 0
        while n < len(args) and isinstance(args[n], numbers.Integral) and not isinstance(args[n], bool):
            n += 1
        shape, rest = args[:n], args[n:]
    if len(rest) > 3:
        raise MgpuError(f"too many positional arguments: {rest!r}; use shape, placement, dtype, seed")
    named = [placement, dtype, seed]
    for i, value in enumerate(rest):
        if named[i] is not None and i != 2:
            raise MgpuError(f"{('placement', 'dtype', 'seed')[i]} given twice")
        named[i] = value
    if rest and not isinstance(named[0], (pl.Shard, pl.Replicate, pl.Block2D)):
        raise MgpuError(f"shape must be whole numbers, got {args!r}")
    return (tuple(shape), *named)


def _create(
    kind: str,
    shape: Sequence[Any],
    placement: Any,
    dtype: Any,
    seed: int | None,
    session: Any,
    default_dtype: str = "float32",
) -> DistTensor:
    shape, placement, dtype, seed = _split_args(shape, placement, dtype, seed)
    s = session or sessmod.current()
    s.check_alive()
    shape = shape_of(shape)
    dt = dtype_name(dtype, default_dtype)
    if kind in ("randn", "rand") and not dt.startswith(("float", "bfloat")):
        raise MgpuError(f"{kind} makes floating-point tensors, not {dt}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise MgpuError(f"seed must be a non-negative whole number, got {seed!r}")
    target = placement_of(placement, len(shape), s.world_size)
    h = new_handle(s, shape, dt, target)
    run_creating(h, rank_tensor.create, h.handle_id, kind, shape, target, dt, seed, label=f"mg.{kind}")
    return h


def randn(*shape: Any, placement: Any = None, dtype: Any = None, seed: int = 0, session: Any = None) -> DistTensor:
    """A standard-normal tensor made on the ranks; the same global values for any world size."""
    return _create("randn", shape, placement, dtype, seed, session)


def rand(*shape: Any, placement: Any = None, dtype: Any = None, seed: int = 0, session: Any = None) -> DistTensor:
    """A uniform [0, 1) tensor made on the ranks; the same global values for any world size."""
    return _create("rand", shape, placement, dtype, seed, session)


def zeros(*shape: Any, placement: Any = None, dtype: Any = None, session: Any = None) -> DistTensor:
    """A tensor of zeros made on the ranks."""
    return _create("zeros", shape, placement, dtype, None, session)


def ones(*shape: Any, placement: Any = None, dtype: Any = None, session: Any = None) -> DistTensor:
    """A tensor of ones made on the ranks."""
    return _create("ones", shape, placement, dtype, None, session)


def arange(*shape: Any, placement: Any = None, dtype: Any = None, session: Any = None) -> DistTensor:
    """Each element holds its flat (row-major) global index; int64 unless ``dtype`` says otherwise."""
    return _create("arange", shape, placement, dtype, None, session, default_dtype="int64")


def scatter(tensor: Any, placement: Any = None, session: Any = None) -> DistTensor:
    """Distribute a controller tensor (torch or numpy) to the ranks through shared memory."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        try:
            tensor = torch.as_tensor(tensor)
        except Exception:
            raise MgpuError(f"scatter needs a torch tensor or an array, got {type(tensor).__name__}") from None
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    s = session or sessmod.current()
    s.check_alive()
    dt = dtype_name(tensor.dtype)
    target = placement_of(placement, tensor.dim(), s.world_size)
    h = new_handle(s, tuple(tensor.shape), dt, target)
    placed: DistTensor = transfer_paths.place(h, tensor)
    return placed


def empty_cache(session: Any = None) -> int:
    """Free the shard blocks the ranks keep for reuse (like ``torch.cuda.empty_cache``); bytes released."""
    s = session or sessmod.current()
    s.check_alive()
    done = s.run(rank_tensor.empty_cache, label="empty_cache")
    maps = shared_blocks.rank_blocks(s)
    for rank, d in enumerate(done):
        maps.forget(rank, d["evicted"])
    return sum(d["released"] for d in done)
