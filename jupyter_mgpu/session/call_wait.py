"""What every wait for a call on the ranks checks each time round, on either call path (ipyparallel's
or the direct channel): a dead rank, a broken cluster, ranks left waiting by a rank that already
failed (``session/recovery.py``), stuck ranks and mismatched collectives (``session/hang_watch.py``), and
the call's own deadline. ``session/core.py`` runs a call and calls :func:`check_waiting` while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.cluster.local import describe_exit
from jupyter_mgpu.errors import EngineDiedError, MgpuError, rank_list
from jupyter_mgpu.session import rank_status

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session
    from jupyter_mgpu.session.output_relay import OutputRelay


def what_runs(label: str) -> str:
    """How a hang report names the call: ``the cell``, ``the script`` or ``the call``."""
    if label.startswith("%%mgpu"):
        return "the cell"
    if label.startswith("%mgpu_run"):
        return "the script"
    return f"the call ({label})" if label else "the call"


def read_where(s: Session, stale_s: float = 2.0) -> dict[int, dict[str, Any]]:
    """Each rank's latest ``where`` (what it does now) from its telemetry, with the time it was
    ``sampled``; a rank whose sample is older than ``stale_s`` (busy in C++ holding the interpreter, or
    gone) is left out, never judged."""
    now = time.time()
    out = {}
    for sample in rank_status.memory(s.cluster, s.world_size):
        where = sample.get("where")
        if where and now - float(sample.get("time") or 0) <= stale_s:
            out[int(sample["rank"])] = {**where, "sampled": float(sample["time"])}
    return out


def check_waiting(
    s: Session,
    ranks: list[int],
    pending: Callable[[], list[int]],
    label: str,
    deadline: float | None,
    timeout: float | None,
    relay: OutputRelay | None = None,
    done: dict[int, Any] | None = None,
) -> None:
    """While waiting on ``ranks``: raise for a dead rank, a broken cluster or the deadline, interrupting
    the ranks still at work first; release ranks left waiting in a collective by a rank that already
    failed (``done``: the reports that came back) and ranks stuck or mismatched in one; serve a rank
    stopped at a pdb prompt (``session/rank_debugging.py``; time there does not count to the deadline)."""
    dead = {r: e for r, e in s.cluster.exits().items() if r in ranks}
    if dead:
        if relay is not None:
            relay.flush()
        s.cluster.interrupt([r for r in pending() if r not in dead])
        r = min(dead)
        raise EngineDiedError(describe_exit(r, dead[r], "while running this"), ranks=sorted(dead))
    s._check_infrastructure()
    waiting = pending()
    if done:
        s.recovery.watch(done, waiting)
    if not s.recovery.failure_first():  # a rank failed: the ranks it left waiting are released, not a hang
        live = relay is not None and relay.live
        s.hang_watch.watch(waiting, set(done or {}), what_runs(label), live=live, label=label)
    s.debug_desk.serve(waiting, relay)
    if deadline is not None and time.monotonic() > deadline + s.debug_desk.paused_s:
        waiting = pending()
        s.cluster.interrupt(waiting)
        # SIGINT does not reach a rank blocked in a collective: the next call rebuilds the group
        # first, so that collective is never matched with a later one
        s.recovery.mark_dirty("the timeout")
        raise MgpuError(
            f"{label} did not finish within {timeout:g} s on {rank_list(waiting)}; "
            "those ranks were interrupted and the process group is rebuilt before the next call"
        )
