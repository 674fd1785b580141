"""Busy is not hung: while a call runs, decide from what every rank does (``engine/watch/collective_watch.py``,
read from the telemetry the ranks publish) whether the ranks are stuck, and say who is where.

- **Mismatch**: ranks wait in the same numbered collective of one group with different fingerprints
  (the ranks on one host already refuse that before it runs; across hosts it is seen here): named at once.
- **Hang**: a rank waits in a collective, and every rank of its group either waits in one too, with no
  change for ``STILL_S`` seconds, or has finished the call (or waits for such a rank, in turn): named
  then. A rank that runs Python or a C++ op is busy, never hung, however long; so are ranks that all
  wait in the very same collective, and a send whose recv waits on the other rank (a large message).

Either way the watch releases the stuck ranks (``engine/watch/collective_guard.py``), as the stop button
does, and keeps the report for the error the call then raises; the session rebuilds the group. While a
collective has waited ``STATUS_AFTER_S`` seconds, or a rank has been importing a module for two (a first
``import torch.distributed.tensor`` on a loaded machine), it also keeps a live status line in the cell,
which goes when the call ends. :func:`diagnose` is the pure decision; :class:`HangWatch` drives it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.engine.watch import collective_watch
from jupyter_mgpu.errors import rank_list
from jupyter_mgpu.init_options import STATUS_AFTER_S
from jupyter_mgpu.session.stack_tree import StackTree, rank_words
from jupyter_mgpu.wait_line import SAID_AFTER, WaitLine

STILL_S = 2.0  # no change for this long, with every rank of the group blocked or done: stuck
POLL_S = 0.25
TREE_PAST = 4  # a hang with more ranks involved than this also draws their stacks as one tree
STALE_S = 2.0  # a rank whose last sample is older than this is not judged (it may be busy in C++)


@dataclass
class Diagnosis:
    """What :func:`diagnose` found: ``kind`` (``mismatch`` or ``hang``), the ranks to release, the words."""

    kind: str
    release: list[int]
    text: str
    tree: str = ""  # past TREE_PAST ranks involved: their stacks as one tree, drawn under the error's sentence


def _waits(w: dict[str, Any] | None) -> bool:
    return bool(w) and w.get("state") == "collective"  # type: ignore[union-attr]


def _said(w: dict[str, Any]) -> str:
    return f"{w.get('call') or w.get('collective')} at {w.get('line') or 'an unknown line'}"


def _mismatch(where: dict[int, dict[str, Any]]) -> Diagnosis | None:
    by_key: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for r, w in where.items():
        if _waits(w) and w.get("key"):
            by_key.setdefault(tuple(w["key"]), {})[r] = w
    for (group, number, _gen), calls in sorted(by_key.items(), key=lambda kv: kv[0][1]):
        if len({w.get("fp") for w in calls.values()}) > 1:
            said = "; ".join(f"rank {r}: {_said(w)}" for r, w in sorted(calls.items()))
            return Diagnosis("mismatch", sorted(calls), f"the ranks called different collectives at #{number}: {said}")
    return None


def _arrival(w: dict[str, Any] | None) -> tuple[Any, ...]:
    """Which collective a waiting rank is in, as its group numbers them (the Python-level watch's key, or
    torch's own number for one it issued from C++); () when unknown."""
    if not _waits(w):
        return ()
    return tuple((w or {}).get("arrival") or (w or {}).get("key") or ())


def _all_arrived(where: dict[int, dict[str, Any]], r: int) -> bool:
    """Every rank of ``r``'s group waits in the very collective ``r`` waits in: it runs (a large one takes
    its time), it is not stuck."""
    mine = _arrival(where.get(r))
    group = where[r].get("group") or ()
    return bool(mine) and bool(group) and all(_arrival(where.get(g)) == mine for g in group)


def _paired(where: dict[int, dict[str, Any]], r: int) -> bool:
    """``r`` waits in a send (or recv) whose other rank waits in the matching recv (or send), same tag: the
    message is on its way (a large one takes its time), not stuck."""
    mine = (where.get(r) or {}).get("p2p") if _waits(where.get(r)) else None
    if not mine:
        return False
    op, peer, tag = mine
    other = "recv" if op == "send" else "send"
    for q in [peer] if peer is not None else [q for q in where if q != r]:
        theirs = (where.get(q) or {}).get("p2p") if _waits(where.get(q)) else None
        if theirs and theirs[0] == other and theirs[1] in (r, None) and theirs[2] == tag:
            return True
    return False


def _finished_before(w: dict[str, Any], finished: set[int], finished_at: dict[int, float]) -> set[int]:
    """The finished ranks that finished before ``w`` was sampled: a sample taken earlier may show the very
    collective such a rank completed on its way out (CI: a bucket all_reduce both ranks had passed, named
    a hang, and the release broke the next cell's group)."""
    sampled = float(w.get("sampled", math.inf))
    return {g for g in finished if finished_at.get(g, -math.inf) <= sampled}


def diagnose(
    where: dict[int, dict[str, Any]],
    done: set[int],
    now: float,
    what: str = "the call",
    still: float = STILL_S,
    done_at: dict[int, float] | None = None,
) -> Diagnosis | None:
    """Whether the ranks are stuck, from each rank's ``where`` (``collective_watch.where``) and the ranks
    whose part of the call is ``done`` (``done_at``: when each was seen done, where known); ``what`` names
    the call (``the cell``, ``the script``)."""
    found = _mismatch(where)
    if found:
        return found
    idle = {r: float(w.get("since") or 0.0) for r, w in where.items() if w and w.get("state") == "idle"}
    finished, finished_at = set(done) | set(idle), {**idle, **(done_at or {})}
    still_waiting = {r for r, w in where.items() if _waits(w) and now - float(w.get("since") or now) >= still}
    still_waiting -= {r for r in still_waiting if _all_arrived(where, r) or _paired(where, r)}  # running
    seen = {r: _finished_before(where[r], finished, finished_at) for r in still_waiting}
    hopeless = {r for r in still_waiting if set(where[r].get("group") or ()) <= still_waiting | seen[r]}
    while True:  # a rank waiting for a rank that can still go on is not stuck
        keep = {r for r in hopeless if set(where[r].get("group") or ()) <= hopeless | seen[r]}
        if keep == hopeless:
            break
        hopeless = keep
    if not hopeless:
        return None
    involved = set().union(*(set(where[r].get("group") or ()) for r in hopeless))
    parts: list[str] = []
    by_call: dict[str, list[int]] = {}
    for r in sorted(hopeless):
        by_call.setdefault(_said(where[r]), []).append(r)
    for said, ranks in by_call.items():
        parts.append(f"{rank_words(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {said}")
    gone = sorted(involved & finished)
    if gone:
        parts.append(f"{rank_words(gone)} finished {what} without calling it")
    text = "the ranks are stuck: " + "; ".join(parts)
    # past a few ranks, which are somewhere else, readable at 64
    tree = _tree(where, sorted(involved), finished, what) if len(involved) > TREE_PAST else ""
    return Diagnosis("hang", sorted(hopeless), text, tree)


def _tree(where: dict[int, dict[str, Any]], ranks: list[int], finished: set[int], what: str) -> str:
    """The involved ranks' stacks as one tree (``session/stack_tree.py``)."""
    rows = []
    for r in ranks:
        w = where.get(r) or {}
        state = f"finished {what}" if r in finished else w.get("state") or "unknown"
        rows.append(
            {
                "rank": r,
                "state": state,
                "collective": w.get("collective"),
                "line": w.get("line"),
                "stack": w.get("stack") or [],
            }
        )
    return StackTree(rows).text()


def status_line(where: dict[int, dict[str, Any]], now: float) -> str:
    """``rank 0 running line 3 of the cell for 45 s · ranks 1, 2, 3 waiting in barrier #7 for 44 s``."""
    groups: dict[str, list[int]] = {}
    for r, w in sorted(where.items()):
        if w:
            groups.setdefault(collective_watch.describe(w, now) or "done", []).append(r)
    return "mgpu: " + " · ".join(f"{rank_list(ranks)} {text}" for text, ranks in groups.items())


class HangWatch:
    """The watch over one session's calls: ``watch`` from the wait loop, ``take_report`` for the error."""

    def __init__(
        self,
        read_where: Callable[[], dict[int, dict[str, Any]]],
        release: Callable[[list[int]], None],
        still: float = STILL_S,
        status_after: float = STATUS_AFTER_S,
    ):
        self.read_where = read_where  # rank -> its latest ``where`` (telemetry), fresh ones only
        self.release = release
        self.still = still  # seconds blocked before stuck ranks are named; 0: never
        self.report: Diagnosis | None = None
        self._next = 0.0
        self._status: WaitLine | None = None  # the live status line of a stuck-looking collective
        self._waiting: WaitLine | None = None  # what a library call waits for, past WaitLine's SAID_AFTER
        self.status_after = status_after  # seconds a collective waits before the live status line (--status-after)
        self.started = time.time()
        self._done_at: dict[int, float] = {}  # when each rank was first seen done with the call (wall time)

    def start_call(self) -> None:
        self.report, self._next, self._done_at = None, 0.0, {}
        self.started = time.time()  # what the ranks said before this call is about the last one
        self.end_call()

    def watch(
        self, pending: list[int], done: set[int], what: str = "the call", live: bool = False, label: str = ""
    ) -> None:
        """One look (at most every ``POLL_S``): release and report stuck ranks; keep the status line; past
        two seconds of a library call (``label``, not a cell or a script), a line saying what it waits for."""
        now = time.monotonic()
        if self.report is not None or now < self._next or not pending:
            return
        self._next = now + POLL_S
        if label and not label.startswith(("%%mgpu", "%mgpu_run")):
            if self._waiting is None:
                self._waiting = WaitLine(f"waiting for {label}")
                self._waiting.started -= time.time() - self.started  # the call began then, not at this look
            self._waiting.tick(f"{rank_list(pending)} still at it")
        where = {r: w for r, w in self.read_where().items() if self._this_call(w)}
        wall = time.time()
        for r in done:
            self._done_at.setdefault(r, wall)
        found = diagnose(where, set(done), wall, what, self.still, self._done_at) if self.still > 0 else None
        if found is not None:
            self.report = found
            self.release(found.release)
            return
        if live:
            waited = [wall - float(w.get("since") or wall) for w in where.values() if _waits(w)]
            importing = any(w.get("importing") for w in where.values()) and wall - self.started >= SAID_AFTER
            if self._status is not None or importing or (waited and max(waited) >= self.status_after):
                self._show(status_line({r: where.get(r) or {} for r in sorted(set(pending) | set(done))}, wall))

    def _this_call(self, w: dict[str, Any]) -> bool:
        """Whether a sample says something of this call: taken since it began, and not a rank idle since its
        last call, which has not begun this one yet (a loaded machine) rather than finished it without a
        collective; a rank that finished it is idle since then, and its result comes back."""
        if float(w.get("sampled", self.started)) < self.started:
            return False
        return w.get("state") != "idle" or float(w.get("since") or 0.0) >= self.started

    def _show(self, text: str) -> None:
        if self._status is None:
            self._status = WaitLine("", after=0, live=True)
        self._status.show(text)

    def end_call(self) -> None:
        """The call is over: its lines go."""
        for line in (self._status, self._waiting):
            if line is not None:
                line.close()
        self._status = self._waiting = None

    def take_report(self) -> Diagnosis | None:
        report, self.report = self.report, None
        return report
