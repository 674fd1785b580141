"""The last failure's frames, kept on this rank for post-mortem: what they hold is measured, said, and let
go when memory is needed.

A rank keeps the traceback of its last failure as IPython keeps ``sys.last_traceback``, so that
``%mgpu_debug`` can open it (``engine/execution/rank_debugger.py`` reads it here). Those frames keep their
locals alive: on a GPU, the classic notebook trap of an exception that keeps the tensors while every later
cell runs out of memory. So:

- an out-of-memory failure's frames are never kept, and the reference cycles they sit in (IPython's
  traceback formatting leaves some) are collected when the call ends (:func:`settle`), so the memory is
  back before the next call;
- any other failure's frames are kept with the bytes of tensors that only they hold (:func:`held_bytes`),
  which the error's last words, ``mg.memory()`` and the memory dashboard say;
- they are let go (:func:`release`) by ``%mgpu_debug --release``, by the next failure, and when an
  allocation on this rank would otherwise fail: the CPU budget's allocator calls :func:`release` and
  retries once (``allocator_budget.on_out_of_memory``); on a GPU, torch's out-of-memory observer calls it
  (``cuda_device.on_out_of_memory``), so the next allocation finds the memory.
"""

from __future__ import annotations

import atexit
import gc
import inspect
import sys
import threading
import types
import warnings
from collections.abc import Iterable
from typing import Any

from jupyter_mgpu.engine import cuda_device, rank_traceback
from jupyter_mgpu.engine.shards import allocator_budget, shard_store

OOM_LET_GO = "it ran out of memory, and its frames were let go to give that memory back"
RELEASED = "its frames were released (%mgpu_debug --release, or an allocation that needed the memory)"
_DEPTH = 4  # containers and objects followed from a frame's locals to the tensors they hold
_MAX_OBJECTS = 200_000  # a walk stops here: a huge namespace costs a failure no more than this

_lock = threading.RLock()  # the main thread, and an allocation on any thread that releases
_kept: types.TracebackType | None = None
_held = 0
_why_not: str | None = None  # why the last failure's frames are not kept (None: nothing failed yet)
# frames were let go: collect their cycles when the call's exception is gone, and once more when the next
# call starts (a thread that read the main thread's stack, the sampler's where, may have held one a moment)
_collect = 0


def install(device_kind: str) -> None:
    """Let the kept frames go when an allocation on this rank needs their memory: the CPU budget's shim
    releases and retries; on a GPU, torch's out-of-memory observer releases for the next allocation."""
    if allocator_budget.installed():
        allocator_budget.on_out_of_memory(release)
        atexit.register(allocator_budget.arm, False)  # never call into an interpreter that is ending
    elif device_kind == "cuda":
        cuda_device.on_out_of_memory(release)


def keep(tb: types.TracebackType | None, out_of_memory: bool = False) -> int:
    """Keep ``tb`` as this rank's last failure, letting the previous one go; returns the bytes it holds.
    An out-of-memory failure is not kept: its frames are what the next call needs."""
    global _kept, _held, _why_not, _collect
    with _lock:
        _forget()
        if out_of_memory or tb is None:
            _why_not = OOM_LET_GO if out_of_memory else None
            _clear(tb)
            _collect = 2
            return 0
        _kept, _why_not = tb, None
        _held = measure(tb)
        _arm()
        return _held


def traceback() -> types.TracebackType | None:
    """The kept failure's traceback, or None."""
    return _kept


def held_bytes() -> int:
    """Bytes of tensors that only the kept failure's frames hold (0 when none is kept)."""
    return _held


def state() -> str:
    """``kept`` (a failure to debug), ``none`` (nothing failed), or why the last failure is not kept."""
    if _kept is not None:
        return "kept"
    return _why_not or "none"


def release() -> int:
    """Let the kept failure's frames go now; returns the bytes that gave back (measured by the CPU budget's
    allocator where it counts, else the bytes the frames were measured to hold)."""
    global _why_not
    with _lock:
        if _kept is None:
            return 0
        before = allocator_budget.allocated() if allocator_budget.installed() else None
        estimate = _held
        _forget()
        _why_not = RELEASED
        _collect_now()
        if before is None:
            return estimate
        return max(0, before - allocator_budget.allocated())


def settle() -> None:
    """At the end of a call, once its exception is gone: collect the cycles of frames let go during it.
    The other records of an error go too: IPython keeps them for a failure of ipyparallel's own execute
    (``%px``), and nothing on a rank reads them (its post-mortem is this module's)."""
    if _clear_error_records() or _collect:
        _collect_now()


def _forget() -> None:
    global _kept, _held, _collect
    if _kept is not None:
        _clear(_kept)
        _collect = 2
    _kept, _held = None, 0
    _clear_error_records()
    allocator_budget.arm(False)


