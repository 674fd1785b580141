"""The engine's memory sampler: a thread that publishes this rank's samples out of band, never via ipyparallel.

Each rank rewrites its record ``<rundir>/telemetry/rank<r>.json`` in place every ``period`` seconds
(default 0.1 s): one ``pwrite`` of a fixed-size block (JSON padded with spaces), about 1 µs where a
write-and-rename costs 100+ µs. The record's format, and how the kernel and the server extension read
it, are ``engine/records/telemetry.py``'s. The thread keeps running while the engine's main thread is
busy in a long C++ op (those release the GIL), so the kernel and the server extension see memory move
during a cell. It applies the kernel's ``telemetry/control.json`` (period, peak resets) on its next
tick, busy or not.

Sample keys (plain JSON, read by the kernel and by the server extension):
``time, rank, pid, cluster_id, device, kind, state (idle|busy), op, where (what the main thread does:
state running|collective|idle, since, collective, line, group, key, fp), period, seq,
resident_bytes, peak_resident_bytes, baseline_resident_bytes, data_bytes, budget_bytes,
peak_reset`` and on GPU ``allocated_bytes, reserved_bytes, peak_allocated_bytes, free_bytes,
total_bytes, name`` (+ ``nvml_used_bytes`` where nvidia-ml-py is installed); ``failure_held_bytes`` while
the last failure's frames, kept for ``%mgpu_debug``, hold tensors (``engine/shards/held_failure.py``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.records.telemetry import (
    CONTROL_FILE,
    DEFAULT_PERIOD,
    MAX_PERIOD,
    MIN_PERIOD,
    RECORD_BYTES,
    TELEMETRY_DIR,
    _proc_status,
    reset_peak,
)
from jupyter_mgpu.engine.shards import held_failure
from jupyter_mgpu.engine.watch.main_stack import main_code

if TYPE_CHECKING:
    from jupyter_mgpu.engine.state import EngineState

_sampler: Sampler | None = None


def _main_thread_state(state: EngineState) -> str:
    """``busy`` while the engine's main thread runs something, ``idle`` while it waits for work."""
    if getattr(state, "current_op", None):
        return "busy"
    code = main_code()  # the frame read and let go at once (engine/watch/main_stack.py says why)
    if code is None:
        return "busy"
    if os.path.basename(code.co_filename) == "selectors.py" or (
        code.co_name in ("poll", "select") and "zmq" in code.co_filename
    ):
        return "idle"
    return "busy"


def _where(state: EngineState) -> dict[str, Any] | None:
    """What the rank does now (``engine/watch/collective_watch.py``): running, in a collective, or idle."""
    try:
        from jupyter_mgpu.engine.watch import collective_watch

        now = collective_watch.where(state)
        if now.get("state") in ("collective", "running"):  # the user's frames: a hang at many ranks is a tree
            now["stack"] = collective_watch.stack()
        return now
    except Exception:  # a half-made engine (no state yet): no answer rather than no sample
        return None


def sample(state: EngineState) -> dict[str, Any]:
    """One telemetry sample of this rank (no ipyparallel, no GIL-holding work beyond a few reads)."""
    status = _proc_status()
    out: dict[str, Any] = {
        "time": time.time(),
        "rank": state.rank,
        "pid": os.getpid(),
        "cluster_id": getattr(state, "cluster_id", None),
        "device": f"{state.device_kind}:{state.device_index}",
        "kind": state.device_kind,
        "state": _main_thread_state(state),
        "op": state.current_op,
        "where": _where(state),
        "resident_bytes": status.get("VmRSS", 0),
        "peak_resident_bytes": status.get("VmHWM", 0),
        "data_bytes": status.get("VmData", 0),
        "budget_bytes": state.budget_bytes,
    }
    held = held_failure.held_bytes()
    if held:  # the last failure's frames, kept for %mgpu_debug, hold these tensor bytes
        out["failure_held_bytes"] = held
    host = getattr(state, "host", None)
    if host:  # a cluster across hosts: every view labels the rank host:kind:index and groups by host
        out["host"] = host
        out["device"] = f"{host}:{out['device']}"
    if state.device_kind == "cuda":
        from jupyter_mgpu.engine import cuda_device

        out.update(cuda_device.memory())
    else:
        from jupyter_mgpu.engine.shards import allocator_budget, budget

        if budget.mode() == "allocator":  # the budget's own count: live tensor bytes, as on a GPU
            used = allocator_budget.allocated()
            out.update(
                allocated_bytes=used,
                peak_allocated_bytes=allocator_budget.peak(),
                free_bytes=max(0, state.budget_bytes - used),
            )
    return out


CONTROL_EVERY = 3  # ticks between looks at control.json: a reset or a new period applies within 0.3 s


