"""The live memory dashboard: one bar and a 60 s timeline per device, updated from a kernel thread.

``mg.dashboard()`` (and ``%mgpu_init``) shows the session's :class:`MemoryDashboard`, an anywidget
whose ES module (``static/memory.js``) draws the bars. A thread in the kernel pushes the memory
monitor's samples into the widget's traitlets at the chosen refresh rate, so the bars keep moving
while another cell runs. Every view of one dashboard shares its model, so all views stay in sync;
the pause button and the refresh-rate control of any view steer them all. What it shows is computed
in ``widgets/memory_rows.py``: at 32–64 ranks, rows grouped by host with a summary line each, coarser
timelines (one point a second), so a tick's bytes grow linearly with the ranks. When the session
shuts down, the dashboard's last picture says so: every rank "shut down", the controls off.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.widgets.memory_rows import (
    COMPACT_AT,
    ended_rows,
    host_groups,
    restart_marks,
    same_picture,
)
from jupyter_mgpu.widgets.memory_rows import FILL_DEAD as FILL_DEAD  # re-exported: tests, notebooks
from jupyter_mgpu.widgets.memory_rows import FILL_FULL as FILL_FULL
from jupyter_mgpu.widgets.memory_rows import FILL_HIGH as FILL_HIGH
from jupyter_mgpu.widgets.memory_rows import FILL_OK as FILL_OK
from jupyter_mgpu.widgets.memory_rows import device_row as device_row
from jupyter_mgpu.widgets.memory_rows import fill_color as fill_color
from jupyter_mgpu.widgets.memory_rows import timeline_axis as timeline_axis

STATIC = Path(__file__).parent / "static"
MIN_RATE, MAX_RATE = 0.1, 20.0
DEFAULT_RATE = 10.0
MANY_RANKS_RATE = 2.0  # past 16 ranks
WINDOW_SECONDS = 60.0
TIMELINE_STEP = 0.25  # seconds between timeline points sent to the browser (the peak of each step)
TIMELINE_STEP_MANY = 1.0  # the same with more than COMPACT_AT ranks: their timelines are small
TIMELINE_PUSH_EVERY = 0.5  # the timeline scrolls at 2 Hz; bars move at the refresh rate
SHUT_DOWN = "session shut down"


def default_rate(world_size: int) -> float:
    """The refresh rate a dashboard starts with: 10 Hz, 2 Hz past 16 ranks (each push carries every rank,
    and the kernel serializes it on the same cores the cells use)."""
    return DEFAULT_RATE if world_size <= 16 else MANY_RANKS_RATE


def check_refresh_rate(rate: Any) -> float:
    """``rate`` as updates per second, or a one-sentence error when it is not a sane number."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not MIN_RATE <= rate <= MAX_RATE:
        raise MgpuError(f"refresh_rate must be between {MIN_RATE:g} and {MAX_RATE:g} updates per second, got {rate!r}")
    return float(rate)


