"""The collective torch issued (DDP's buckets, FSDP2, DTensor) that a rank on nccl waits in, read from NCCL's
own flight recorder (``torch._C._distributed_c10d._dump_nccl_trace_json``) — what ``issued_collectives``
tells on gloo from the main thread's stillness, told on a GPU from the GPU's own record.

With nccl the main thread rightly sleeps (or spins in a synchronize) while the GPU works through its queue,
so stillness says nothing. The recorder's ``state`` does: ``scheduled`` is enqueued, its GPU work not begun
(behind a busy GPU: not a wait); ``started`` is an NCCL kernel running on the GPU, and one that has not
completed for :data:`NCCL_STUCK_S` waits for a peer. Two facts of torch 2.13's recorder (FlightRecorder.hpp,
FlightRecorderDetail.hpp) shape the rule:

* ``started`` exists only where torch times collectives (``TORCH_NCCL_ENABLE_TIMING=1`` before the group is
  made, or ``ProcessGroup._enable_collectives_timing()``): without a start event every entry stays
  ``scheduled`` until it completes, ``pg_status``'s ``last_started_collective`` stays ``-1``, and nothing here
  is ever named a wait.
* a dump stamps ``time_discovered_started_ns`` on its own copy of an unfinished entry, at the dump: it is the
  reading's time, not the start's. How long a collective has been running is the time since it was first
  seen started, kept across readings (:data:`_seen`); the watch reads on demand, over and over.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

NCCL_STUCK_S = 2.0  # an NCCL kernel started and unfinished this long waits for a peer
Key = tuple[int, int]  # (pg_id, collective_seq_id): a rebuilt group keeps its name under a new id
_seen: dict[Key, float] = {}  # each started collective: the earliest reading that saw it started (epoch s)


def recorder(entries: bool, only_active: bool = True) -> dict[str, Any]:
    """NCCL's recorder as JSON: ``pg_status`` per group and, with ``entries``, its collectives (``only_active``:
    those not completed); ``{}`` where this torch has none (a CPU build) or the dump fails."""
    import torch

    dump = getattr(torch._C._distributed_c10d, "_dump_nccl_trace_json", None)
    if dump is None:
        return {}
    try:
        got = json.loads(dump(includeCollectives=entries, onlyActive=only_active))
    except Exception:  # no nccl group yet, the recorder off, or a dump this code cannot read
        return {}
    return got if isinstance(got, dict) else {}


def timed_and_pending(status: dict[str, Any]) -> bool:
    """Whether a group has a collective enqueued and not completed, and torch times its GPU work (a group
    whose ``last_started_collective`` is ``-1`` has none: its collectives cannot be seen started)."""
    for s in status.values():
        try:
            if int(s.get("last_started_collective", -1)) >= 0 and int(s.get("last_enqueued_collective", -1)) > int(
                s.get("last_completed_collective", -1)
            ):
                return True
        except (AttributeError, TypeError, ValueError):
            continue
    return False


def stuck(dump: dict[str, Any], now: float, seen: dict[Key, float]) -> tuple[dict[str, Any], float] | None:
    """The oldest collective of ``dump`` whose GPU work started and has not completed for :data:`NCCL_STUCK_S`
    by ``now``, and when it was first seen started; ``seen`` keeps that across readings (only the collectives
    started in this reading stay in it). Retired entries (torch gave up on them) and p2p ones are left out."""
    running: dict[Key, dict[str, Any]] = {}
    first: dict[Key, float] = {}  # local: the sampler's and the guard's readings may overlap
    for e in dump.get("entries") or ():
        if not isinstance(e, dict) or e.get("state") != "started" or e.get("retired") or e.get("is_p2p"):
            continue
        try:
            key = (int(e.get("pg_id", -1)), int(e.get("collective_seq_id") or 0))
            at = (int(e.get("time_discovered_started_ns") or 0) or int(e.get("time_created_ns") or 0)) / 1e9
        except (TypeError, ValueError):
            continue
        running[key], first[key] = e, min(seen.get(key, at), at)
    seen.update(first)
    for key in set(seen) - set(running):
        seen.pop(key, None)
    waited = [k for k in running if now - first[k] >= NCCL_STUCK_S]
    if not waited:
        return None
    key = min(waited, key=lambda k: (int(running[k].get("time_created_ns") or 0), k[1]))
    return running[key], first[key]


def _config_ranks(dump: dict[str, Any], name: str) -> list[int]:
    """The group's global ranks as the dump's ``pg_config`` writes them (``"[0, 1]"``), or []."""
    try:
        return [int(r) for r in json.loads((dump.get("pg_config") or {})[name]["ranks"])]
    except (KeyError, TypeError, ValueError):
        return []


def waiting(
    dump: dict[str, Any],
    now: float,
    seen: dict[Key, float],
    describe: Callable[[dict[str, Any]], str],
    ranks_of: Callable[[str], list[int] | None],
) -> dict[str, Any] | None:
    """``issued_collectives.waiting``'s answer from an NCCL dump: ``state`` ``collective``, ``since`` (first
    seen started), ``collective`` (``all_reduce #8``), ``call``, ``group``, ``arrival``, ``issued_by``; or
    None. ``describe`` writes an entry's input, ``ranks_of`` a live group's ranks (the dump's own else)."""
    found = stuck(dump, now, seen)
    if found is None:
        return None
    entry, since = found
    op = str(entry.get("profiling_name") or "collective").split(":", 1)[-1]
    name = str((entry.get("process_group") or [""])[0])
    seq = int(entry.get("collective_seq_id") or 0)
    return {
        "state": "collective",
        "since": since,
        "collective": f"{op} #{seq}",
        "call": f"{op} {describe(entry)} issued by torch".replace("  ", " "),
        "group": ranks_of(name) or _config_ranks(dump, name),
        "arrival": [name, seq],  # the same on every rank of the group
        "issued_by": "torch",
    }


def waiting_now(
    now: float, describe: Callable[[dict[str, Any]], str], ranks_of: Callable[[str], list[int] | None]
) -> dict[str, Any] | None:
    """:func:`waiting` on this rank's live recorder: its ``pg_status`` first (cheap), its unfinished
    collectives only when a timed group has one pending."""
    if not timed_and_pending(recorder(entries=False).get("pg_status") or {}):
        _seen.clear()
        return None
    return waiting(recorder(entries=True), now, _seen, describe, ranks_of)
