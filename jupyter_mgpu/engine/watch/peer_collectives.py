"""Before this rank joins a collective, its peers on the host that have no record of it: are they inside a
collective torch issued from C++ at that number, and is it the same one?

gloo joins whatever two ranks run at the same point of a group: a DDP gradient bucket of 20 floats on rank 0
against the user's ``dist.all_reduce`` of 4 on rank 1 aborts rank 1's process (gloo's size check), and one of
the same size is silently summed with it. The Python-level watch compares calls through the host's table
(``collective_table.py``), where torch's own collectives write nothing. So on a group that has run
collectives the watch did not see (``collective_numbers.unseen``), a call whose peers have not written their
record waits a moment for it, then asks each such peer's guard (``collective-at``, answered from its flight
recorder even while its main thread is blocked) what it runs at that number, up to :data:`WAIT_S` for a peer
not there yet. A
different op, dtype or shape — or a DDP gradient bucket against a call made outside ``backward()`` — is
returned as each rank's call and line, and the caller raises before joining.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.watch import collective_numbers, issued_collectives
from jupyter_mgpu.engine.watch.collective_table import CollectiveTable, crc

WAIT_S = 5.0  # the longest a call waits for a peer to reach its number before joining unchecked
ASK_AFTER_S = 0.02  # a peer that calls through Python writes its record within this, as a rule: ask after
ASK_EVERY_S = 0.01
POLL_S = 5e-5
COMMAND = "collective-at"
BUCKET = "a gradient bucket of DDP's, in backward()"
# the Python call -> the op torch's recorder names for it (gloo runs reduce_scatter_tensor as an all_reduce)
RECORDED_AS = {
    "all_gather_into_tensor": {"all_gather"},
    "reduce_scatter": {"reduce_scatter", "all_reduce"},
    "reduce_scatter_tensor": {"reduce_scatter", "all_reduce", "_reduce_scatter_base"},
    "all_to_all_single": {"all_to_all"},
}


# set at the engine's start (engine/startup/runtime.py), which knows the guards: ask a peer's guard a
# ``collective-at`` request, and count this process's releases (collective_guard.release_count)
def _unreachable(rank: int, body: str) -> dict[str, Any] | None:
    return None


ask_peer: Callable[[int, str], dict[str, Any] | None] = _unreachable
releases: Callable[[], int] = int  # 0 until set
SIZED = {"all_reduce", "broadcast", "reduce"}  # every rank passes the same shape
OBJECTS = {"all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list"}


def answer(body: str, place: Callable[[], tuple[str, bool]]) -> dict[str, Any]:
    """The guard's ``collective-at`` request (``{"group", "gen", "n"}``): how many collectives this rank has
    issued on the group, and when it has reached ``n``, the recorder's entry for it and the user's line the
    main thread is at (``place``: the line, and whether it is inside ``backward()``)."""
    req = json.loads(body)
    st = rank_state.STATE
    pg = _group_named(str(req.get("group")))
    if st is None or pg is None or int(req.get("gen", -1)) != st.pg_generation:
        return {"stale": True}
    n = int(req.get("n", 0))
    count = collective_numbers.next_number(pg, (st.pg_generation, str(req["group"]))) - 1
    out: dict[str, Any] = {"count": count}
    if count >= n:
        entry = _entry(str(req["group"]), n)
        if entry is not None:
            op = str(entry.get("profiling_name") or "").split(":", 1)[-1]
            out["entry"] = {
                "op": op,
                "inputs": list(zip(entry.get("input_dtypes") or (), entry.get("input_sizes") or ())),
            }
            out["entry"]["call"] = f"{op} {issued_collectives.describe(entry)}".strip() + " issued by torch"
        out["line"], out["backward"] = place()
    return out


def _group_named(name: str) -> Any:
    try:
        from torch.distributed import distributed_c10d as c10d

        return next((pg for pg, pg_name in c10d._world.pg_names.items() if pg_name == name), None)
    except Exception:
        return None


def _entry(group: str, n: int) -> dict[str, Any] | None:
    """The flight recorder's entry of collective ``n`` on the live group named ``group``."""
    found = [
        e
        for e in issued_collectives.recorder(only_active=True, entries=True).get("entries") or ()
        if str((e.get("process_group") or ("",))[0]) == group and int(e.get("collective_seq_id") or 0) == n
    ]
    return max(found, key=lambda e: int(e.get("pg_id") or 0)) if found else None


