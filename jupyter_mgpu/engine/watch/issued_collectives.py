"""The collectives torch issues from C++ on this rank's behalf (DDP's gradient buckets, FSDP2's all-gathers,
DTensor's redistributes), seen through c10d's flight recorder: the one this rank waits in, when it waits.

The Python-level watch (``collective_watch.py``) sees only what the user's code calls through
``torch.distributed``. For the rest, the flight recorder (on from the engine's start: ``TORCH_FR_BUFFER_SIZE``)
keeps each group's last enqueued and last completed collective. A rank waits in one when a collective of
a group is enqueued and not completed *and* its main thread has used no CPU for :data:`STILL_S` — a rank
that computes with a collective in flight (DDP overlapping its buckets with the backward pass) is busy,
not waiting. Read on demand (the telemetry sampler's ``where``, the guard's): a few microseconds, and
nothing at all while the main thread computes. gloo only: with nccl a GPU's queued kernels keep
collectives in flight while the main thread rightly sleeps, which this rule would take for a wait; there
``nccl_records.py`` reads NCCL's own recorder instead (a collective started on the GPU and unfinished).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.watch import nccl_records

STILL_S = 1.0  # the main thread used no CPU for this long: it waits
_cpu: list[float] = [-1.0, 0.0]  # the main thread's CPU ticks last read, and when they last moved


def _main_thread_ticks() -> float | None:
    """The main thread's user + system CPU time in clock ticks (Linux), or None. The main thread is the
    process's first (its thread id is the pid): an engine forked from the supervisor's thread keeps that
    thread's id in ``threading.main_thread()``."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return float(fields[11]) + float(fields[12])  # utime, stime: the 14th and 15th fields
    except (OSError, IndexError, ValueError):
        return None


def still_for(now: float | None = None) -> float:
    """Seconds the main thread has used no CPU (0 while it computes, or where it cannot be told)."""
    now = time.time() if now is None else now
    ticks = _main_thread_ticks()
    if ticks is None:
        return 0.0
    if ticks != _cpu[0]:
        _cpu[0], _cpu[1] = ticks, now
    return now - _cpu[1]


def recorder(only_active: bool, entries: bool) -> dict[str, Any]:
    """c10d's flight recorder as JSON: ``pg_status`` per group, and with ``entries`` its collectives
    (``only_active``: those not finished); ``{}`` where this torch has none."""
    import torch

    dump = torch._C._distributed_c10d._dump_fr_trace_json  # type: ignore[attr-defined]  # not in torch's stubs
    try:
        return dict(json.loads(dump(entries, only_active)))
    except Exception:  # the recorder is off
        return {}


def dump_request(body: str) -> dict[str, Any]:
    """The guard's ``fr-dump`` request (``mg.where(dump=...)``): this rank's flight-recorder dump as torch
    writes it for ``torchfrtrace`` (a pickle, base64 in the reply: the notebook writes the file, whatever
    host this rank is on), stack traces included. Answered from the guard thread, so a stuck rank answers."""
    import base64

    import torch

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.STATE
    rank = st.rank if st is not None else None
    if not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return {"rank": rank, "error": "the flight recorder is off (TORCH_FR_BUFFER_SIZE was unset at the start)"}
    dump = torch._C._distributed_c10d._dump_fr_trace  # type: ignore[attr-defined]  # not in torch's stubs
    return {"rank": rank, "dump": base64.b64encode(_with_group_names(dump(True, True, False))).decode()}


