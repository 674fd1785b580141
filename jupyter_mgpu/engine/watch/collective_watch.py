"""Each collective this rank's code calls, watched: which one the rank waits in, since when, from which
line of the user's code, and the call's fingerprint compared with the other ranks' before it runs.

torch.distributed's collectives (``all_reduce``, ``broadcast``, ``reduce``, ``all_gather``(``_into_tensor``),
``reduce_scatter``(``_tensor``), ``scatter``, ``gather``, ``all_to_all``(``_single``), ``barrier``, the
``*_object`` ones) and ``send``/``recv`` are wrapped once at engine start (:func:`install`), in
``torch.distributed`` and ``distributed_c10d``. On the main thread a call

1. takes its number in its group as torch's flight recorder numbers it (``all_reduce #7``: the group's 7th
   collective, whoever issued it: ``collective_numbers.py``) and its fingerprint: what must agree;
2. writes both, with the user's line, to this rank's slot of the host's table (``engine/watch/collective_table.py``)
   and compares the fingerprints the group's other ranks on this host wrote for the same number: a rank
   that called something else makes this call raise :class:`CollectiveMismatchError` at once, naming each
   rank's call and line — what ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` checks, with no collective of its own;
3. marks the rank as waiting in it until it returns (:func:`where`), for the kernel's hang watch
   (``session/hang_watch.py``) and ``mg.where``, read by the telemetry sampler and the guard thread.

A collective called inside another (``all_gather_object`` runs ``all_gather``) counts as the outer one.
Asynchronous calls are numbered and compared; their wait (``work.wait()``) is not watched. Point-to-point
``send``/``recv`` are watched but not numbered. ``set_checks(False)`` turns the comparison off.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from jupyter_mgpu.engine import rank_traceback
from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.watch import collective_numbers, issued_collectives, peer_collectives
from jupyter_mgpu.engine.watch.collective_calls import (
    POINT_TO_POINT,
    SHAPED,
    TYPED,
    fingerprint,
    message_bytes,
    mismatch_text,
    root,
)
from jupyter_mgpu.engine.watch.collective_table import CollectiveTable, crc
from jupyter_mgpu.engine.watch.main_stack import StackLine, lines_of, main_stack


class CollectiveMismatchError(RuntimeError):
    """Ranks of one group called different collectives at the same point; raised before it runs."""


WATCHED = (
    *SHAPED,
    *TYPED,
    "barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    *POINT_TO_POINT,
)

MISMATCH_WAIT_S = 0.2  # how long a rank that found a mismatch waits for the others' records, to name them all
_current: dict[str, Any] | None = None  # the collective the main thread waits in now
_last_end = 0.0
_ranks: dict[tuple[int, str], list[int]] = {}
_table: CollectiveTable | None = None
_checks = True
_nested = threading.local()
_nested.depth = 0  # the main thread's: only it is watched
_dist: Any = None  # torch.distributed, once installed
_on_gpu = False  # nccl: collectives finish on the GPU after the call returns
_pending: tuple[dict[str, Any], Any] | None = None  # nccl: the last collective issued and its work
# the user's async_op=True collectives, by op: the line that issued the last of each (its wait() is elsewhere)
_async_lines: dict[str, tuple[str, float]] = {}
_main_ident: int | None = None
_originals: dict[str, Any] = {}


def set_checks(on: bool) -> None:
    """Compare fingerprints across ranks (the default) or not; waiting is watched either way."""
    global _checks
    _checks = bool(on)


@functools.lru_cache(maxsize=4096)
def _kind(filename: str) -> int:
    """0: ours or runpy's, 1: a library's, 2: the user's (a cached look at a frame's file)."""
    if rank_traceback.is_internal(filename):
        return 0
    return 2 if rank_traceback.is_users(filename) else 1


@functools.lru_cache(maxsize=8192)
def _place_of(code: Any, line: int) -> str:
    f = {"file": rank_traceback.display_path(code.co_filename), "line": line, "name": code.co_name}
    return rank_traceback.place(f)


def _user_line(lines: Iterable[StackLine]) -> str:
    """How a message names the innermost line of the user's code in ``lines`` (innermost first)."""
    first = None
    for at in lines:
        kind = _kind(at.code.co_filename)
        if kind == 2:
            return _place_of(at.code, at.line)
        if first is None and kind:
            first = at
    return "an unknown line" if first is None else _place_of(first.code, first.line)