class MemoryDashboard(anywidget.AnyWidget):
    """Bars, peaks, limits, 60 s timelines and state badges of every device of a session, live."""

    _esm = STATIC / "memory.js"
    _css = STATIC / "memory.css"

    devices: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)  # one dict per rank (see device_row)
    # per rank: [[seconds before now, used bytes], ...]
    timeline: traitlets.List[list[list[float]]] = traitlets.List().tag(sync=True)
    axis = traitlets.Dict().tag(sync=True)  # the timelines' shared axes (see timeline_axis)
    # per rank: [[seconds before now, "rank 1 restarted at 20:31:05"], ...]: where mg.restart started it again
    marks: traitlets.List[list[list[Any]]] = traitlets.List().tag(sync=True)
    # one per host: {"host", "ranks", "text"} (see memory_rows.host_groups); memory.js folds them at many ranks
    groups: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    ended = traitlets.Bool(False).tag(sync=True)  # the session shut down: the last picture, controls off
    window = traitlets.Float(WINDOW_SECONDS).tag(sync=True)
    paused = traitlets.Bool(False).tag(sync=True)
    refresh_rate = traitlets.Float(DEFAULT_RATE).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    updates = traitlets.Int(0).tag(sync=True)
    updated_at = traitlets.Float(0.0).tag(sync=True)

    def __init__(
        self, session: Any = None, refresh_rate: float = DEFAULT_RATE, *, detached: bool = False, **kwargs: Any
    ):
        """A dashboard of ``session`` (default: the current one); ``detached=True`` for one fed by :meth:`update`."""
        rate = check_refresh_rate(refresh_rate)
        if not detached and session is None:
            session = sessmod.current(required=False)
            if session is None:
                raise MgpuError(
                    "no multi-GPU session is running, so there is no memory to show; "
                    "start one with %mgpu_init N or mg.init(N) first"
                )
        if session is not None:
            session.check_alive()
        self.session = session
        self._series: dict[int, deque[list[Any]]] = {}
        self._latest: list[dict[str, Any]] | None = None
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._last_push = 0.0  # monotonic time of the last real push (the refresh-rate limit)
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()  # a push in flight and the final picture never interleave
        self._step = TIMELINE_STEP  # TIMELINE_STEP_MANY once the first samples show more than COMPACT_AT ranks
        self._last_timeline = 0.0
        self._thread: threading.Thread | None = None
        self._unsubscribe: Any = None
        super().__init__(refresh_rate=rate, **kwargs)
        if session is not None:
            from jupyter_mgpu.monitoring.memory_monitor import monitor

            self.title = f"{session.world_size} × {session.device_kind} · cluster {session.cluster.cluster_id}"
            if not session.cluster.spec.telemetry_period:
                self.status = "telemetry is off in this session (started with telemetry_period=0)"
            mon = monitor(session)
            self._unsubscribe = mon.subscribe(self._on_samples)
            session.shutdown_callbacks.append(self._on_session_shutdown)
            self.update(mon.latest())
            self._thread = threading.Thread(target=self._run, name="mgpu-dashboard", daemon=True)
            self._thread.start()

    @traitlets.validate("refresh_rate")
    def _check_rate(self, proposal: Any) -> float:
        try:
            return check_refresh_rate(proposal["value"])
        except MgpuError as exc:
            raise traitlets.TraitError(str(exc)) from None

    @traitlets.observe("paused", "refresh_rate")
    def _controls_changed(self, change: Any) -> None:
        self._wake.set()

    # -- feeding ----------------------------------------------------------------------------
    def _on_samples(self, latest: list[dict[str, Any]]) -> None:
        """Reader-thread callback: remember the samples; push now if the refresh rate allows, else
        leave it to the pusher thread (one wake-up fewer per sample on the common path)."""
        with self._lock:
            self._latest = latest
            self._record(latest)
        if (
            not self.ended
            and not self.paused
            and not self._halt.is_set()
            and time.monotonic() - self._last_push >= 1.0 / self.refresh_rate
        ):
            try:
                if self._push(latest, force=False):
                    self._last_push = time.monotonic()
                return
            except Exception:
                pass
        self._wake.set()

    def _record(self, samples: list[dict[str, Any]]) -> None:
        if not self._series and len(samples) > COMPACT_AT:
            self._step = TIMELINE_STEP_MANY  # many small timelines: a point a second each
        for s in samples:  # called for every sample: kept cheap (same "used" as device_row)
            t = s.get("time")
            used = s.get("allocated_bytes") if "allocated_bytes" in s else s.get("resident_bytes")
            if t is None or used is None:
                continue
            series = self._series.get(s["rank"])
            if series is None:  # one point per TIMELINE_STEP: its latest time and its peak
                series = self._series[s["rank"]] = deque(maxlen=int(self.window / self._step) + 4)
            step = int(t // self._step)
            if series and series[-1][2] == step:
                last = series[-1]
                last[0], last[1] = max(last[0], t), max(last[1], used)
            elif not series or series[-1][0] < t:
                series.append([t, used, step])

    def update(self, samples: list[dict[str, Any]], now: float | None = None) -> None:
        """Show ``samples`` (one per rank, as :func:`jupyter_mgpu.monitoring.memory_monitor` returns them) now."""
        with self._lock:
            self._record(samples)
        self._push(samples, now)

    def _push(self, samples: list[dict[str, Any]], now: float | None = None, force: bool = True) -> bool:
        """Send ``samples`` to the browser; unless ``force``, only what changed (nothing when nothing did).
        Nothing once the session ended: the last picture says so."""
        with self._push_lock:
            if self.ended:
                return False
            now = time.time() if now is None else now
            devices = [device_row(s) for s in sorted(samples, key=lambda s: s["rank"])]
            timeline = None
            if now - self._last_timeline >= TIMELINE_PUSH_EVERY or len(self.timeline) != len(devices):
                timeline = [self._timeline_of(d["rank"], now) for d in devices]
            if not force and timeline is None and same_picture(devices, self.devices):
                return False  # an idle cluster: only the sample times moved
            if timeline is not None:
                self._last_timeline = now
            with self.hold_sync():
                self.devices = devices
                self.groups = host_groups(devices)
                if timeline is not None:
                    self.timeline = timeline
                    self.axis = timeline_axis(timeline, devices, self.window)
                    self.marks = restart_marks(devices, now, self.window)
                self.updates += 1
                self.updated_at = now
            return True

    def _timeline_of(self, rank: int, now: float) -> list[list[float]]:
        """The last ``window`` seconds of one rank, one point (the step's peak) per ``TIMELINE_STEP``."""
        since = now - self.window
        with self._lock:
            return [[round(t - now, 2), used] for t, used, _ in self._series.get(rank, ()) if t >= since]

    def _run(self) -> None:
        while not self._halt.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._halt.is_set():
                break
            if self.paused:
                continue
            wait = 1.0 / self.refresh_rate - (time.monotonic() - self._last_push)
            if wait > 0 and self._halt.wait(wait):
                break
            with self._lock:
                latest = self._latest
            if latest is not None:
                try:
                    if self._push(latest, force=False):  # already recorded by _on_samples
                        self._last_push = time.monotonic()  # rate-limit real pushes only
                except Exception:
                    pass

    # -- lifetime ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop updating (the widget stays on screen with its last picture)."""
        self._halt.set()
        self._wake.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2.0)

    def _on_session_shutdown(self) -> None:
        self.stop()
        try:
            self.end()
        except Exception:  # a closed widget: nothing left to tell
            pass

    def end(self, status: str = SHUT_DOWN) -> None:
        """Show that the session ended: every rank "shut down" with its last figures, ``status`` in the header,
        the controls off; no push after this one (a reader's sample in flight included)."""
        with self._push_lock:
            if self.ended:
                return
            devices = ended_rows(list(self.devices))
            with self.hold_sync():
                self.devices = devices
                self.groups = host_groups(devices)
                self.status = status
                self.ended = True
                self.updates += 1

    def close(self) -> None:
        if hasattr(self, "_halt"):  # not set when the constructor refused its arguments
            self.stop()
        super().close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def dashboard(session: Any = None, refresh_rate: float | None = None) -> MemoryDashboard:
    """The session's memory dashboard (one per session, so every view of it stays in sync)."""
    if refresh_rate is not None:
        refresh_rate = check_refresh_rate(refresh_rate)
    s = session if session is not None else sessmod.current(required=False)
    if s is None:
        raise MgpuError(
            "no multi-GPU session is running, so there is no memory to show; "
            "start one with %mgpu_init N or mg.init(N) first"
        )
    s.check_alive()
    board: MemoryDashboard | None = s.memory_dashboard
    if board is None or not board.running:
        board = s.memory_dashboard = MemoryDashboard(s, refresh_rate or default_rate(s.world_size))
    elif refresh_rate is not None:
        board.refresh_rate = refresh_rate
    return board


def live_threads() -> list[threading.Thread]:
    """Dashboard pusher threads still running (for tests and cleanup checks)."""
    return [t for t in threading.enumerate() if t.name == "mgpu-dashboard"]
