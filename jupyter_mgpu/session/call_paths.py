"""The two ways a call's results come back to the session (``session/core.py``), and how each waits.

The direct channel (``session/direct_channel.py``) carries blocking calls when nothing of ipyparallel's
is still queued, their output streamed back on it (``session/streamed_call.py``); ipyparallel's
AsyncResult carries the others (``block=False``, and any call while ipyparallel has one queued).
Both start the call for the group recovery and the hang watch, check while they wait
(``session/call_wait.py``: dead engines, the deadline, stuck ranks), forward a kernel interrupt to the
ranks still running, and turn a lost engine into one sentence; the reports become values in
``session/call_results.py``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.execution import direct_channel as rank_channel
from jupyter_mgpu.errors import Interrupted, MgpuError
from jupyter_mgpu.session import call_wait
from jupyter_mgpu.session.call_results import results
from jupyter_mgpu.session.direct_channel import ChannelClosed
from jupyter_mgpu.session.output_relay import OutputRelay
from jupyter_mgpu.session.pending import finished_results, pending_ranks
from jupyter_mgpu.session.rank_errors import transport_error, transport_failure
from jupyter_mgpu.session.streamed_call import StreamedCall

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session

TAKEN_UP_S = 3.0  # how long a stopped request still on its way gets to be dropped or begin


def run_direct(
    s: Session,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    ranks: list[int],
    label: str,
    timeout: float | None,
    relay: Callable[[StreamedCall], OutputRelay] | None = None,
) -> list[Any]:
    """``fn(*args)`` (``calls.call`` or ``calls.run_cell``) on ``ranks`` through the direct channel; same
    errors as :func:`collect`. With ``relay``, the ranks' output streams back and it shows it."""
    from ipyparallel.serialize import pack_apply_message

    s._check_ready(ranks)
    bufs = pack_apply_message(rank_channel.by_name(fn), args, {})  # the engine imports it: no code to rebuild
    deadline = None if timeout is None else time.monotonic() + timeout
    streamed = StreamedCall(ranks) if relay is not None else None
    shown = relay(streamed) if relay is not None and streamed is not None else None
    s.recovery.start_call()
    s.hang_watch.start_call()
    s.debug_desk.start_call()

    def check(pending: list[int], done: dict[int, Any]) -> None:
        if shown is not None:
            shown.poll()
        call_wait.check_waiting(s, ranks, lambda: pending, label, deadline, timeout, shown, done=done)

    try:
        reports = s.direct.call(
            ranks, bufs, check, on_output=streamed.add if streamed is not None else None, parent=_comm_parent(s)
        )
    except ChannelClosed as closed:
        await_exit_record(s, [closed.rank])
        check(ranks, {})
        raise MgpuError(f"{label}: lost contact with rank {closed.rank} (its direct channel closed)") from None
    except KeyboardInterrupt:
        before = s.recovery.interrupt_ranks(ranks)
        try:
            raise s.recovery.after_interrupt(ranks, before) from None
        finally:
            if shown is not None:
                shown.flush()
    finally:
        s.hang_watch.end_call()  # its live lines go with the call
    if shown is not None:
        shown.flush()
    broken = next((reports[r]["transport"] for r in ranks if reports[r].get("transport")), None)
    if broken:
        raise transport_error(broken, label)
    return results(s, [reports[r] for r in ranks], ranks)


def _comm_parent(s: Session) -> dict[str, str] | None:
    """The request the ranks' comm messages (a widget's) answer: one ipyparallel's client relays."""
    try:
        return {"session": s.cluster.client.session.session, "msg_id": f"mgpu-direct-{s.id}"}
    except AttributeError:
        return None


def abort_queued(s: Session, ar: Any, ranks: list[int], wait: float = 2.0) -> None:
    """Take ``ar``'s task off the queues of ``ranks`` that have not started it (ipyparallel's ``abort``), before
    they are interrupted: a rank busy with an earlier task ignores the signal, and would run this one later
    for nobody. Engines answer on their control channel while they run a task; one that does not within
    ``wait`` is left to the interrupt."""
    with contextlib.suppress(Exception):
        targets = [s.cluster.rank_to_engine[r] for r in ranks]
        s.cluster.client.abort(ar, targets=targets, block=False).wait(wait)


def await_taken_up(s: Session, ar: Any, ranks: list[int], pending: list[int], wait: float = TAKEN_UP_S) -> None:
    """Wait up to ``wait`` until each rank of ``pending`` has answered ``ar`` (aborted, stopped or done) or is in
    a call. A request still on its way when the stop came (a loaded machine) is dropped by the abort, or, read
    just before it, begins late; the recovery signals a call begun after the stop only once it has begun."""
    msg_ids = dict(zip(ranks, ar.msg_ids))
    end = time.monotonic() + wait
    while time.monotonic() < end:
        unanswered = [r for r in pending if msg_ids.get(r) in s.cluster.client.outstanding]
        if not unanswered or set(s.recovery.busy(unanswered)) == set(unanswered):
            return
        with contextlib.suppress(Exception):
            ar.wait(0.02)


def stop_submitted(s: Session, ar: Any, ranks: list[int], relay: OutputRelay | None = None) -> Interrupted:
    """The stop button during ipyparallel's ``ar`` on ``ranks``: taken off the queues of ranks that have not
    begun it, interrupted on those that have, the group brought back; the exception to raise, which says so."""
    try:  # however this ends (a second stop included), the call's status line and output end with it
        pending = pending_ranks(s.cluster.client, ar, ranks)
        abort_queued(s, ar, pending)
        before = s.recovery.interrupt_ranks(pending)
        await_taken_up(s, ar, ranks, pending)
        return s.recovery.after_interrupt(pending, before)
    finally:
        s.hang_watch.end_call()
        if relay is not None:
            relay.flush()


def await_exit_record(s: Session, ranks: list[int], wait: float = 5.0) -> None:
    """How an engine ended is written (supervisor, or relay) a moment after its socket closes."""
    end = time.monotonic() + wait
    while not set(ranks) & set(s.cluster.exits()) and time.monotonic() < end:
        time.sleep(0.02)


def collect(
    s: Session, ar: Any, ranks: list[int], label: str, timeout: float | None, relay: OutputRelay | None
) -> list[Any]:
    """The results of ipyparallel's ``ar`` on ``ranks``, waited for as a call waits; ``relay`` shows output."""
    deadline = None if timeout is None else time.monotonic() + timeout
    s.recovery.start_call()
    s.hang_watch.start_call()
    s.debug_desk.start_call()
    try:
        while not ar.ready():
            ar.wait(0.05)
            if relay is not None:
                relay.poll()
            call_wait.check_waiting(
                s,
                ranks,
                lambda: pending_ranks(s.cluster.client, ar, ranks),
                label,
                deadline,
                timeout,
                relay,
                done=finished_results(ar, ranks),
            )
    except KeyboardInterrupt:
        raise stop_submitted(s, ar, ranks, relay) from None
    finally:
        s.hang_watch.end_call()  # its live status line goes with the call
    if relay is not None:
        ar.wait_for_output(5)  # results can arrive before the last output (shell vs iopub channel)
        relay.flush()
    try:
        reports = ar.get()
    except Exception as exc:  # an ipyparallel-level failure (engine lost, unpicklable result)
        if "died" in str(exc):  # ipyparallel can see an engine go before its exit record is written
            await_exit_record(s, ranks)
        raise transport_failure(exc, label, s.cluster.exits()) from None
    if not isinstance(reports, list):
        reports = [reports]
    return results(s, reports, ranks)