def _with_group_names(raw: bytes) -> bytes:
    """The dump as ``torchfrtrace`` can read it: the live groups' collectives only (a group rebuilt after a
    release keeps its name), and each live group's config under the name its entries carry (for gloo, torch
    2.13 records the config before the group is named: ``pg_config`` ``{"": ...}`` against entries of group
    ``"0"``, and ``torchfrtrace`` then fails to pair the entries with their group)."""
    import pickle

    from torch.distributed import distributed_c10d as c10d

    data = pickle.loads(raw)
    # a rebuilt group keeps its name under a new id: only the newest group of each name is alive, and the
    # collectives of the ones before it (abandoned by a release) would be paired with its own
    newest: dict[str, int] = {}
    for e in data.get("entries") or ():
        name = str((e.get("process_group") or ("",))[0])
        newest[name] = max(newest.get(name, -1), int(e.get("pg_id", -1)))
    data["entries"] = [
        e
        for e in data.get("entries") or ()
        if int(e.get("pg_id", -1)) == newest[str((e.get("process_group") or ("",))[0])]
    ]
    config = {k: v for k, v in (data.get("pg_config") or {}).items() if k}
    for pg, name in c10d._world.pg_names.items():
        if name not in config:
            desc = getattr(pg, "group_desc", "") or ("default_pg" if pg is c10d._world.default_pg else "")
            config[name] = {"name": name, "desc": desc, "ranks": str(c10d.get_process_group_ranks(pg))}
    data["pg_config"] = config
    return pickle.dumps(data)


def dtype_of(name: str) -> Any:
    """The torch dtype of a c10 scalar type's name as the recorder writes it (``Float``, ``BFloat16``), or None."""
    import torch

    kind = getattr(torch, str(name).lower(), None)
    return kind if isinstance(kind, torch.dtype) else None


def _group_ranks(name: str) -> list[int] | None:
    """The global ranks of the process group torch named ``name`` (its ``group_name``)."""
    try:
        from torch.distributed import distributed_c10d as c10d

        for pg, pg_name in c10d._world.pg_names.items():
            if pg_name == name:
                return list(c10d.get_process_group_ranks(pg))
    except Exception:
        pass
    return None


def describe(entry: dict[str, Any]) -> str:
    """``float32[1010]``: the collective's input, as the Python-level watch writes one."""
    parts = []
    for size, dtype in zip(entry.get("input_sizes") or (), entry.get("input_dtypes") or ()):
        kind = dtype_of(dtype)
        name = str(kind).removeprefix("torch.") if kind is not None else str(dtype)
        parts.append(f"{name}[{', '.join(str(x) for x in size)}]")
    return ", ".join(parts)


def waiting(now: float | None = None) -> dict[str, Any] | None:
    """The collective torch issued that this rank waits in now — ``state`` ``collective``, ``since``,
    ``collective`` (``all_reduce #8``), ``call``, ``group`` (its global ranks), ``arrival`` (the group's name
    and torch's number of the collective: ranks in the same one are in it together), ``issued_by``
    ``torch`` — or None (its main thread computes, or no collective is in flight)."""
    now = time.time() if now is None else now
    st = rank_state.STATE
    if st is None:
        return None
    if st.backend == "nccl":  # a GPU's queued kernels keep nccl's collectives in flight while the main thread
        return nccl_records.waiting_now(now, describe, _group_ranks)  # rightly sleeps: NCCL's own record judges
    if still_for(now) < STILL_S or not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return None
    status = recorder(only_active=True, entries=False).get("pg_status") or {}
    pending = {
        pg
        for pg, s in status.items()
        if int(s.get("last_enqueued_collective", -1)) > int(s.get("last_completed_collective", -1))
    }
    if not pending:
        return None
    active = [
        e
        for e in recorder(only_active=True, entries=True).get("entries") or ()
        if str(e.get("pg_id")) in pending and not e.get("retired")  # pg_status is by id: a rebuilt group has a new one
    ]
    if not active:
        return None
    entry = min(active, key=lambda e: int(e.get("collective_seq_id") or 0))
    op = str(entry.get("profiling_name") or "collective").split(":", 1)[-1]
    group = entry.get("process_group") or ["", ""]
    created = int(entry.get("time_created_ns") or 0) / 1e9
    return {
        "state": "collective",
        "since": max(created, _cpu[1]),
        "collective": f"{op} #{entry.get('collective_seq_id')}",
        "call": f"{op} {describe(entry)} issued by torch".replace("  ", " "),
        "group": _group_ranks(str(group[0])) or [],
        "arrival": [str(group[0]), int(entry.get("collective_seq_id") or 0)],  # the same on every rank of it
        "issued_by": "torch",
    }
