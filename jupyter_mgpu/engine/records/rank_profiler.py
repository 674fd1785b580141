"""Rank side of ``mg.profile()`` (the notebook's side is ``profiling/profile_run.py``): torch.profiler on
this rank from :func:`start` to :func:`stop`, across the calls in between (cells, scripts, ``mg.*``
ops), plus what the profiler does not know and the collective watch does (``engine/watch/collective_watch.py``):
each Python-level collective's group, number, bytes and user's line with the times this rank entered
and left it, and the calls it ran. :func:`stop` hands everything back, the Kineto trace included
(compressed: ranks on other hosts cannot share a file with the notebook).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from typing import Any

from jupyter_mgpu.engine import state as rank_state

_prof: Any = None
_started_ns = 0


def start(record_shapes: bool = False, with_stack: bool = False, profile_memory: bool = False) -> dict[str, Any]:
    """Start torch.profiler on this rank (CPU ops; CUDA kernels and memory on a GPU) and the logs of
    calls and collectives; a profile already running here is dropped. The options are torch.profiler's,
    with its defaults: ``record_shapes`` keeps references that break code a plain run does not (a module's
    ``to_empty`` that swaps its parameters, as FSDP2's does); the collectives' sizes come from the flight
    recorder instead (:func:`issued`)."""
    global _prof, _started_ns
    from torch.profiler import ProfilerActivity, profile

    st = rank_state.get()
    if _prof is not None:
        _discard()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if st.device_kind == "cuda" else [])
    _prof = profile(
        activities=activities, record_shapes=record_shapes, with_stack=with_stack, profile_memory=profile_memory
    )
    st.call_log, st.collective_log = [], []
    _started_ns = time.time_ns()
    with _inductor_left_unimported():
        _prof.start()
    return {"rank": st.rank, "time_ns": _started_ns}


@contextlib.contextmanager
def _inductor_left_unimported() -> Iterator[None]:
    """torch.profiler's start asks ``hasattr(torch, "_inductor")`` to read one flag of compiled CUDA graphs,
    which imports the inductor (1.2 s of a 1.2 s first start here, several on a loaded machine) where nothing
    was compiled: while the profiler starts, an inductor not yet imported reads as absent (no compiled
    graph can then exist, and the flag's default, False, is the truth)."""
    import torch

    lazy = torch.__dict__.get("__getattr__")
    if "torch._inductor" in sys.modules or lazy is None:
        yield
        return

    def absent_inductor(name: str) -> Any:
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    torch.__getattr__ = absent_inductor  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.__getattr__ = lazy  # type: ignore[method-assign]


def clock() -> int:
    """This rank's wall clock (ns since the epoch): the notebook maps it onto its own."""
    return time.time_ns()


def _discard() -> None:
    global _prof
    prof, _prof = _prof, None
    st = rank_state.get()
    st.call_log = st.collective_log = None
    if prof is not None:
        try:
            prof.stop()
        except Exception:
            pass


def stop() -> dict[str, Any]:
    """Stop profiling here; this rank's Kineto trace (zlib-compressed JSON), calls and collectives."""
    global _prof
    st = rank_state.get()
    prof, _prof = _prof, None
    calls, collectives = st.call_log or [], st.collective_log or []
    st.call_log = st.collective_log = None
    if prof is None:
        raise RuntimeError(f"rank {st.rank} is not profiling (mg.profile() was not started here)")
    prof.stop()
    fd, path = tempfile.mkstemp(prefix=f"mgpu-profile-rank{st.rank}-", suffix=".json", dir=st.rundir)
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, "rb") as f:
            trace = zlib.compress(f.read(), 1)
    finally:
        os.unlink(path)
    return {
        "rank": st.rank,
        "host": st.host or socket.gethostname(),
        "trace": trace,
        "calls": [{"label": label, "start_ns": a, "end_ns": b} for label, a, b in calls],
        "collectives": collectives,
        "issued": issued(_started_ns),
    }


def issued(since_ns: int) -> list[dict[str, Any]]:
    """The collectives this rank's process groups ran since ``since_ns`` (epoch), whoever issued them (DDP's
    buckets, FSDP2, DTensor, the user's Python), as c10d's flight recorder has them: op, when it was
    created (epoch ns), its input bytes, its group (``g``) and torch's number for it there (``n``, the
    collective watch's numbering too). Empty where the recorder is off (``TORCH_FR_BUFFER_SIZE`` unset
    when the group was made) or absent."""
    from jupyter_mgpu.engine.watch.issued_collectives import recorder

    out = []
    for e in recorder(only_active=False, entries=True).get("entries") or ():
        created = int(e.get("time_created_ns") or 0)
        name = str(e.get("profiling_name") or "")
        if created < since_ns or ":" not in name:
            continue
        entry = {"op": name.split(":", 1)[1], "created_ns": created, "bytes": _input_bytes(e)}
        entry.update(g=str((e.get("process_group") or ("",))[0]), n=int(e.get("collective_seq_id") or 0))
        out.append(entry)
    return out


def _input_bytes(entry: dict[str, Any]) -> int:
    from jupyter_mgpu.engine.watch.issued_collectives import dtype_of

    total = 0
    for size, dtype in zip(entry.get("input_sizes") or (), entry.get("input_dtypes") or ()):
        count = 1
        for x in size:
            count *= int(x)
        kind = dtype_of(dtype)
        total += count * (kind.itemsize if kind is not None else 0)
    return total
