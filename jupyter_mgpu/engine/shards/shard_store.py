"""The shard store of one engine: handle id -> this rank's local tensor of a DistTensor.

Handles live on the controller; the tensors live here, so nothing big crosses ipyparallel.
"""

from __future__ import annotations

import ctypes
from typing import Any

_SHARDS: dict[str, Any] = {}


def put(handle_id: str, tensor: Any) -> None:
    """Store ``tensor`` as this rank's shard of ``handle_id`` (replacing any previous one)."""
    _SHARDS[handle_id] = tensor


def get(handle_id: str) -> Any:
    """This rank's shard of ``handle_id``; a clear KeyError if it was freed or never made here."""
    try:
        return _SHARDS[handle_id]
    except KeyError:
        from jupyter_mgpu.engine import state as rank_state

        rank = rank_state.STATE.rank if rank_state.STATE else "?"
        raise KeyError(
            f"tensor {handle_id} has no shard on rank {rank} (it was freed, or made by another session)"
        ) from None


def has(handle_id: str) -> bool:
    return handle_id in _SHARDS


def free(handle_ids: list[str]) -> int:
    """Drop the shards of ``handle_ids``; returns the bytes released. Unknown ids are ignored."""
    released = 0
    for hid in handle_ids:
        t = _SHARDS.pop(hid, None)
        if t is not None:
            released += t.numel() * t.element_size()
    del t
    if released:
        trim()
    return released


def trim() -> None:
    """Give freed heap memory back to the OS so RSS (and the dashboard) drop at once."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def ids() -> list[str]:
    return sorted(_SHARDS)


def nbytes() -> int:
    """Bytes held by every shard on this rank."""
    return sum(t.numel() * t.element_size() for t in _SHARDS.values())


def clear() -> int:
    """Drop every shard (used when a session resets its engines)."""
    return free(list(_SHARDS))


class HandleRef:
    """What a DistTensor's notebook name means inside a ``%%mgpu`` cell: ``mgpu.local(A)`` finds its shard."""

    def __init__(self, handle_id: str, shape: tuple[int, ...], placement: str):
        self.handle_id, self.shape, self.placement = handle_id, tuple(shape), placement

    @property
    def local(self) -> Any:
        return get(self.handle_id)

    def __repr__(self) -> str:
        return (
            f"<DistTensor {self.handle_id} {self.shape} {self.placement}: use mgpu.local(name) for this rank's shard>"
        )


def bind_names(refs: dict[str, tuple[str, tuple[int, ...], str]]) -> None:
    """Define ``name = HandleRef(...)`` in this engine's cell namespace for each DistTensor a cell uses."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        shell = None
    import sys

    ns = shell.user_ns if shell is not None else sys.modules["__main__"].__dict__
    for name, (hid, shape, label) in refs.items():
        ns[name] = HandleRef(hid, shape, label)
