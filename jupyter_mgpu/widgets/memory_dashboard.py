"""The live memory dashboard: one bar and a 60 s timeline per device, updated from a kernel thread.

``mg.dashboard()`` (and ``%mgpu_init``) shows the session's :class:`MemoryDashboard`, an anywidget
whose ES module (``static/memory.js``) draws the bars. A thread in the kernel pushes the memory
monitor's samples into the widget's traitlets at the chosen refresh rate, so the bars keep moving
while another cell runs. Every view of one dashboard shares its model, so all views stay in sync;
the pause button and the refresh-rate control of any view steer them all.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from jupyter_mgpu.engine.records.memory_figures import figures
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.units import format_bytes
from jupyter_mgpu.widgets.colors import rank_color

STATIC = Path(__file__).parent / "static"
MIN_RATE, MAX_RATE = 0.1, 20.0
DEFAULT_RATE = 10.0
WINDOW_SECONDS = 60.0
TIMELINE_STEP = 0.25  # seconds between timeline points sent to the browser (the peak of each step)
TIMELINE_PUSH_EVERY = 0.5  # the timeline scrolls at 2 Hz; bars move at the refresh rate
# bar colours by fraction of the device used, like Dask's worker-memory bars
FILL_OK, FILL_HIGH, FILL_FULL, FILL_DEAD = "#1f77b4", "#ff7f0e", "#d62728", "#9e9e9e"
HIGH_FRACTION, FULL_FRACTION = 0.6, 0.85


def _visible(row: dict[str, Any]) -> dict[str, Any]:
    """What of a device row can change the picture: byte counts to the MiB, not the sample time."""
    out = {k: v for k, v in row.items() if k not in ("time", "fraction", "text", "tips")}
    for k in ("used", "reserved", "peak"):
        if isinstance(out.get(k), int):
            out[k] >>= 20
    return out


def _same_picture(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> bool:
    """True when two lists of device rows differ at most in their sample times and by less than 1 MiB
    (an idle engine's resident size wobbles by a few pages; the bars show MiB at best)."""
    return len(new) == len(old) and all(_visible(a) == _visible(b) for a, b in zip(new, old))


def check_refresh_rate(rate: Any) -> float:
    """``rate`` as updates per second, or a one-sentence error when it is not a sane number."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not MIN_RATE <= rate <= MAX_RATE:
        raise MgpuError(f"refresh_rate must be between {MIN_RATE:g} and {MAX_RATE:g} updates per second, got {rate!r}")
    return float(rate)


def fill_color(fraction: float | None, state: str) -> str:
    """The bar colour for a device ``fraction`` full: blue, orange past 60 %, red past 85 %, grey when dead."""
    if state == "dead":
        return FILL_DEAD
    if fraction is None or fraction < HIGH_FRACTION:
        return FILL_OK
    return FILL_HIGH if fraction < FULL_FRACTION else FILL_FULL


def device_row(sample: dict[str, Any]) -> dict[str, Any]:
    """What one bar shows, from one telemetry sample: used, reserved, peak, limit (``engine/records/memory_figures``:
    the convention of every view), fraction, colours, and the texts (formatted here, never in the browser)."""
    rank = int(sample["rank"])
    state = sample.get("state") or "unknown"
    f = figures(sample)
    used, reserved, peak, limit, labels = f["used"], f["reserved"], f["peak"], f["limit"], f["labels"]
    fraction = (used / limit) if used is not None and limit else None
    size: Callable[[Any], str] = lambda n: "?" if n is None else format_bytes(n)  # noqa: E731
    text = (
        size(used)
        + (f" / {size(limit)}" if limit else "")
        + (f" · peak {size(peak)}" if peak else "")
        + (f" · reserved {size(reserved)}" if reserved is not None else "")
    )
    tips = {
        "used": f"{labels['used']} {size(used)}",
        "reserved": f"{labels['reserved']} {size(reserved)}",
        "peak": f"{labels['peak']} {size(peak)}",
        "limit": f"{labels['limit']} {size(limit)}",
        "baseline": f"engine runtime {size(f['baseline'])}",
    }
    return {
        "rank": rank,
        "device": sample.get("device") or f"rank {rank}",
        "host": sample.get("host") or "",  # set in clusters across hosts: the rows are grouped under it
        "name": sample.get("name") or "",
        "color": rank_color(rank),
        "state": state,
        "op": sample.get("op") or "",
        "time": sample.get("time"),
        "used": used,
        "reserved": reserved,
        "peak": peak,
        "limit": limit,
        "baseline": f["baseline"],
        "fraction": fraction,
        "fill": fill_color(fraction, state),
        "labels": labels,
        "text": text,
        "tips": tips,
    }


def timeline_axis(timeline: list[list[list[float]]], devices: list[dict[str, Any]], window: float) -> dict[str, Any]:
    """The timelines' shared axes: a byte range that fits what they show (labelled), and the seconds they span
    (the time since the first point, up to ``window``, so a young dashboard is not squeezed to the right)."""
    seen = [v for pts in timeline for _, v in pts if v is not None] + [d["used"] for d in devices if d["used"]]
    hi, lo = (max(seen), min(seen)) if seen else (1.0, 0.0)
    pad = 0.1 * (hi - lo) + 0.05 * hi
    lo, hi = max(0.0, lo - pad), hi + pad
    oldest = -min([pts[0][0] for pts in timeline if pts] + [0.0])
    span = min(window, max(10.0, 10.0 * -(-oldest // 10)))  # whole tens of seconds, at least 10
    return {
        "lo": lo,
        "hi": hi,
        "lo_text": format_bytes(lo),
        "hi_text": format_bytes(hi),
        "span": span,
        "span_text": f"−{span:.0f} s",
    }


class MemoryDashboard(anywidget.AnyWidget):
    """Bars, peaks, limits, 60 s timelines and state badges of every device of a session, live."""

    _esm = STATIC / "memory.js"
    _css = STATIC / "memory.css"

    devices: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)  # one dict per rank (see device_row)
    # per rank: [[seconds before now, used bytes], ...]
    timeline: traitlets.List[list[list[float]]] = traitlets.List().tag(sync=True)
    axis = traitlets.Dict().tag(sync=True)  # the timelines' shared axes (see timeline_axis)
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
            not self.paused
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
        for s in samples:  # called for every sample: kept cheap (same "used" as device_row)
            t = s.get("time")
            used = s.get("allocated_bytes") if "allocated_bytes" in s else s.get("resident_bytes")
            if t is None or used is None:
                continue
            series = self._series.get(s["rank"])
            if series is None:  # one point per TIMELINE_STEP: its latest time and its peak
                series = self._series[s["rank"]] = deque(maxlen=int(self.window / TIMELINE_STEP) + 4)
            step = int(t // TIMELINE_STEP)
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
        """Send ``samples`` to the browser; unless ``force``, only what changed (nothing when nothing did)."""
        now = time.time() if now is None else now
        devices = [device_row(s) for s in sorted(samples, key=lambda s: s["rank"])]
        timeline = None
        if now - self._last_timeline >= TIMELINE_PUSH_EVERY or len(self.timeline) != len(devices):
            timeline = [self._timeline_of(d["rank"], now) for d in devices]
        if not force and timeline is None and _same_picture(devices, self.devices):
            return False  # an idle cluster: only the sample times moved
        if timeline is not None:
            self._last_timeline = now
        with self.hold_sync():
            self.devices = devices
            if timeline is not None:
                self.timeline = timeline
                self.axis = timeline_axis(timeline, devices, self.window)
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
            self.status = "session shut down"
        except Exception:
            pass

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
        board = s.memory_dashboard = MemoryDashboard(s, refresh_rate or DEFAULT_RATE)
    elif refresh_rate is not None:
        board.refresh_rate = refresh_rate
    return board


def live_threads() -> list[threading.Thread]:
    """Dashboard pusher threads still running (for tests and cleanup checks)."""
    return [t for t in threading.enumerate() if t.name == "mgpu-dashboard"]