def _group_facts(dist: Any, group: Any, generation: int) -> tuple[str, list[int], Any] | None:
    """The group's name (the same on every rank), global ranks and process group; None when this rank is
    not in it."""
    pg = group if group is not None else dist.GroupMember.WORLD
    if pg is None or pg is dist.GroupMember.NON_GROUP_MEMBER:
        return None
    name = str(getattr(pg, "group_name", "0"))
    key = (generation, name)
    if key not in _ranks:
        _ranks[key] = list(dist.get_process_group_ranks(pg))
    return name, _ranks[key], pg


def _calls_of(
    me: int, record: dict[str, Any], ranks: list[int], group: str, n: int, gen: int
) -> dict[int, dict[str, Any]]:
    """Every rank's record of call ``n`` on the host's table, waiting up to ``MISMATCH_WAIT_S`` for the
    group's ranks that have not written theirs yet (those on other hosts never do), so that a mismatch
    names each rank's call rather than the first two."""
    assert _table is not None
    deadline = time.monotonic() + MISMATCH_WAIT_S
    calls = {me: record}
    while True:
        for p in ranks:
            if p not in calls:
                theirs = _table.record(p, group, n, gen)
                if theirs is not None:
                    calls[p] = theirs
        if len(calls) == len(ranks) or time.monotonic() > deadline:
            return calls
        time.sleep(0.005)


def _begin(op: str, args: dict[str, Any], caller: Any) -> dict[str, Any] | None:
    """Number, fingerprint, compare and mark the call; raises CollectiveMismatchError on a disagreement."""
    dist = _dist
    st = rank_state.STATE
    if st is None or dist is None or not dist.is_initialized():
        return None
    gen = st.pg_generation
    facts = _group_facts(dist, args.get("group"), gen)
    if facts is None:
        return None
    group, ranks, pg = facts
    line = _user_line(lines_of(caller))
    info: dict[str, Any] = {"op": op, "group": ranks, "line": line, "since": time.time(), "n": None}
    if op in POINT_TO_POINT:
        peer = root(dist, args, POINT_TO_POINT[op], args.get("group"))
        info["call"] = f"{op} {'to' if op == 'send' else 'from'} " + ("any rank" if peer is None else f"rank {peer}")
        if not isinstance(peer, str):  # a str: a group rank torch could not map
            peer = None if peer is None else int(peer)
            if peer is not None:
                info["group"] = sorted({st.rank, peer})
            info["p2p"] = [op, peer, int(args.get("tag") or 0)]  # peer None: from any; the hang watch pairs them
        return info
    n = collective_numbers.begin(pg, (gen, group))  # torch's number for it: C++-issued ones count too
    fp, words = fingerprint(op, args, dist)
    info.update(n=n, g=group, gen=gen, fp=fp, call=words, pg=pg)
    if _checks and _table is not None:
        record = {"call": words, "line": line}
        _table.write(st.rank, group, n, gen, fp, words, line)
        mine = crc(fp)
        if any(_table.differs(p, group, n, gen, mine) for p in ranks if p != st.rank):
            raise CollectiveMismatchError(
                mismatch_text(n, ranks, _calls_of(st.rank, record, ranks, group, n, gen), st.world_size)
            )
        if (gen, group) in collective_numbers.unseen:  # torch issues collectives here too: ask the peers
            tensor = args.get(SHAPED.get(op) or TYPED.get(op, ""))
            backward = _in_backward(lines_of(caller))
            info["peers"] = {"op": op, "tensor": tensor, "backward": backward, "fp": fp, **record}
    return info


def _check_peers(info: dict[str, Any], waits: bool) -> None:
    """A peer with no record of this call may be in one of torch's at its number: compare before joining."""
    st = rank_state.STATE
    assert _table is not None and st is not None
    key = (info["g"], info["n"], info["gen"])
    calls = peer_collectives.differing(_table, st.rank, key, info["group"], mine := info.pop("peers"), waits)
    collective_numbers.checked((info["gen"], info["g"]), clean=calls is None and not mine.get("asked"))
    if calls is not None:  # with the records of the group's other ranks, as a mismatch among Python calls has
        calls = {**_calls_of(st.rank, calls[st.rank], info["group"], *key[:2], key[2]), **calls}
        raise CollectiveMismatchError(mismatch_text(info["n"], info["group"], calls, st.world_size))


