"""User code's own ``dist.init_process_group()`` and ``dist.destroy_process_group()`` on a rank that
already belongs to the session's process group.

A torchrun script starts with ``dist.init_process_group("nccl")`` and ends with
``dist.destroy_process_group()``. Here the rank is already in the session's group, so the first
checks its arguments as torch does (``engine/group/init_checks.py``: what torch refuses is refused with
torch's exception and words), then against the session: a backend, world size, rank or device the
session's group does not have is one sentence; ``timeout=`` becomes the group's collective timeout until
the call that asked (a script run, a cell) ends; ``init_method`` (``env://``, ``tcp://``, ``file://``) and
``store=`` are accepted, the ranks having met already; ``pg_options`` cannot change a group that exists.
The second keeps the session's group (the next cell and every ``mg.*`` call go on using it) and still
destroys any other group it is given. What happened is noted for the call (:func:`take_notes`), and the
controller says it in one line. Subgroups made with ``dist.new_group`` and everything else in
``torch.distributed`` are untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

_original: dict[str, Any] = {}
_notes: dict[str, str] = {}
_timeouts: dict[str, float] = {}  # while a call's own timeout is in force: "call" and the "session"'s


def _backend_names(backend: Any) -> set[str]:
    """``"gloo"`` -> {gloo}; ``"cpu:gloo,cuda:nccl"`` -> {gloo, nccl}; a Backend enum -> its name."""
    text = str(backend).lower()
    return {part.split(":")[-1].strip() for part in text.split(",") if part.strip()}


def check_request(
    backend: Any, world_size: int | None, rank: int | None, session_backend: str, session_world: int, my_rank: int
) -> str | None:
    """Why a user's ``init_process_group(...)`` does not fit the session's group, or None when it does."""
    if backend not in (None, "undefined") and session_backend not in _backend_names(backend):
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


def _check_device(device: Any, my_rank: int) -> str | None:
    """Why ``device_id`` is not this rank's device (a GPU session's ``cuda:LOCAL_RANK``), or None."""
    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.STATE
    mine = getattr(st, "device", None)
    if device is None or mine is None or device == mine:
        return None
    return (
        f"init_process_group was given device_id={device} but rank {my_rank}'s device is {mine}; "
        "pass torch.device('cuda', int(os.environ['LOCAL_RANK'])) or leave device_id out"
    )


def _init_process_group(*args: Any, **kwargs: Any) -> None:
    import inspect

    import torch.distributed as dist

    original: Callable[..., None] = _original["init_process_group"]
    if not dist.is_initialized():  # the session's own group is being (re)built
        return original(*args, **kwargs)
    try:
        given = inspect.signature(original).bind(*args, **kwargs).arguments
    except TypeError as exc:  # as calling torch's function with these arguments would
        raise TypeError(f"init_process_group() {exc}") from None
    from jupyter_mgpu.engine.group import init_checks

    names = ("backend", "init_method", "timeout", "world_size", "rank", "store", "pg_options", "device_id")
    request = init_checks.check(**{k: given[k] for k in names if k in given})
    my_rank = dist.get_rank()
    problem = check_request(
        request.backend, request.world_size, request.rank, dist.get_backend(), dist.get_world_size(), my_rank
    ) or _check_device(request.device, my_rank)
    if problem is None and given.get("pg_options") is not None:
        problem = (
            f"init_process_group's pg_options cannot change this session's process group, which rank {my_rank} "
            "joined when the session started; leave pg_options out"
        )
    if problem:
        raise ValueError(problem)
    if request.timeout_s is not None:
        set_call_timeout(request.timeout_s)
    _notes["init"] = f"{dist.get_backend()}, {dist.get_world_size()} ranks"
    return None


def set_call_timeout(seconds: float) -> None:
    """The group's collective timeout until the current call ends (:func:`end_call`)."""
    from torch.distributed import distributed_c10d as c10d

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.group import process_group

    st = rank_state.get()
    _timeouts.setdefault("session", process_group.collective_seconds(st.backend, st.collective_timeout))
    c10d._set_pg_timeout(timedelta(seconds=seconds))
    _timeouts["call"] = seconds
    _notes["timeout"] = f"{seconds:g}"


def current_timeout() -> float | None:
    """The collective timeout in force now when the current call set its own, else None."""
    return _timeouts.get("call")


def end_call() -> None:
    """The call is over: the session's collective timeout is back."""
    if "session" in _timeouts:
        from torch.distributed import distributed_c10d as c10d

        seconds = _timeouts["session"]
        _timeouts.clear()
        try:
            c10d._set_pg_timeout(timedelta(seconds=seconds))
        except Exception:  # no group now (it is being rebuilt with the session's timeout)
            pass


def _destroy_process_group(group: Any = None) -> None:
    import torch.distributed as dist

    if group is None or group is dist.GroupMember.WORLD:
        _notes["destroy"] = ""
        return
    _original["destroy_process_group"](group)


def destroy_group(group: Any) -> None:
    """Really destroy ``group`` (a subgroup a finished script left behind)."""
    _original["destroy_process_group"](group)


def take_notes() -> dict[str, str]:
    """What the current call's init/destroy did (``init``: the group it joined, ``destroy``, ``timeout``),
    for the controller to say once; cleared."""
    notes = dict(_notes)
    _notes.clear()
    return notes


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

    _timeouts.clear()  # the rebuilt group has the session's timeout
    destroy = _original.get("destroy_process_group", dist.destroy_process_group)
    destroy()
