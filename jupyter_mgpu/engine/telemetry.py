"""The engine's memory sampler: a thread that publishes samples out of band, never via ipyparallel.

Each rank atomically rewrites ``<rundir>/telemetry/rank<r>.json`` every ``period`` seconds (default
0.1 s). The thread keeps running while the engine's main thread is busy in a long C++ op (those
release the GIL), so the kernel and the server extension see memory move during a cell.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_PERIOD = 0.1
TELEMETRY_DIR = "telemetry"

_sampler: "Sampler | None" = None


def _proc_status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:", "VmData:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    return out


def reset_peak() -> None:
    """Reset this process's peak resident memory (VmHWM), and the GPU allocator's peak on GPU."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    from . import runtime

    if runtime.STATE is not None and runtime.STATE.device_kind == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()


def _main_thread_state() -> str:
    """``busy`` while the engine's main thread runs something, ``idle`` while it waits for work."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return "busy"
    name = os.path.basename(frame.f_code.co_filename)
    if name in ("selectors.py",) or (frame.f_code.co_name in ("poll", "select") and "zmq" in frame.f_code.co_filename):
        return "idle"
    return "busy"


def sample(state: Any) -> dict[str, Any]:
    """One telemetry sample of this rank."""
    status = _proc_status()
    out: dict[str, Any] = {
        "time": time.time(),
        "rank": state.rank,
        "pid": os.getpid(),
        "device": f"{state.device_kind}:{state.device_index}",
        "kind": state.device_kind,
        "state": _main_thread_state(),
        "op": state.current_op,
        "resident_bytes": status.get("VmRSS", 0),
        "peak_resident_bytes": status.get("VmHWM", 0),
        "budget_bytes": state.budget_bytes,
    }
    if state.device_kind == "cuda":
        from . import cuda_device

        mem = cuda_device.memory()
        out.update(mem)
    return out


class Sampler(threading.Thread):
    """Samples this rank every ``period`` seconds into its telemetry file."""

    def __init__(self, state: Any, period: float = DEFAULT_PERIOD):
        super().__init__(name="mgpu-telemetry", daemon=True)
        self.state = state
        self.period = period
        self.directory = Path(state.rundir) / TELEMETRY_DIR
        self.directory.mkdir(mode=0o700, exist_ok=True)
        self.path = self.directory / f"rank{state.rank}.json"
        self._halt = threading.Event()

    def write_once(self) -> None:
        data = json.dumps(sample(self.state)).encode()
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def run(self) -> None:
        while not self._halt.is_set():
            start = time.monotonic()
            try:
                self.write_once()
            except Exception:  # a sampler must never take its engine down
                pass
            self._halt.wait(max(0.0, self.period - (time.monotonic() - start)))

    def stop(self) -> None:
        self._halt.set()


def maybe_start(state: Any) -> "Sampler | None":
    """Start the sampler unless the cluster was started with telemetry off (period 0)."""
    global _sampler
    period = float(os.environ.get("MGPU_TELEMETRY_PERIOD", DEFAULT_PERIOD))
    if period <= 0:
        return None
    _sampler = Sampler(state, period)
    _sampler.start()
    return _sampler


def set_period(period: float) -> None:
    """Change this rank's sampling period (seconds); 0 pauses sampling."""
    global _sampler
    from . import runtime

    if _sampler is not None:
        _sampler.stop()
        _sampler = None
    if period > 0:
        _sampler = Sampler(runtime.state(), period)
        _sampler.start()


def read_samples(rundir: str | Path) -> dict[int, dict[str, Any]]:
    """The latest sample of every rank of the cluster in ``rundir`` (reader side; no torch needed)."""
    out: dict[int, dict[str, Any]] = {}
    directory = Path(rundir) / TELEMETRY_DIR
    try:
        files = list(directory.glob("rank*.json"))
    except OSError:
        return out
    for f in files:
        try:
            data = json.loads(f.read_text())
            out[int(data["rank"])] = data
        except (OSError, ValueError, KeyError):
            continue
    return out
