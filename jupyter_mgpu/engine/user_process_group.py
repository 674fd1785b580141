"""User code's own ``dist.init_process_group()`` and ``dist.destroy_process_group()`` on a rank that
already belongs to the session's process group.

A torchrun script starts with ``dist.init_process_group("nccl")`` and ends with
``dist.destroy_process_group()``. Here the rank is already in the session's group, so the first
returns at once when the backend and world size agree (one line says the session's group is used)
and fails in one sentence when they do not; the second keeps the session's group (the next cell and
every ``mg.*`` call go on using it) and still destroys any other group it is given. Subgroups made
with ``dist.new_group`` and everything else in ``torch.distributed`` are untouched.
"""

from __future__ import annotations

import sys
from typing import Any

_original: dict[str, Any] = {}
_said: set[str] = set()


def _backend_names(backend: Any) -> set[str]:
    """``"gloo"`` -> {gloo}; ``"cpu:gloo,cuda:nccl"`` -> {gloo, nccl}; a Backend enum -> its name."""
    text = str(backend).lower()
    return {part.split(":")[-1].strip() for part in text.split(",") if part.strip()}


def check_request(
    backend: Any, world_size: int | None, rank: int | None, session_backend: str, session_world: int, my_rank: int
) -> str | None:
    """Why a user's ``init_process_group(...)`` does not fit the session's group, or None when it does."""
    if backend is not None and session_backend not in _backend_names(backend):
        return (
            f"init_process_group asked for backend {str(backend)!r} but this session's process group uses "
            f"{session_backend!r} (rank {my_rank}); start the session with --backend {backend} or leave it out"
        )
    if world_size not in (None, -1) and world_size != session_world:
        return (
            f"init_process_group asked for world_size={world_size} but this session has {session_world} ranks "
            f"(rank {my_rank}); start it with %mgpu_init {world_size} or leave world_size out"
        )
    if rank not in (None, -1) and rank != my_rank:
        return f"init_process_group was given rank={rank} on rank {my_rank} of this session; leave rank out"
    return None


def _init_process_group(*args: Any, **kwargs: Any) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():  # the session's own group is being (re)built
        return _original["init_process_group"](*args, **kwargs)
    backend = args[0] if args else kwargs.get("backend")
    problem = check_request(
        backend,
        kwargs.get("world_size"),
        kwargs.get("rank"),
        dist.get_backend(),
        dist.get_world_size(),
        dist.get_rank(),
    )
    if problem:
        raise ValueError(problem)
    _say_once(
        "init",
        f"mgpu: rank {dist.get_rank()} already belongs to this session's process group "
        f"({dist.get_backend()}, {dist.get_world_size()} ranks); init_process_group uses it",
    )
    return None


def _destroy_process_group(group: Any = None) -> None:
    import torch.distributed as dist

    if group is None or group is dist.GroupMember.WORLD:
        _say_once(
            "destroy",
            f"mgpu: rank {dist.get_rank()} keeps this session's process group (destroy_process_group() "
            "leaves it for the next cells and mg.* calls)",
        )
        return
    _original["destroy_process_group"](group)


def _say_once(what: str, line: str) -> None:
    if what not in _said:  # once per engine: a training loop calling it per epoch says it once
        _said.add(what)
        print(line, file=sys.stderr)


def install() -> None:
    """Put the session-aware versions in ``torch.distributed`` (idempotent)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name, ours in (("init_process_group", _init_process_group), ("destroy_process_group", _destroy_process_group)):
        if name not in _original:
            _original[name] = getattr(c10d, name)
        for module in (dist, c10d):
            setattr(module, name, ours)


def destroy_session_group() -> None:
    """Really leave the session's process group (the session's own rebuild after a failure)."""
    import torch.distributed as dist

    destroy = _original.get("destroy_process_group", dist.destroy_process_group)
    destroy()
