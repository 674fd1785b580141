"""What the garbage collector runs (weakref callbacks, finalizers, ``gc.callbacks``): code that runs wherever
an allocation happens to collect, not where a person steps, so a rank's pdb does not stop in it
(``rank_debugger.py``). Plain pdb does: a library's gc callback (hypothesis registers one) caught ``step``
at random."""

from __future__ import annotations

import gc
import threading
from types import FrameType
from typing import Any

_COLLECTING: list[int | None] = [None]  # the thread a garbage collection runs in now, if any


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    _COLLECTING[0] = threading.get_ident() if phase == "start" else None


def watch() -> None:
    """Note when a collection starts and stops (first of ``gc.callbacks``, so before the others' code)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.insert(0, _on_collection)


def _collecting() -> bool:
    """Whether this thread is inside a garbage collection now."""
    return _COLLECTING[0] == threading.get_ident()


def _in_gc_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside one of ``gc.callbacks`` (or what it calls): those after ours run once
    it has said the collection stopped."""
    codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    codes.discard(None)
    while frame is not None and codes:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def runs(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs because this thread is collecting garbage now."""
    return _collecting() or _in_gc_callback(frame)
