"""Keep the process group clean: after an interrupt, a failed call or a timeout, no stale collective
survives to be matched with a later one (which gives wrong numbers, silently).

Three moments, all on the kernel side (a session gives :class:`GroupRecovery` only what it needs: its
rank directory, size and timeout, a way to run a function on every rank, and a way to mark itself broken):

- **while waiting** for a call in which some ranks already failed: a rank still running that has
  entered more collectives than a failed rank did waits for a partner that will never come; it is
  released at once (``engine/watch/collective_guard.py``) instead of after the collective timeout;
- **after the stop button**: ranks in Python code stop on SIGINT; ranks still busy a moment later
  (blocked in C++) are released; then every rank leaves its old process group and joins a new one;
- **before the next call**, when that rebuild could not run yet (a rank still busy, or the stop button
  pressed again during it): it runs first, so nothing ever uses a group with an abandoned collective.

Shards and user variables live on the ranks, not in the group: they are kept.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.watch import collective_guard as guard
from jupyter_mgpu.errors import Interrupted, MgpuError, rank_list
from jupyter_mgpu.session.rank_errors import REBUILT_NOTE, held_note

INTERRUPT_GRACE = 0.5  # ranks in Python code answer SIGINT well within this
FAILURE_GRACE = 0.3  # after a rank failed, how long the others may still finish on their own
FAILURE_FIRST = FAILURE_GRACE + 1.0  # how long after a rank failed its failure, not a hang, is what is reported
SETTLE = 3.0  # how long released ranks get to leave their call


class GroupRecovery:
    """The clean-group guarantee of one session."""

    def __init__(
        self,
        runtime_dir: str,
        world_size: int,
        timeout: float,
        run_on_all: Callable[..., Any],
        mark_broken: Callable[[str], None],
        interrupt: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.runtime_dir = runtime_dir
        self.world_size = world_size
        self.timeout = timeout
        self.run_on_all = run_on_all  # ``run_on_all(fn, *args)``: an ipyparallel AsyncResult over every rank
        self.mark_broken = mark_broken  # the session refuses every later call, with this reason
        self.interrupt = interrupt  # ``interrupt(ranks)``: SIGINT to their engines
        self.dirty: str | None = None  # why the group must be rebuilt before the next call
        self.released: set[int] = set()  # ranks released during the call being waited on
        self._failure_seen: float | None = None
        self.generation = 0

    # -- asking the ranks --------------------------------------------------------------------
    def _ask(self, ranks: list[int], command: str) -> dict[int, dict[str, Any] | None]:
        return {r: guard.ask(self.runtime_dir, r, command) for r in ranks}

    def busy(self, ranks: list[int]) -> list[int]:
        """Ranks still inside a call (a rank that cannot be asked counts as busy)."""
        return [r for r, p in self._ask(ranks, "progress").items() if p is None or p.get("in_call")]

    def wait_idle(self, ranks: list[int], seconds: float) -> list[int]:
        """Wait up to ``seconds`` for ``ranks`` to leave their calls; the ranks still busy."""
        end = time.monotonic() + seconds
        busy = self.busy(ranks)
        while busy and time.monotonic() < end:
            time.sleep(0.02)
            busy = self.busy(busy)
        return busy

    def interrupt_ranks(self, ranks: list[int]) -> dict[int, dict[str, Any] | None]:
        """The stop button: SIGINT to ``ranks``. Returns what every rank was doing just before (its
        ``progress``), so that :meth:`after_interrupt` can tell a call begun after the signal."""
        before = guard.ask_all(self.runtime_dir, list(range(self.world_size)), "progress")
        if self.interrupt is not None:
            self.interrupt(ranks)
        return before

    def stop_running(self, ranks: list[int], seconds: float, before: dict[int, dict[str, Any] | None]) -> list[int]:
        """Wait up to ``INTERRUPT_GRACE`` for ``ranks`` to leave their calls, signalling again those in a call
        begun after the stop (``before``: :meth:`interrupt_ranks`'s answer), up to ``seconds``: a signal that
        came while a rank was between two tasks went to ipykernel's ignore, and the next task, the one the stop
        was for, would run on for nobody. A rank still in the call the signal reached (a long C++ operation)
        is not signalled again. The ranks still busy."""
        end = time.monotonic() + seconds
        busy = self.wait_idle(ranks, INTERRUPT_GRACE)
        while busy and self.interrupt is not None and time.monotonic() < end:
            late = [r for r, p in self._ask(busy, "progress").items() if p and _begun_after(before.get(r), p)]
            if not late:
                break
            self.interrupt(late)
            busy = self.wait_idle(busy, INTERRUPT_GRACE)
        return busy

    def release(self, ranks: list[int]) -> None:
        """Make the pending collectives of ``ranks`` fail now (their peers' fail too)."""
        self._ask(ranks, "release")
        self.released.update(ranks)

    def mark_dirty(self, reason: str) -> None:
        """The group must be rebuilt before the next call (the first reason given is kept)."""
        self.dirty = self.dirty or reason

    # -- while waiting for a call -------------------------------------------------------------
    def start_call(self) -> None:
        self.released = set()
        self._failure_seen = None

    def watch(self, done: dict[int, dict[str, Any]], pending: list[int]) -> None:
        """Release pending ranks stuck in a collective that a rank which already failed never entered."""
        failed = [
            res for res in done.values() if isinstance(res, dict) and not res.get("ok") and not res.get("interrupted")
        ]
        if not failed or not pending:
            return
        now = time.monotonic()
        if self._failure_seen is None:
            self._failure_seen = now
        if now - self._failure_seen < FAILURE_GRACE:
            return
        counts: list[int] = [res["seq_delta"] for res in failed if res.get("seq_delta") is not None]
        if not counts:
            return
        fewest = min(counts)
        progress = self._ask([r for r in pending if r not in self.released], "progress")
        stuck = [r for r, p in progress.items() if p and p.get("in_call") and (p.get("collectives") or 0) > fewest]
        if stuck:
            self.release(stuck)

    def failure_first(self) -> bool:
        """Whether a rank's failure came back less than :data:`FAILURE_FIRST` ago while others still ran: the
        ranks it left waiting in a collective are :meth:`watch`'s to release, and the call then reports that
        failure; a hang watch that looked first (they may have waited past ``--hang-after`` before the
        failed rank's report came, on a busy machine) would report a hang instead."""
        return self._failure_seen is not None and time.monotonic() - self._failure_seen < FAILURE_FIRST

    def needs_rebuild(self, results: dict[int, dict[str, Any]]) -> bool:
        """After a failed call: whether the ranks may disagree on which collectives they ran, or a rank left a
        record of a collective it never ran (``unrun``: a mismatch it found, torch's check of the arguments)
        in the table under the number its next one takes again: the ranks all agree (no sequence number
        moved), yet a peer's next call would be compared with that record and fail. The new generation of
        a rebuilt group is what no old record matches."""
        if self.released or any(
            r.get("collective_failure") or r.get("interrupted") or r.get("unrun") for r in results.values()
        ):
            return True
        deltas = {r.get("seq_delta") for r in results.values() if r.get("seq_delta") is not None}
        return len(deltas) > 1

    def after_failure(self, results: dict[int, dict[str, Any]]) -> bool:
        """Rebuild the group after a failed call when needed; True if it was rebuilt now."""
        if not self.needs_rebuild(results):
            return False
        self.dirty = "a failed collective"
        return self.rebuild()  # if the ranks do not meet now, the next call tries again first

    # -- after the stop button ----------------------------------------------------------------
    def after_interrupt(self, ranks: list[int], before: dict[int, dict[str, Any] | None] | None = None) -> Interrupted:
        """Bring the group back after an interrupt of a call on ``ranks`` (``before``: what
        :meth:`interrupt_ranks` read): release what SIGINT could not reach, then rebuild. Returns the
        exception to raise, which says what happened."""
        everyone = list(range(self.world_size))
        self.dirty = "the interrupt"
        busy = self.stop_running(everyone, SETTLE, before or {})
        if busy:
            self.release(everyone)
            busy = self.wait_idle(everyone, SETTLE)
        where = f"interrupted on {rank_list(ranks)}"
        if busy:
            said = f"{where}; {rank_list(busy)} still busy (a long C++ operation?): the process group will be rebuilt before the next call"
        elif self.rebuild():
            said = f"{where}; {REBUILT_NOTE}"
        else:
            said = f"{where}; the process group will be rebuilt before the next call"
        asked = self._ask([r for r in ranks if r not in busy], "held")  # their reports never come
        held = held_note({r: p for r, p in asked.items() if p}, call="interrupted")
        return Interrupted(f"{said}; {held}" if held else said)

    # -- before the next call -----------------------------------------------------------------
    def ensure_clean(self) -> None:
        """Rebuild the group first if an earlier interrupt left that undone; raise if impossible."""
        if self.dirty is None:
            return
        everyone = list(range(self.world_size))
        if self.busy(everyone):
            self.release(everyone)
        if self.wait_idle(everyone, self.timeout):
            self._give_up("a rank stayed busy")
        reason = self.dirty
        if not self.rebuild():
            self._give_up("the ranks did not meet again")
        print(f"mgpu: after {reason}, {REBUILT_NOTE}", file=sys.stderr)

    def _give_up(self, why: str) -> None:
        broken = f"its process group could not be rebuilt after {self.dirty} ({why})"
        self.mark_broken(broken)
        raise MgpuError(
            f"this session's process group could not be rebuilt after {self.dirty} ({why}); run %mgpu_init --restart"
        )

    # -- rebuilding ---------------------------------------------------------------------------
    def rebuild(self) -> bool:
        """Every rank leaves its process group and joins a fresh one (all ranks must be idle)."""
        from jupyter_mgpu.engine.startup import runtime

        self.generation += 1
        ar = self.run_on_all(runtime.rebuild_process_group, self.generation)
        ar.wait(self.timeout + 5)
        if not ar.ready():
            return False
        try:
            ar.get()
        except Exception:
            return False
        self.dirty = None
        self.released = set()
        return True


def _begun_after(before: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """Whether a rank's call now (``progress``) began after the stop (``before``, read just ahead of it):
    the rank was between calls then, or has begun another since. Unknown (no answer then): no."""
    if before is None or not now.get("in_call"):
        return False
    return not before.get("in_call") or int(now.get("begun") or 0) > int(before.get("begun") or 0)
