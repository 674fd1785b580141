"""The direct channel (blocking ``Session.run`` calls without the controller hop) under faults.

Same promises as the ipyparallel path: a dead rank is named at once, a timeout interrupts the ranks,
the stop button interrupts them, and the session stays usable with no stale reply mixed in later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
import time

import pytest

from jupyter_mgpu.errors import EngineDiedError, MgpuError

pytestmark = pytest.mark.cluster


def _rank() -> int:
    from jupyter_mgpu.engine import state as rank_state

    return rank_state.get().rank


def _sleep(seconds: float) -> int:
    time.sleep(seconds)
    return _rank()


def _spin() -> None:
    while True:
        pass


def _marker():
    import __main__

    return getattr(__main__, "marker", None)


def test_blocking_runs_skip_the_controller_and_the_socket_is_private(s2):
    before = len(s2.cluster.client.history)
    assert s2.run(_rank) == [0, 1]
    assert s2.run(_rank, targets=1) == [1]
    assert len(s2.cluster.client.history) == before  # no ipyparallel task was sent
    for r in range(2):
        mode = os.stat(s2.cluster.path / f"direct.{r}.sock").st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(s2.cluster.path).st_mode) == 0o700


def test_a_queued_noblock_cell_runs_before_a_later_call(s2):
    pending = s2.run_cell("import time\ntime.sleep(0.5)\nmarker = rank + 10", block=False)
    assert s2.run(_marker) == [10, 11]  # waited its turn behind the cell
    pending.get()


@pytest.mark.slow
def test_a_timed_out_call_is_interrupted_and_its_late_reply_dropped(s2):
    start = time.monotonic()
    with pytest.raises(MgpuError, match=r"^_sleep did not finish within 1 s on ranks 0, 1; those ranks were"):
        s2.run(_sleep, 30, timeout=1)
    assert s2.run(_sleep, 0) == [0, 1]  # not the interrupted call's reply
    assert time.monotonic() - start < 20  # the interrupt reached the ranks sleeping 30 s


@pytest.mark.slow
def test_a_call_timed_out_inside_a_collective_leaves_no_stale_collective(s2):
    # rank 0 waits in an all_reduce that rank 1 never joins; SIGINT cannot stop it there
    with pytest.raises(MgpuError, match=r"within 1 s on rank 0; .* rebuilt before the next call"):
        s2.run_cell("x = torch.ones(3)\nif rank == 0:\n    dist.all_reduce(x)", timeout=1)
    start = time.monotonic()
    out = s2.run_cell("x = torch.ones(2) * (rank + 1)\ndist.all_reduce(x)\nx.tolist()")
    assert out == ["[3.0, 3.0]", "[3.0, 3.0]"]  # not matched with the abandoned all_reduce of 3
    assert time.monotonic() - start < 5  # released at once, not after the collective timeout


@pytest.mark.slow
def test_the_stop_button_interrupts_a_direct_call(s2):
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        s2.run(_spin)
    assert s2.run(_rank) == [0, 1]
    assert time.monotonic() - start < 20  # _spin never ends on its own


@pytest.mark.slow
def test_a_rank_killed_during_a_direct_call_is_named(own_session):
    with own_session(2) as s:
        threading.Timer(1.0, lambda: os.kill(s.cluster.engine_pids[1], signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(EngineDiedError, match=r"^rank 1 died \(killed by SIGKILL\) while running this"):
            s.run(_sleep, 30)
        assert time.monotonic() - start < 1.0 + 15  # told when it died, well before the 30 s
        assert s.run(_rank, targets=0) == [0]  # the survivor still answers


def test_calls_from_two_threads_get_their_own_answers(s2):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(s2.run, _sleep, 0.01 * (i % 3)) for i in range(24)]
        assert all(f.result(timeout=60) == [0, 1] for f in futures)


def test_a_call_stopped_before_its_ranks_read_it_never_runs(s2):
    # the ranks are busy with a --noblock cell, so the request waits unread in their sockets when the stop comes
    # (ipykernel ignores SIGINT between tasks): read later, it must not run for a caller that has gone
    pending = s2.run_cell("import time\ntime.sleep(2)", block=False)
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        s2.run(_spin)
    with contextlib.suppress(Exception):
        pending.get()
    assert s2.run(_rank, timeout=10) == [0, 1]  # not queued behind a _spin nobody waits for


def test_a_stop_while_the_request_goes_out_stops_that_call(s2, monkeypatch):
    # the stop pressed after ipyparallel sent the request but before the wait for it began (a loaded machine
    # stretches that moment): the call just sent is stopped, not left to run for nobody
    view_of = s2._view
    pressed: list[bool] = []

    class SendThenStop:
        def __init__(self, ranks: list[int]) -> None:
            self.view = view_of(ranks)

        def apply_async(self, *args):
            ar = self.view.apply_async(*args)
            if not pressed:  # once: the recovery's own calls that follow go through here too
                pressed.append(True)
                os.kill(os.getpid(), signal.SIGINT)
            return ar

    monkeypatch.setattr(s2, "_view", SendThenStop)
    with pytest.raises(KeyboardInterrupt, match="interrupted on"):
        s2.run(_spin, block=False)
    monkeypatch.undo()
    assert s2.run(_rank, timeout=10) == [0, 1]


@pytest.mark.slow  # the ranks' task holds the signal off for 1.5 s
def test_a_stopped_call_that_begins_after_the_signal_s_grace_is_stopped_when_it_begins(s2, monkeypatch):
    # the ranks are in a task that ignores SIGINT (as ipykernel does between tasks) when the stop comes, the stopped
    # call queued behind it, and the abort misses it (it came after the rank read the request): the call begins
    # after INTERRUPT_GRACE, and must still be stopped, not run on for nobody
    from jupyter_mgpu.session import call_paths

    code = "import signal, time\n_h = signal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1.5)\nsignal.signal(signal.SIGINT, _h)"
    blocker = s2._view([0, 1]).execute(code, block=False)
    monkeypatch.setattr(call_paths, "abort_queued", lambda *args, **kwargs: None)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt, match="interrupted on"):
        s2.run(_spin)
    blocker.get(timeout=10)
    assert s2.run(_rank, timeout=10) == [0, 1]
