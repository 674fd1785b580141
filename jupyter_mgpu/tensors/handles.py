"""What every DistTensor entry point shares, without the DistTensor class itself (so the transfer
paths and ``mg.map``/``mg.matmul`` use them without importing it): dtype names, shape and placement
checks, running a rank function that creates shards, and freeing handles the garbage collector dropped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.session import core as session_core
from jupyter_mgpu.session.lifecycle import current

DTYPES = ("float64", "float32", "bfloat16", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def dtype_name(dtype: Any, default: str = "float32") -> str:
    """``torch.float32`` / ``"float32"`` / ``"fp32"`` -> ``"float32"``; a clear error for anything else."""
    if dtype is None:
        return default
    name = str(dtype).replace("torch.", "")
    name = {
        "fp32": "float32",
        "fp64": "float64",
        "double": "float64",
        "float": "float32",
        "bf16": "bfloat16",
        "fp16": "float16",
        "half": "float16",
        "long": "int64",
        "int": "int32",
    }.get(name, name)
    if name not in DTYPES:
        raise MgpuError(f"unsupported dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return name


def shape_of(shape: Sequence[Any]) -> tuple[int, ...]:
    """``(3, 4)`` or ``((3, 4),)`` -> ``(3, 4)``; a clear error for anything but non-negative whole numbers."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise MgpuError(f"shape must be whole numbers, got {shape!r}") from None
    if any(isinstance(s, bool) or int(s) != s for s in shape) or any(s < 0 for s in out):
        raise MgpuError(f"shape must be non-negative whole numbers, got {shape!r}")
    return out


def placement_of(placement: Any, ndim: int, world_size: int) -> pl.Placement:
    """The placement asked for, checked (default: rows sharded, or replicated for a scalar)."""
    if placement is None:
        placement = pl.Shard(0) if ndim else pl.Replicate()
    try:
        return pl.normalize(placement, ndim, world_size)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None


def queue_free(session: Any, handle_id: str) -> None:
    """Free ``handle_id``'s shards before the session's next call, or when the cell ends (from ``__del__``, or
    after the stop button)."""
    session.__dict__.setdefault("_mgpu_pending_free", []).append(handle_id)


def flush_frees(session: Any, block: bool = True) -> None:
    """Free shards of handles that were garbage-collected (queued by ``__del__``): run before every call of the
    session (``session.core.before_call_hooks``) and when a cell ends, so no caller needs to."""
    pending = session.__dict__.get("_mgpu_pending_free")
    if not pending or not session.alive:
        return
    ids = list(pending)
    del pending[:]
    try:
        session.run(rank_tensor.free, ids, block=block, label="free")
    except Exception:
        pass


def free_after_each_cell(ipython: Any) -> None:
    """Free the shards of tensors a cell dropped when it ends (IPython's ``post_execute``), not only with
    the next call: ``del big`` alone in a cell gives its memory back at once."""
    if _free_dropped not in ipython.events.callbacks.get("post_execute", []):
        ipython.events.register("post_execute", _free_dropped)


def _free_dropped() -> None:
    session = current(required=False)
    if session is None:
        return
    recovery = getattr(session, "recovery", None)
    if recovery is not None and recovery.dirty is not None:
        # the group is to be rebuilt first (a stop left a rank busy): the frees wait for the next call, which
        # rebuilds where the stop button still works, not here, where the kernel could wait up to its timeout
        return
    try:
        with deferred_interrupt():  # a free is not cut in half
            flush_frees(session, block=False)
    except KeyboardInterrupt:
        pass  # pressed as the cell ended: nothing of it is left to stop


def run_creating(handle: Any, fn: Any, *args: Any, label: str) -> list[Any]:
    """Run a rank function that stores ``handle``'s shards; on any failure free what was made."""
    try:
        results: list[Any] = handle.session.run(fn, *args, label=label)
        return results
    except BaseException as exc:
        handle._state = "freed"
        if isinstance(exc, KeyboardInterrupt):
            # the stop button: give control back now; the shards go with the next call (as after ``del``),
            # which first waits for any rank the stop left busy — this call must not wait for it
            queue_free(handle.session, handle.handle_id)
            raise
        try:
            handle.session.run(rank_tensor.free, [handle.handle_id], label="free")
        except Exception:
            pass
        raise


def check_out(out: Any, shape: tuple[int, ...], dtype: str) -> None:
    """One sentence unless ``out`` (``gather(out=)``) is None or a contiguous CPU tensor of ``shape`` and ``dtype``."""
    if out is None:
        return
    import torch

    if (
        not isinstance(out, torch.Tensor)
        or tuple(out.shape) != shape
        or out.dtype != getattr(torch, dtype)
        or out.device.type != "cpu"
        or not out.is_contiguous()
    ):
        raise MgpuError(
            f"out= must be a contiguous CPU tensor of shape {shape} and dtype "
            f"{dtype}, got {getattr(out, 'shape', type(out).__name__)}"
        )


if flush_frees not in session_core.before_call_hooks:  # every call frees what was dropped before it
    session_core.before_call_hooks.append(flush_frees)
