"""The controller's heartbeat: quick while engines register, slower once they all have.

ipyparallel's controller pings every engine each period, and an engine counts as registered at the
first beat after its heart starts, so a short period (50 ms) makes a quick start. At rest the same
pings wake each engine's main thread and its heart 20 times a second: an idle cluster of 32 CPU ranks
kept 45% of a core busy (``python benchmarks/cell_latency.py --ranks 4,16,32`` prints it). Once no new
heart has come for :data:`QUIET_S`, the period becomes :data:`REST_MS`; the misses allowed scale with
it, so a silent engine is still dropped after the same time (``--ping`` times
``HeartMonitor.max_heartmonitor_misses``). A new heart brings the configured period back.

:data:`REST_MS` stays under half the engines' own check period (their period at registration plus
500 ms, ipyparallel's rule), so one late ping never makes an engine log a missed heartbeat.
"""

from __future__ import annotations

import time
from typing import Any

REST_MS = 250
QUIET_S = 3.0


def period(configured_ms: int, hearts: int, since_new_heart: float) -> int:
    """The heartbeat period (ms) with ``hearts`` engines beating, the last new one ``since_new_heart`` s
    ago; ``configured_ms``: the controller's ``--ping``, kept while engines register."""
    return max(REST_MS, configured_ms) if hearts and since_new_heart >= QUIET_S else configured_ms


def misses(tolerance_ms: float, period_ms: float) -> int:
    """Consecutive missed beats after which an engine is dropped: ``tolerance_ms`` of silence at ``period_ms``."""
    return max(1, round(tolerance_ms / period_ms))


def pace(monitor: Any, now: float) -> None:
    """Set ``monitor``'s (ipyparallel's ``HeartMonitor``) period for its hearts as of ``now``."""
    configured, tolerance = getattr(monitor, "_mgpu_configured", (monitor.period, None))
    since = now - getattr(monitor, "_mgpu_new_heart_at", now)
    wanted = period(configured, len(monitor.hearts), since)
    caller = getattr(monitor, "caller", None)
    if caller is not None and caller.callback_time != wanted:
        caller.callback_time = wanted  # tornado's PeriodicCallback reads it when it schedules the next beat
        if tolerance is not None:
            monitor.max_heartmonitor_misses = misses(tolerance, wanted)


def install() -> None:
    """Make ipyparallel's ``HeartMonitor`` in this process pace itself (run where the monitor runs)."""
    from ipyparallel.controller.heartmonitor import HeartMonitor

    if getattr(HeartMonitor, "_mgpu_paced", False):
        return
    beat, new_hearts, start = HeartMonitor.beat, HeartMonitor.handle_new_hearts, HeartMonitor.start

    def paced_start(self: Any) -> None:
        self._mgpu_configured = (self.period, self.period * self.max_heartmonitor_misses)
        self._mgpu_new_heart_at = time.monotonic()
        start(self)

    def paced_new_hearts(self: Any, hearts: Any) -> None:
        self._mgpu_new_heart_at = time.monotonic()
        new_hearts(self, hearts)

    def paced_beat(self: Any) -> None:
        beat(self)
        pace(self, time.monotonic())

    HeartMonitor.start = paced_start
    HeartMonitor.handle_new_hearts = paced_new_hearts
    HeartMonitor.beat = paced_beat
    HeartMonitor._mgpu_paced = True


def start_heartmonitor(**kwargs: Any) -> None:
    """ipyparallel's ``start_heartmonitor`` (the target of the controller's heart process), paced."""
    from ipyparallel.controller import heartmonitor

    install()
    heartmonitor.start_heartmonitor(**kwargs)


def use_in_controller() -> None:
    """Have the controller about to start in this process run its heart monitor through this module."""
    from ipyparallel.controller import app

    app.start_heartmonitor = start_heartmonitor  # the name IPController.init_hub passes to its Process
