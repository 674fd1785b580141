"""Trace recorder on each rank: what every op does, step by step, while it runs (off unless asked for).

Ops call :func:`record` (``hold``, ``send``, ``recv``, ``compute``, ``reduce``, ``free``) with the
blocks concerned — each a ``(tensor name, box)`` where the box is the global index range per
dimension, plus an optional buffer tag for temporary copies. When tracing is off, ``record`` is one
global test and returns, so ops need no other guard. When it is on, an event is one tuple appended
to a list (cheap: no formatting while the op runs); with ``live`` the events are also appended as
JSON lines to ``<rundir>/trace/rank<r>.jsonl`` every ``LIVE_PERIOD`` seconds while an op runs and when
it ends (so a kernel thread can follow a running cell without the ipyparallel queue). :func:`stop` returns the events as dicts.

While recording, torch's DTensor redistributes (user code in ``%%mgpu`` cells or ``Session.run``) are
recorded too: :func:`start` installs ``engine/records/dtensor_trace.py`` (lazily: no torch here) and :func:`stop`
takes it off DTensor's path again and labels those tensors with the user's variable names.

Engine-side: imports only the runtime (and json/time), and lazily the DTensor hook.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from jupyter_mgpu.engine import state as rank_state

ACTIONS = ("hold", "send", "recv", "compute", "reduce", "free")
HOST = -1  # the controller (notebook) as a peer: scatter receives from it, gather sends to it
LIVE_PERIOD = 0.2  # seconds between appends to the live file while an op runs


class Recorder:
    """Events of one ``mg.trace()`` block on this rank."""

    def __init__(self, trace_id: str, live_path: str | None):
        self.trace_id = trace_id
        self.events: list[tuple[Any, ...]] = []
        self.tensors: dict[str, dict[str, Any]] = {}
        self.op_index = -1
        self.op_label = ""
        self.live_path = live_path
        self.flushed = 0
        self.seq = 0
        self.next_flush = 0.0


_REC: Recorder | None = None


def active() -> bool:
    """Whether this rank is recording now (ops may skip building block lists when not)."""
    return _REC is not None


def start(trace_id: str, live: bool = False) -> bool:
    """Start recording on this rank (called by ``mg.trace()`` on every rank)."""
    global _REC
    path = None
    if live:
        st = rank_state.get()
        folder = os.path.join(st.rundir, "trace")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, f"rank{st.rank}.jsonl")
        with open(path, "w", encoding="utf-8") as f:  # a fresh file per trace
            f.write(json.dumps({"trace": trace_id}) + "\n")
    _REC = Recorder(trace_id, path)
    from jupyter_mgpu.engine.records import dtensor_trace

    dtensor_trace.install(sys.modules[__name__])  # this module is the sink
    return True


def stop() -> dict[str, Any]:
    """Stop recording; returns ``{"events": [...], "tensors": {...}}`` of this rank."""
    global _REC
    hook = sys.modules.get("jupyter_mgpu.engine.records.dtensor_trace")
    if hook is not None and _REC is not None:
        hook.record_frees()  # while still recording: DTensor pieces whose memory is gone
    rec, _REC = _REC, None
    labels = hook.uninstall() if hook is not None else {}
    if rec is None:
        return {"events": [], "tensors": {}}
    for name, label in labels.items():
        if name in rec.tensors:
            rec.tensors[name]["label"] = label
    _flush(rec)
    return {"events": [_as_dict(e) for e in rec.events], "tensors": rec.tensors}


def begin_op(label: str) -> None:
    """A new op starts: its steps are numbered from 0 (ops run in the same order on every rank)."""
    rec = _REC
    if rec is None:
        return
    _flush(rec)
    rec.op_index += 1
    rec.op_label = label


def end_op() -> None:
    """The op ended: publish its events to the live file (if any)."""
    rec = _REC
    if rec is not None:
        _flush(rec)


def declare(name: str, shape: Iterable[int], itemsize: int, label: str = "") -> None:
    """Name a global tensor the blocks refer to (its shape, bytes per element, a label to draw)."""
    rec = _REC
    if rec is None:
        return
    rec.tensors[name] = {"shape": [int(s) for s in shape], "itemsize": int(itemsize), "label": label or name}


def block(
    name: str, box: Iterable[Iterable[int]], buf: str | None = None
) -> tuple[str, tuple[tuple[int, int], ...], str | None]:
    """A block: tensor ``name``'s global index box ``((start, stop), ...)``; ``buf`` tags a temporary copy."""
    return (name, tuple((int(a), int(b)) for a, b in box), buf)


def record(
    step: int,
    action: str,
    blocks: Iterable[tuple[Any, ...]] = (),
    nbytes: int = 0,
    peer: int | None = None,
    **info: Any,
) -> None:
    """Record one event of the running op on this rank (no-op when tracing is off)."""
    rec = _REC
    if rec is None:
        return
    rec.seq += 1
    now = time.time()
    rec.events.append(
        (rec.op_index, rec.op_label, int(step), action, tuple(blocks), int(nbytes), peer, now, rec.seq, info or None)
    )
    if rec.live_path is not None and now >= rec.next_flush:  # live: publish at most every LIVE_PERIOD s
        rec.next_flush = now + LIVE_PERIOD
        _flush(rec)


def _as_dict(e: tuple[Any, ...]) -> dict[str, Any]:
    op, label, step, action, blocks, nbytes, peer, t, seq, info = e
    out = {
        "rank": rank_state.get().rank,
        "op": op,
        "label": label,
        "step": step,
        "action": action,
        "blocks": [
            {"tensor": n, "box": [list(r) for r in box], **({"buf": buf} if buf else {})} for n, box, buf in blocks
        ],
        "bytes": nbytes,
        "time": t,
        "seq": seq,
    }
    if peer is not None:
        out["peer"] = peer
    if info:
        out.update(info)
    return out


def _flush(rec: Recorder) -> None:
    if rec.live_path is None or rec.flushed >= len(rec.events):
        return
    lines = []
    for e in rec.events[rec.flushed :]:
        d = _as_dict(e)
        if e[4] and any(b[0] in rec.tensors for b in e[4]):
            d["tensors"] = {b[0]: rec.tensors[b[0]] for b in e[4] if b[0] in rec.tensors}
        lines.append(json.dumps(d))
    rec.flushed = len(rec.events)
    with open(rec.live_path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