def _clear(tb: types.TracebackType | None) -> None:
    """Drop the locals of the finished frames of ``tb`` now: whatever else still refers to a frame (a cycle,
    a thread that read the main thread's stack a moment ago), its tensors are freed at once.

    ``frame.clear()`` alone is not enough on Python 3.11 (measured here): a frame whose ``f_locals``
    was read (IPython's traceback formatting reads them) keeps that snapshot of its locals, so the
    snapshot is emptied too. A module-level frame's ``f_locals`` is its module's namespace: left alone."""
    for frame in _frames(tb):
        try:
            frame.clear()
        except RuntimeError:  # still executing (the call that reports the failure): left as it is
            continue
        if frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # a function's frame: its locals are its own
            snapshot = frame.f_locals
            if isinstance(snapshot, dict):
                snapshot.clear()


def _collect_now() -> None:
    global _collect
    _collect = max(0, _collect - 1)
    gc.collect()
    shard_store.trim()


def _clear_error_records() -> bool:
    """Let go of the other records of the last error, which hold its frames too: Python's own (``sys.last_*``,
    set by an excepthook, IPython or user code) and the engine shell's (the last traceback its formatter
    showed, for ``%debug``, and the error of its last execution); whether there was one."""
    cleared = False
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if getattr(sys, name, None) is not None:
            setattr(sys, name, None)
            cleared = True
    shell = _shell()
    formatter = getattr(shell, "InteractiveTB", None)
    if getattr(formatter, "tb", None) is not None:
        formatter.tb = None  # type: ignore[union-attr]
        cleared = True
    error = getattr(getattr(shell, "last_execution_result", None), "error_in_exec", None)
    while isinstance(error, BaseException) and error.__traceback__ is not None:
        error.__traceback__ = None  # the shell's last result keeps the error, its frames go
        error, cleared = (error.__cause__ or error.__context__), True
    return cleared


def _arm() -> None:
    allocator_budget.arm(_held > 0)


def _frames(tb: types.TracebackType | None) -> Iterable[types.FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _is_module_namespace(namespace: dict[str, Any]) -> bool:
    """Whether ``namespace`` is an imported module's (the rank's ``__main__`` included): it outlives the
    failure, so what it holds is not the frames' to give back. A script's namespace is not: runpy's
    temporary module lives only in the script's frames."""
    module = sys.modules.get(str(namespace.get("__name__")))
    return module is not None and getattr(module, "__dict__", None) is namespace


def measure(tb: types.TracebackType | None) -> int:
    """Bytes of the tensors reachable from the frames of ``tb`` (their locals, the containers and objects
    those hold) that nothing outside the frames holds: not a module's namespace, not the shard store."""
    try:
        import torch
    except ImportError:
        return 0
    held: list[Any] = []
    outside: list[Any] = [shard_store._SHARDS, sys.modules["__main__"].__dict__, _rank_namespace()]
    for frame in _frames(tb):
        if rank_traceback.is_internal(frame.f_code.co_filename):
            continue  # the package's own frames (the call's machinery): what they reach is the engine's
        if frame.f_locals is frame.f_globals:  # module level: a cell, a script's top level
            (outside if _is_module_namespace(frame.f_globals) else held).append(frame.f_globals)
        else:
            held.append(dict(frame.f_locals))  # a proxy, not a dict, from Python 3.13 on
            outside.append(frame.f_globals)
    with warnings.catch_warnings():  # reading objects' attributes must never print a library's deprecation
        warnings.simplefilter("ignore")
        kept = _storages(held, torch)
        if not kept:
            return 0
        for key in _storages(outside, torch):
            kept.pop(key, None)
    return sum(kept.values())


def _shell() -> Any:
    """The engine's IPython shell, or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _rank_namespace() -> dict[str, Any]:
    """The engine shell's namespace, where cells run (``{}`` outside IPython)."""
    shell = _shell()
    return shell.user_ns if shell is not None else {}


def _storages(roots: list[Any], torch: Any) -> dict[tuple[str, int], int]:
    """The storages of the tensors reachable from ``roots`` (to a depth of a few containers or
    attributes), by (device, address): their bytes."""
    found: dict[tuple[str, int], int] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(r, 0) for r in roots]
    module_type = torch.nn.Module
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.FrameType, str, bytes)
    while stack and len(seen) < _MAX_OBJECTS:
        obj, depth = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            try:
                storage = obj.untyped_storage()
                if storage.nbytes():
                    found[(str(storage.device), storage.data_ptr())] = storage.nbytes()
            except (RuntimeError, NotImplementedError):  # a meta, sparse or wrapper tensor: no storage of its own
                pass
            if obj.is_leaf and obj.grad is not None:
                stack.append((obj.grad, depth))
            continue
        if depth >= _DEPTH or isinstance(obj, skip):
            continue
        children: Iterable[Any]
        if isinstance(obj, dict):
            children = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children = list(obj)
        elif isinstance(obj, module_type):  # a model: its parameters and buffers, however deep
            children = [*obj.parameters(), *obj.buffers()]
        elif isinstance(obj, BaseException):  # a caught error kept in a local: its chain and its frames
            children = [obj.__cause__, obj.__context__, *(dict(f.f_locals) for f in _frames(obj.__traceback__))]
        else:
            try:
                children = list(vars(obj).values())
            except Exception:  # no __dict__, or one that cannot be read
                continue
        stack.extend((c, depth + 1) for c in children)
    return found
