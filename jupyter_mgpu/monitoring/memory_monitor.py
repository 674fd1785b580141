"""Live per-device memory in the kernel: a reader thread over the engines' telemetry, with history.

Every session gets one :class:`MemoryMonitor`. Its thread reads the ranks' telemetry files (written
out of band by ``engine/records/telemetry.py``, so they keep coming while an engine is busy) once per sampling
tick, just after the ranks wrote, marks dead ranks within 0.1 s, keeps the last minutes in a ring
buffer and tells subscribers (the dashboard) about every new sample. A rank started again by ``mg.restart``
(a new engine pid) keeps its history: a ``restarted`` record marks the moment, and its rows carry the
times (``restarts``), which the dashboard draws on the rank's timeline. ``mg.memory()``,
``mg.memory_history()`` and ``mg.reset_peak()`` read it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.records import telemetry as tele
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session import core as sessmod
from jupyter_mgpu.session import lifecycle

POLL_PERIOD = 0.1  # the reader's tick: changed samples of every rank, exits, pids
READ_OFFSET = 0.025  # seconds after the samplers' tick the reader reads (their writes have landed)
EXITS_CHECK_EVERY = 3  # ticks between looks at the exits records
PID_CHECK_EVERY = 10  # polls between checks that engine pids still run (a dead supervisor writes no exits)
HISTORY_SECONDS = 600.0
# what the ring buffer keeps of each sample (the rest is in the latest sample only)
HISTORY_FIELDS = (
    "time",
    "state",
    "op",
    "resident_bytes",
    "peak_resident_bytes",
    "data_bytes",
    "budget_bytes",
    "allocated_bytes",
    "reserved_bytes",
    "peak_allocated_bytes",
    "total_bytes",
)

Listener = Callable[[list[dict[str, Any]]], None]


def _pid_gone(pid: Any) -> bool:
    """True when ``pid`` no longer runs (missing or a zombie); cheap enough to ask every poll."""
    if not isinstance(pid, int):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X")


class MemoryMonitor:
    """Polls one session's telemetry in a background thread; keeps the latest sample and a history."""

    def __init__(self, session: Any, poll: float = POLL_PERIOD, history_seconds: float = HISTORY_SECONDS):
        self.session = session
        self.poll = poll
        self.history_seconds = history_seconds
        period = session.cluster.spec.telemetry_period or tele.DEFAULT_PERIOD
        self._history: dict[int, deque[tuple[Any, ...]]] = {
            r: deque(maxlen=int(history_seconds / max(period, tele.MIN_PERIOD)) + 16) for r in range(session.world_size)
        }
        self._latest: list[dict[str, Any]] = [self._placeholder(r) for r in range(session.world_size)]
        self._seen: dict[int, tuple[float, int]] = {}
        self._pids: dict[int, int] = {}  # each rank's engine pid when last polled: a new one is a restart
        self._restarts: dict[int, list[float]] = {}  # when each rank was started again (epoch seconds)
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset_count = 0
        self._polls = 0
        self._files = tele.SampleFiles()  # closed when the reader thread ends
        self.paused = False  # True: the thread stops reading (benchmarks compare with telemetry off)

    def _placeholder(self, rank: int) -> dict[str, Any]:
        off = not self.session.cluster.spec.telemetry_period
        return {"rank": rank, "time": None, "state": "unknown" if off else "starting"}

    # -- lifetime ---------------------------------------------------------------------------
    def start(self) -> MemoryMonitor:
        if self._thread is None:
            self.poll_once()
            self._thread = threading.Thread(target=self._run, name="mgpu-memory-reader", daemon=True)
            self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the reader thread (called by ``Session.shutdown``); listeners hear nothing more."""
        self._halt.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._lock:
            self._listeners.clear()

    def _run(self) -> None:
        # The samplers write at multiples of their period on the host clock; reading READ_OFFSET
        # later takes every rank's new sample in one wake-up (inotify woke us once per rank, and
        # each wake-up costs this kind of VM ~0.1 ms of CPU).
        try:
            while not self._halt.is_set():
                if not self.session.alive:
                    break
                time.sleep(self.poll - (time.time() - READ_OFFSET) % self.poll)  # cheaper than a timed wait here
                if self._halt.is_set():
                    break
                if self.paused:
                    continue
                try:
                    self.poll_once()
                except Exception:  # a reader must never die of one bad read
                    pass
        finally:
            self._files.close()

    # -- reading ----------------------------------------------------------------------------
    def poll_once(self, ranks: set[int] | None = None) -> bool:
        """Read the telemetry of every rank (or just ``ranks``, without the dead-engine checks) now;
        record new samples; notify listeners. True if anything changed."""
        cluster = self.session.cluster
        wanted = (
            range(self.session.world_size)
            if ranks is None
            else sorted(r for r in ranks if 0 <= r < self.session.world_size)
        )
        samples = self._read_changed(cluster, wanted)
        dead = {}
        check_pids = False
        if ranks is None:
            self._polls += 1
            try:  # a cheap listing first (exits() parses every record), every few ticks: dead within 0.3 s
                if self._polls % EXITS_CHECK_EVERY == 0 and os.listdir(os.path.join(cluster.path, "exits")):
                    dead = cluster.exits()
            except OSError:
                pass
            # the exits record is the fast path; engines on other hosts have only that
            check_pids = self._polls % PID_CHECK_EVERY == 0 and getattr(cluster, "pid_checks", True)
        changed = False
        restarting = set(getattr(cluster, "restarting", ()) or ())
        with self._lock:
            latest = list(self._latest)
            for r in wanted:
                pid = cluster.engine_pids.get(r)
                s = samples.get(r)
                if self._note_restart(r, pid, s):
                    changed = True
                if s is not None and pid is not None and s.get("pid") != pid:
                    s = None  # a file from another process (a stale cluster): ignored
                prev = latest[r]
                if s is not None and (s["time"], s.get("seq", 0)) != self._seen.get(r):
                    self._seen[r] = (s["time"], s.get("seq", 0))
                    row = dict(s)
                    self._history[r].append(tuple(row.get(k) for k in HISTORY_FIELDS))
                    changed = True
                else:
                    row = dict(prev)
                if r in dead or (check_pids and pid is not None and prev.get("state") != "dead" and _pid_gone(pid)):
                    if row.get("state") != "dead":
                        changed = True
                        row["state"] = "dead"
                        row["op"] = None
                        row["died_at"] = dead.get(r, {}).get("time") or time.time()
                        self._history[r].append(
                            tuple(
                                "dead" if k == "state" else (row["died_at"] if k == "time" else row.get(k))
                                for k in HISTORY_FIELDS
                            )
                        )
                if r in restarting and s is None and row.get("state") == "dead":
                    row["state"], changed = "restarting", True  # mg.restart starts it again
                if r in self._restarts:
                    row["restarts"] = list(self._restarts[r])
                latest[r] = row
            self._latest = latest
            listeners = list(self._listeners) if changed else []
        for fn in listeners:
            try:
                fn(latest)
            except Exception:
                pass
        return changed

    def _note_restart(self, rank: int, pid: Any, sample: dict[str, Any] | None) -> bool:
        """Whether ``rank``'s engine pid changed since the last poll (``mg.restart`` started it again): its
        history gets a ``restarted`` record, before the new engine's first sample, and its rows the time.
        A restart begun before this reader saw the death (a poll misses a rank dead for less than its
        exit checks' 0.3 s) first records the ``dead`` one, so the history always tells the rank died.
        Called under the lock."""
        known = self._pids.get(rank)
        if pid is not None:
            self._pids[rank] = pid
        if known is None or pid is None or pid == known:
            return False
        now = time.time()
        if sample is not None and sample.get("pid") == pid and isinstance(sample.get("time"), (int, float)):
            now = min(now, float(sample["time"]) - 1e-3)
        ring, state = self._history[rank], HISTORY_FIELDS.index("state")
        if not ring or ring[-1][state] != "dead":
            last = self._latest[rank]
            ring.append(
                tuple(
                    "dead" if k == "state" else now - 2e-3 if k == "time" else None if k == "op" else last.get(k)
                    for k in HISTORY_FIELDS
                )
            )
        self._restarts.setdefault(rank, []).append(now)
        self._history[rank].append(
            tuple(now if k == "time" else "restarted" if k == "state" else None for k in HISTORY_FIELDS)
        )
        return True

    def _read_changed(self, cluster: Any, ranks: Any) -> dict[int, dict[str, Any]]:
        """The current sample of each of ``ranks`` (kept-open files: one ``pread`` each, parsed only
        when the bytes changed; the caller skips samples it has seen)."""
        out = {}
        directory = os.path.join(cluster.path, tele.TELEMETRY_DIR)
        for r in ranks:
            data = self._files.read(os.path.join(directory, f"rank{r}.json"), cluster.cluster_id)
            if data is not None and data["rank"] == r:
                out[r] = data
        return out

    def latest(self) -> list[dict[str, Any]]:
        """The latest sample of every rank, in rank order (copies)."""
        with self._lock:
            return [dict(s) for s in self._latest]

    def history(self, seconds: float) -> list[dict[str, Any]]:
        """Samples of the last ``seconds``, oldest first, one dict per sample and rank."""
        since = time.time() - seconds
        rows = []
        with self._lock:
            for r, ring in self._history.items():
                for rec in ring:
                    if rec[0] is not None and rec[0] >= since:
                        row = {"rank": r}
                        row.update((k, v) for k, v in zip(HISTORY_FIELDS, rec) if v is not None)
                        rows.append(row)
        rows.sort(key=lambda row: (row["time"], row["rank"]))
        return rows

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(latest)`` from the reader thread after every change; returns an unsubscribe function."""
        with self._lock:
            self._listeners.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._listeners:
                    self._listeners.remove(fn)

        return unsubscribe

    def reset_peak(self, timeout: float = 2.0) -> None:
        """Reset peak memory on every live rank out of band (works while a rank is busy)."""
        with self._lock:
            self._reset_count += 1
            n = self._reset_count
        tele.write_control(self.session.cluster.path, reset_peak=n)
        deadline = time.monotonic() + timeout
        while True:
            self.poll_once()
            waiting = [s["rank"] for s in self.latest() if s["state"] != "dead" and s.get("peak_reset", 0) < n]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise MgpuError(f"rank {waiting[0]} did not reset its peak within {timeout:g} s")
            time.sleep(0.01)


def monitor(session: Any = None) -> MemoryMonitor:
    """The running memory monitor of ``session`` (default: the current one), started on first use."""
    s = session if session is not None else lifecycle.current()
    s.check_alive()
    mon: MemoryMonitor | None = s.memory_monitor
    if mon is None:
        mon = s.memory_monitor = MemoryMonitor(s)
        callbacks = getattr(s, "shutdown_callbacks", None)
        if callbacks is not None:
            callbacks.append(mon.stop)
    return mon.start()


def _on_session_start(session: Any) -> None:
    if session.cluster.spec.telemetry_period:
        monitor(session)


def _frame(rows: list[dict[str, Any]]) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise MgpuError(
            "as_frame=True needs pandas; install it (pip install pandas) or use the list of dicts"
        ) from None
    return pd.DataFrame(rows)


def memory(session: Any = None, as_frame: bool = False) -> Any:
    """The latest memory sample of every rank, a list of dicts in rank order.

    Each has ``rank``, ``time`` (epoch seconds of the sample), ``state`` (idle, busy, dead, starting),
    ``op`` and, on CPU virtual devices, ``resident_bytes``, ``peak_resident_bytes``, ``budget_bytes``;
    on GPUs ``allocated_bytes``, ``reserved_bytes``, ``peak_allocated_bytes``, ``total_bytes``; and
    ``failure_held_bytes`` (0 when nothing is held): the bytes the rank's last failure keeps in its frames for
    ``%mgpu_debug`` (``%mgpu_debug --release`` frees them). ``as_frame=True`` gives a pandas DataFrame.
    """
    mon = monitor(session)
    mon.poll_once()
    rows = [{**r, "failure_held_bytes": r.get("failure_held_bytes", 0)} for r in mon.latest()]
    return _frame(rows) if as_frame else rows


def memory_history(minutes: float = 1.0, session: Any = None, as_frame: bool = False) -> Any:
    """Every sample of the last ``minutes`` (at most 10), oldest first: dicts with rank, time, state, bytes."""
    limit = HISTORY_SECONDS / 60
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not 0 < minutes <= limit:
        raise MgpuError(f"minutes must be more than 0 and at most {limit:g} (the history kept), got {minutes!r}")
    mon = monitor(session)
    mon.poll_once()
    rows = mon.history(minutes * 60)
    return _frame(rows) if as_frame else rows


def reset_peak(session: Any = None, timeout: float = 2.0) -> None:
    """Reset the peak memory (peak resident / max allocated) on every rank; returns when all did."""
    s = session if session is not None else lifecycle.current()
    s.check_alive()
    if not s.cluster.spec.telemetry_period:  # no sampler to ask out of band: go through the engines
        s.run(tele.reset_peak, label="reset_peak")
        return
    monitor(s).reset_peak(timeout)


def live_threads() -> list[threading.Thread]:
    """The reader threads of this module still running (for tests and cleanup checks)."""
    return [t for t in threading.enumerate() if t.name == "mgpu-memory-reader"]


if _on_session_start not in sessmod.session_start_hooks:
    sessmod.session_start_hooks.append(_on_session_start)