def _wrap(op: str, original: Any) -> Any:
    params = inspect.signature(original).parameters
    names = list(params)
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}

    @functools.wraps(original)
    def watched(*args: Any, **kwargs: Any) -> Any:
        global _current, _last_end
        if threading.get_ident() != _main_ident or _nested.depth:
            return original(*args, **kwargs)
        bound = {**defaults, **dict(zip(names, args)), **kwargs}
        try:
            info = _begin(op, bound, sys._getframe(1))
        except CollectiveMismatchError:
            collective_numbers.left_unrun()  # written to the table, never run
            raise
        except Exception:  # the watch never stops a collective it could not read
            info = None
        waits = info is not None and not bound.get("async_op")
        if info is not None and not waits:
            _async_lines[op] = (info["line"], info["since"])
        pg = info.pop("pg", None) if info is not None else None
        _nested.depth = 1
        if waits:
            _current = info
        entered = time.time_ns()
        try:
            if info is not None and "peers" in info:
                _check_peers(info, waits)
            if waits and info is not None and _on_gpu and "async_op" in bound:
                return _issue_and_keep(original, bound, info)
            return original(*args, **kwargs)
        except BaseException:
            collective_numbers.raised(pg, info)  # before the backend ran it? then its record is stale
            raise
        finally:
            _nested.depth = 0
            if pg is not None and info is not None:
                collective_numbers.end(pg, (info["gen"], info["g"]))
            if waits:
                _current, _last_end = None, time.time()
            log = getattr(rank_state.STATE, "collective_log", None)
            if log is not None and info is not None:  # mg.profile(): when this rank entered and left it
                log.append(_logged(info, bound, entered))

    watched.__wrapped__ = original
    return watched


def _logged(info: dict[str, Any], args: dict[str, Any], entered: int) -> dict[str, Any]:
    """What ``mg.profile()`` keeps of a collective this rank ran: which, from where, its bytes, when."""
    out = {k: info.get(k) for k in ("op", "n", "g", "gen", "call", "line", "group")}
    out.update(
        bytes=message_bytes(info["op"], args, len(info.get("group") or ())), enter_ns=entered, exit_ns=time.time_ns()
    )
    return out


def _issue_and_keep(original: Any, bound: dict[str, Any], info: dict[str, Any]) -> None:
    """nccl: a blocking collective returns once it is queued on the GPU, and the rank later waits at a
    sync (``.item()``). Issue it as torch's blocking call does (asynchronously, then ``wait()``) and keep
    its work: until the GPU finishes it the rank still counts as waiting in it (:func:`where`)."""
    global _pending
    work = original(**{**bound, "async_op": True})
    if work is not None:
        work.wait()
        _pending = (info, work)


def install(rundir: str, world_size: int) -> None:
    """Wrap torch.distributed's collectives (idempotent) and open the host's table."""
    global _table, _dist, _main_ident, _on_gpu
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    _dist, _main_ident = dist, threading.main_thread().ident
    _on_gpu = getattr(rank_state.STATE, "backend", None) == "nccl"
    if _table is None:
        _table = CollectiveTable(rundir, world_size)
    for op in (*WATCHED, *collective_numbers.COUNTED):
        original = getattr(c10d, op, None)
        if original is None or op in _originals:
            continue
        _originals[op] = original
        ours = (
            collective_numbers.counting(original)
            if op in collective_numbers.COUNTED or op in POINT_TO_POINT
            else original
        )
        ours = _wrap(op, ours) if op in WATCHED else ours
        setattr(c10d, op, ours)
        if getattr(dist, op, None) is original:
            setattr(dist, op, ours)


def main_place() -> tuple[str, bool]:
    """The user's line the main thread is at, and whether it is inside ``backward()`` (for a peer's check)."""
    lines = main_stack()
    return (_user_line(lines) if lines else "an unknown line"), _in_backward(lines)


JOIN_HINT = (
    "a gradient bucket of DDP's, in backward(); ranks that run out of data at different steps: "
    "see torch.distributed.algorithms.Join"
)


def _in_backward(lines: Iterable[StackLine]) -> bool:
    """Whether the main thread is inside autograd's backward pass."""
    return any(
        at.code.co_name in ("_engine_run_backward", "backward") and "torch" in at.code.co_filename for at in lines
    )