class Sampler(threading.Thread):
    """Samples this rank every ``period`` seconds into its telemetry file."""

    def __init__(self, state: EngineState, period: float = DEFAULT_PERIOD) -> None:
        super().__init__(name="mgpu-telemetry", daemon=True)
        self.state = state
        self.period = period
        self.directory = Path(state.rundir) / TELEMETRY_DIR
        self.directory.mkdir(mode=0o700, exist_ok=True)
        self.path = self.directory / f"rank{state.rank}.json"
        self.control = self.directory / CONTROL_FILE
        self.seq = 0
        self.peak_reset = 0
        self.baseline = _proc_status().get("VmRSS", 0)  # the engine's own runtime, before user code
        self._control_mtime: float | None = None
        self._halt = threading.Event()
        self._resume = threading.Event()
        self._fd: int | None = None
        self._written = RECORD_BYTES
        self._write_lock = threading.Lock()  # the thread's ticks and publish_now() from the main thread

    def apply_control(self) -> None:
        """Apply the kernel's ``control.json`` (period, peak resets) if it changed since last tick."""
        try:
            st = os.stat(self.control)
        except OSError:
            return
        if st.st_mtime == self._control_mtime or st.st_uid != os.getuid():
            return
        self._control_mtime = st.st_mtime
        try:
            ctl = json.loads(self.control.read_text())
        except (OSError, ValueError):
            return
        want = ctl.get("reset_peak")
        if isinstance(want, int) and want > self.peak_reset:
            reset_peak()
            self.peak_reset = want
        period = ctl.get("period")
        if isinstance(period, (int, float)) and MIN_PERIOD <= period <= MAX_PERIOD:
            self.period = float(period)

    def write_once(self) -> None:
        with self._write_lock:
            self._write()

    def _write(self) -> None:
        self.seq += 1
        data = {
            "seq": self.seq,
            **sample(self.state),
            "period": self.period,
            "peak_reset": self.peak_reset,
            "baseline_resident_bytes": self.baseline,
        }
        if isinstance(data.get("op"), str):
            data["op"] = data["op"][:200]
        data["check"] = self.seq  # last key: a torn read has the new seq with an old check, or no JSON
        payload = json.dumps(data).encode()
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            self._written = RECORD_BYTES  # a fresh file may hold an older, longer record: cover it once
        # pad only over what the previous record occupied: less to copy every tick
        os.pwrite(self._fd, payload.ljust(self._written), 0)
        self._written = len(payload)

    def run(self) -> None:
        while not self._halt.is_set():
            if self.period <= 0:  # paused by set_period(0): no work at all until resumed
                self._resume.wait()
                self._resume.clear()
                continue
            try:
                if self.seq % CONTROL_EVERY == 0:  # a stat per tick costs more than the sample itself here
                    self.apply_control()
                self.write_once()
                if self.seq == 1:
                    from jupyter_mgpu.engine.records.startup_marks import mark

                    mark(self.state.rundir, f"telemetry.first.{self.state.rank}")
            except Exception:  # a sampler must never take its engine down
                pass
            # sleep to the next multiple of the period on the host's clock: every rank writes at the
            # same moment, so the kernel's reader wakes once per tick, not once per rank; a plain
            # sleep costs this VM less than a timed wait on an event (stop() is seen within a period)
            time.sleep(self.period - time.time() % self.period if self.period > 0 else 0)

    def set_period(self, period: float) -> None:
        self.period = period
        self._resume.set()

    def stop(self) -> None:
        self._halt.set()
        self._resume.set()


def maybe_start(state: EngineState) -> Sampler | None:
    """Start the sampler unless the cluster was started with telemetry off (period 0)."""
    global _sampler
    period = float(os.environ.get("MGPU_TELEMETRY_PERIOD", DEFAULT_PERIOD))
    if period <= 0:
        return None
    _sampler = Sampler(state, max(MIN_PERIOD, min(MAX_PERIOD, period)))
    _sampler.start()
    return _sampler


def publish_now() -> None:
    """Write a sample now, off the period (a rank stopping at a pdb prompt says so at once)."""
    if _sampler is not None and _sampler.period > 0:
        _sampler.write_once()


def set_period(period: float) -> None:
    """Change this rank's sampling period (seconds); 0 pauses sampling (the thread then does no work)."""
    global _sampler
    from jupyter_mgpu.engine import state as rank_state

    if (
        isinstance(period, bool)
        or not isinstance(period, (int, float))
        or not (period == 0 or MIN_PERIOD <= period <= MAX_PERIOD)
    ):
        raise ValueError(f"the sampling period must be 0 (off) or {MIN_PERIOD}-{MAX_PERIOD:g} s, got {period!r}")
    if _sampler is not None:
        _sampler.set_period(float(period))
    elif period > 0:
        _sampler = Sampler(rank_state.get(), float(period))
        _sampler.start()
