"""The controller's heartbeat pace (``engine/startup/heart_pace.py``): quick while engines register,
slow at rest, the same silence tolerated either way; and what an engine of a real cluster sees."""

from __future__ import annotations

import os
import signal
import time

import pytest
from tornado.ioloop import PeriodicCallback

from jupyter_mgpu.engine.startup import heart_pace


def test_the_configured_period_holds_until_the_hearts_have_been_quiet_a_while() -> None:
    assert heart_pace.period(50, hearts=0, since_new_heart=60) == 50  # nobody yet: engines are coming
    assert heart_pace.period(50, hearts=4, since_new_heart=heart_pace.QUIET_S - 0.1) == 50
    assert heart_pace.period(50, hearts=4, since_new_heart=heart_pace.QUIET_S) == heart_pace.REST_MS
    assert heart_pace.period(1000, hearts=4, since_new_heart=60) == 1000  # never quicker than asked


class _Monitor:
    """The attributes of ipyparallel's HeartMonitor that the pace reads and sets."""

    def __init__(self, period: int, misses: int) -> None:
        self.period = period
        self.max_heartmonitor_misses = misses
        self.hearts: set[bytes] = set()
        self.caller = PeriodicCallback(lambda: None, period)
        self._mgpu_configured = (period, period * misses)
        self._mgpu_new_heart_at = 0.0


def test_at_rest_the_beats_slow_down_and_the_misses_scale_so_a_silent_engine_goes_as_soon() -> None:
    m = _Monitor(50, 20)  # ping 50 ms, dropped after 20 misses: 1 s of silence
    heart_pace.pace(m, now=10.0)
    assert m.caller.callback_time == 50  # no hearts yet
    m.hearts = {b"a", b"b"}
    heart_pace.pace(m, now=1.0)
    assert (m.caller.callback_time, m.max_heartmonitor_misses) == (50, 20)
    heart_pace.pace(m, now=10.0)
    assert m.caller.callback_time == heart_pace.REST_MS
    assert m.caller.callback_time * m.max_heartmonitor_misses == 1000
    m._mgpu_new_heart_at = 10.5  # a rank restarted: its heart registers at the quick pace
    heart_pace.pace(m, now=11.0)
    assert (m.caller.callback_time, m.max_heartmonitor_misses) == (50, 20)


def test_the_rest_period_never_makes_an_engine_warn_of_a_missed_beat() -> None:
    # an engine checks every (period at registration + 500) ms: two rest beats fit in each check
    assert 2 * heart_pace.REST_MS < 50 + 500


def test_install_paces_ipyparallel_s_monitor_once() -> None:
    from ipyparallel.controller.heartmonitor import HeartMonitor

    heart_pace.install()
    paced = HeartMonitor.beat
    heart_pace.install()
    assert HeartMonitor.beat is paced and paced.__name__ == "paced_beat"  # not wrapped twice


@pytest.mark.cluster
def test_an_idle_engine_is_pinged_at_the_rest_pace(s2) -> None:
    def pings_per_second() -> list[int]:
        import time

        from ipyparallel.engine.app import IPEngine

        app = IPEngine.instance()
        counts = []
        for _ in range(8):  # the pool's cluster may have started a moment ago: wait out the quick pace
            seen, end = set(), time.monotonic() + 1.0
            while time.monotonic() < end:
                app._hb_listener.flush()  # the ping listener's messages, as the engine's loop would take them
                seen.add(app._hb_last_pinged)
                time.sleep(0.01)
            counts.append(len(seen))
            if len(seen) <= 1000 // heart_pace.REST_MS + 1:
                break
        return counts

    counts = s2.run(pings_per_second)[0]
    assert counts[-1] <= 1000 // heart_pace.REST_MS + 1, counts
    assert counts[-1] >= 2, counts  # still beating


@pytest.mark.cluster
def test_a_rank_the_machine_leaves_unscheduled_for_seconds_keeps_its_engine(s2) -> None:
    """A live rank not scheduled for seconds (a load of 8 on two cores, a node swapping; here SIGSTOP) is not
    dropped by the controller: calls through ipyparallel still reach it (it was after 1 s of silence, for good,
    and every such call then failed with ipyparallel's ``KeyError: 1``)."""
    pid = s2.cluster.engine_pids[1]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert set(s2.cluster.rank_to_engine.values()) <= set(s2.cluster.client.ids)
    assert s2.run_cell("rank", block=False).get() == ["0", "1"]  # through ipyparallel, not the direct channel