def agrees(op: str, tensor: Any, in_backward: bool, theirs: dict[str, Any], their_backward: bool) -> bool:
    """Whether this rank's Python call ``op`` on ``tensor`` and a peer's recorded collective can be one."""
    if their_backward and theirs["op"] == "all_reduce" and not in_backward:
        return False  # DDP's bucket against a call of the user's outside backward(): the ranks went apart
    if op in OBJECTS:
        return True  # their nested collectives' sizes differ by design
    if theirs["op"] not in RECORDED_AS.get(op, {op}):
        return False
    if op not in SIZED or tensor is None or not theirs.get("inputs"):
        return True
    dtype, size = theirs["inputs"][0]
    kind = issued_collectives.dtype_of(dtype)
    return bool(kind == getattr(tensor, "dtype", None) and list(size) == list(getattr(tensor, "shape", ())))


def differing(
    table: CollectiveTable,
    me: int,
    key: tuple[str, int, int],
    ranks: list[int],
    mine: dict[str, Any],
    wait: bool,
) -> dict[int, dict[str, Any]] | None:
    """Each rank's call (``{"call", "line"}``) when a peer runs something else at this number, else None.
    ``key`` is (group, number, generation); ``mine`` has this rank's ``call``, ``line``, ``fp``, ``op``,
    ``tensor`` and ``backward``. With ``wait`` (a blocking call), peers not at the number yet are awaited up
    to :data:`WAIT_S`; a release of this rank (the hang watch's, the stop button's) ends the wait. Sets
    ``mine["asked"]`` when a peer had to be asked (its record was not there within :data:`ASK_AFTER_S`)."""
    group, n, gen = key
    body = json.dumps({"group": group, "gen": gen, "n": n})
    missing = [p for p in ranks if p != me]
    start = time.monotonic()
    next_ask, released = start + ASK_AFTER_S, releases()
    while missing:
        for p in list(missing):  # a peer's own Python call: the table says whether it agrees
            theirs = table.fingerprint(p, group, n, gen)
            if theirs is not None:
                missing.remove(p)
                if table.differs(p, group, n, gen, crc(mine["fp"])):
                    return _calls(me, mine, {p: table.record(p, group, n, gen) or {}})
        now = time.monotonic()
        if missing and now >= next_ask:
            mine["asked"] = True  # a peer's record was late: it may be in one of torch's collectives
            for p in list(missing):
                reply = ask_peer(p, body)
                if reply is None or reply.get("stale"):  # on another host, or gone: nothing to ask
                    missing.remove(p)
                elif int(reply.get("count", -1)) >= n and table.fingerprint(p, group, n, gen) is None:
                    missing.remove(p)
                    entry = reply.get("entry")
                    if entry and not agrees(mine["op"], mine["tensor"], mine["backward"], entry, reply["backward"]):
                        call = entry["call"] + (f" ({BUCKET})" if reply["backward"] else "")
                        return _calls(me, mine, {p: {"call": call, "line": reply.get("line")}})
            if not wait or now - start > WAIT_S:  # an async call looks once: waiting could deadlock it
                return None
            next_ask = time.monotonic() + ASK_EVERY_S
        if releases() != released:
            raise RuntimeError(f"Connection closed by peer: rank {me} was released while waiting for {group} #{n}")
        time.sleep(POLL_S if now - start < ASK_AFTER_S else 0.001)
    return None


def _calls(me: int, mine: dict[str, Any], theirs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {me: {"call": mine["call"], "line": mine["line"]}, **theirs}