def _importing(lines: tuple[StackLine, ...]) -> tuple[str, tuple[StackLine, ...]] | None:
    """The module the main thread's outermost import is loading, and the lines from the statement that
    started it, if it is inside one (a first import of a big package takes seconds: the live status line
    says so)."""
    outermost = max((i for i, at in enumerate(lines) if at.importing), default=None)
    return None if outermost is None else (lines[outermost].importing or "", lines[outermost + 1 :])


def stack() -> list[str]:
    """The user's frames the main thread is in now, outermost first (``line 3 of the cell``, ...)."""
    frames = []
    for at in main_stack():
        name = at.code.co_filename
        if rank_traceback.is_users(name):
            f = {"file": rank_traceback.display_path(name), "line": at.line, "name": at.code.co_name}
            frames.append(rank_traceback.place(f))
    return frames[::-1]


def where(st: Any) -> dict[str, Any]:
    """What this rank does now: ``state`` (``collective``, ``running`` or ``idle``), ``since`` (epoch s),
    ``collective`` (``barrier #7``), ``line``, and for a collective its group, key and fingerprint.
    A rank at a pdb prompt says ``debugging``: neither busy nor stuck, and not done."""
    dbg = getattr(st, "debugging", None)
    if dbg is not None:
        return {"state": "debugging", "since": dbg["since"], "collective": None, "line": dbg.get("line")}
    cur = _current
    if cur is None and _pending is not None:  # nccl: a collective the GPU has not finished
        try:
            unfinished = not _pending[1].is_completed()
        except Exception:
            unfinished = False
        cur = _pending[0] if unfinished else None
    if cur is not None:
        label = f"{cur['op']} #{cur['n']}" if cur.get("n") else cur["call"]
        out = {"state": "collective", "since": cur["since"], "collective": label, "call": cur["call"]}
        out.update(line=cur["line"], group=cur["group"])
        if cur.get("p2p"):
            out["p2p"] = cur["p2p"]
        if cur.get("n"):
            out.update(key=[cur["g"], cur["n"], cur["gen"]], fp=cur["fp"])
        return out
    if getattr(st, "call_depth", 0):
        lines = main_stack()
        line = _user_line(lines) if lines else None
        issued = issued_collectives.waiting()  # one torch issued from C++ (DDP's buckets, FSDP2, DTensor)
        if issued is not None:
            op = issued["call"].split(" ", 1)[0]
            line_at, when = _async_lines.get(op, ("", 0.0))
            if when >= (st.call_started or 0.0) > 0 and not _in_backward(lines):  # the user's own, waited for
                issued["call"] = issued["call"].replace(
                    "issued by torch", f"issued at {line_at} with async_op=True, waited for"
                )
            elif issued["call"].startswith("all_reduce") and _in_backward(lines):
                issued["call"] += f" ({JOIN_HINT})"
            return {**issued, "line": line}
        out = {"state": "running", "since": max(st.call_started or 0.0, _last_end), "collective": None, "line": line}
        importing = _importing(lines)
        if importing:  # the line that imports, not one inside the module being run
            out.update(importing=importing[0], line=_user_line(importing[1]))
        return out
    return {"state": "idle", "since": st.call_ended or 0.0, "collective": None, "line": None}


def describe(where: dict[str, Any] | None, now: float) -> str | None:
    """``waiting in barrier #7 for 44 s``, ``waiting in all_reduce #8 (DDP bucket) for 12 s, from line 4 of the
    cell``, ``running line 3 of the cell for 45 s`` or ``at a pdb prompt at line 3 of the cell for 9 s``;
    None when idle. The live status line and the sidebar say a rank's activity in these words."""
    if not where or where.get("state") not in ("collective", "running", "debugging"):
        return None
    seconds = max(0.0, now - float(where.get("since") or now))
    if where["state"] == "debugging":
        return f"at a pdb prompt at {where.get('line') or 'an unknown line'} for {seconds:.0f} s"
    if where["state"] == "collective" and where.get("issued_by") == "torch":  # from C++, on the user's behalf
        by = "DDP bucket" if JOIN_HINT in str(where.get("call")) else "issued by torch"
        return f"waiting in {where.get('collective')} ({by}) for {seconds:.0f} s, from {where.get('line')}"
    if where["state"] == "collective":
        return f"waiting in {where.get('collective')} for {seconds:.0f} s"
    running = f"running {where.get('line') or 'its code'} for {seconds:.0f} s"
    return f"{running}, importing {where['importing']}" if where.get("importing") else running
