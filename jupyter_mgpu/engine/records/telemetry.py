"""The telemetry record: where each rank's memory sample lives, how it is read, and how the kernel steers it.

Each rank's sampler thread (``engine/records/memory_sampler.py``) rewrites ``<rundir>/telemetry/rank<r>.json``
in place every period: one fixed-size block, JSON padded with spaces. A reader that catches a write
half-done sees JSON that does not parse or whose ``seq`` and ``check`` differ, and skips it. This module
is the format's reading side, kept free of the sampler so the kernel and the server extension (which
only read records) load no more than they need: :func:`read_samples` / :class:`SampleFiles` for the
records, :func:`write_control` for ``telemetry/control.json`` (``period``, ``reset_peak`` counter), which
every sampler applies on its next tick, busy or not. It also reads this process's own memory counters
(:func:`_proc_status`, :func:`reset_peak`), which the samples and the ops' peak measurements are made of.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

DEFAULT_PERIOD = 0.1
MIN_PERIOD = 0.01
MAX_PERIOD = 60.0
TELEMETRY_DIR = "telemetry"
CONTROL_FILE = "control.json"
MAX_SAMPLE_BYTES = 64 * 1024
RECORD_BYTES = 4096

_status_fd: int | None = None
_status_pid: int | None = None


def _proc_status() -> dict[str, int]:
    """VmRSS, VmHWM (peak resident) and VmData of this process, in bytes (one pread of a kept fd)."""
    global _status_fd, _status_pid
    if _status_fd is None or _status_pid != os.getpid():  # a forked child must not read its parent's
        _status_fd, _status_pid = os.open("/proc/self/status", os.O_RDONLY), os.getpid()
    text = os.pread(_status_fd, 8192, 0)
    out = {}
    for key in (b"VmRSS:", b"VmHWM:", b"VmData:"):
        i = text.find(key)
        if i >= 0:
            out[key[:-1].decode()] = int(text[i + len(key) : text.index(b"kB", i)]) * 1024
    return out


def reset_peak() -> None:
    """Reset this process's peak resident memory (VmHWM), and the GPU allocator's peak on GPU."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    from jupyter_mgpu.engine import state as rank_state

    if rank_state.STATE is not None and rank_state.STATE.device_kind == "cuda":
        import torch

        from jupyter_mgpu.engine import cuda_device

        torch.cuda.reset_peak_memory_stats(cuda_device.own_device())  # the sampler thread's own is cuda:0
    from jupyter_mgpu.engine.shards import allocator_budget

    allocator_budget.reset_peak()


def write_control(rundir: str | Path, **changes: Any) -> dict[str, Any]:
    """Kernel side: update ``control.json`` (e.g. ``reset_peak=3``, ``period=0.2``) atomically."""
    directory = Path(rundir) / TELEMETRY_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / CONTROL_FILE
    try:
        ctl = json.loads(path.read_text())
        if not isinstance(ctl, dict):
            ctl = {}
    except (OSError, ValueError):
        ctl = {}
    ctl.update(changes)
    tmp = path.with_suffix(".ctl.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(ctl).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return ctl


def read_sample_file(path: str | Path, cluster_id: str | None = None) -> dict[str, Any] | None:
    """One rank's sample, or None when the file is missing, not ours, not a plain file, or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _trusted(os.fstat(fd)):
            return None
        return parse_sample(os.read(fd, MAX_SAMPLE_BYTES), cluster_id)
    except OSError:
        return None
    finally:
        os.close(fd)


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and st.st_mode & 0o170000 == 0o100000 and st.st_size <= MAX_SAMPLE_BYTES


class SampleFiles:
    """Kept-open sample files (one ``pread`` per read instead of open, fstat, read, close)."""

    def __init__(self) -> None:
        self.fds: dict[str, tuple[int, int]] = {}  # path -> (fd, inode)
        self.last: dict[str, tuple[bytes, dict[str, Any] | None]] = {}  # path -> (raw record, its parse)
        self.lock = threading.RLock()  # the reader thread and reset_peak() both read

    def read(self, path: str, cluster_id: str | None = None) -> dict[str, Any] | None:
        """The sample in ``path`` (samplers rewrite their file in place, so the fd stays valid)."""
        with self.lock:
            return self._read(path, cluster_id)

    def _read(self, path: str, cluster_id: str | None) -> dict[str, Any] | None:
        kept = self.fds.get(path)
        if kept is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                return None
            fst = os.fstat(fd)
            if not _trusted(fst):
                os.close(fd)
                return None
            kept = self.fds[path] = (fd, fst.st_ino)
        try:
            raw = os.pread(kept[0], MAX_SAMPLE_BYTES, 0)
        except OSError:
            self.forget(path)
            return None
        last = self.last.get(path)
        if last is not None and last[0] == raw:  # an unchanged record: no second parse
            return last[1]
        data = parse_sample(raw, cluster_id)
        self.last[path] = (raw, data)
        return data

    def forget(self, path: str) -> None:
        with self.lock:
            kept = self.fds.pop(path, None)
            self.last.pop(path, None)
            if kept is not None:
                os.close(kept[0])

    def close(self) -> None:
        with self.lock:
            for path in list(self.fds):
                self.forget(path)


def parse_sample(raw: bytes, cluster_id: str | None = None) -> dict[str, Any] | None:
    """A sample record's dict, or None when it is malformed, torn or of another cluster."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("rank"), int) or isinstance(data["rank"], bool):
        return None
    if not isinstance(data.get("time"), (int, float)):
        return None
    if "check" in data and data["check"] != data.get("seq"):
        return None  # read while the rank was writing
    if cluster_id is not None and data.get("cluster_id") not in (None, cluster_id):
        return None
    return data


def read_samples(
    rundir: str | Path, cluster_id: str | None = None, ranks: range | list[int] | None = None
) -> dict[int, dict[str, Any]]:
    """The latest sample of every rank (or of ``ranks``) of the cluster in ``rundir``; no torch needed.

    Files owned by another user, links, oversized or malformed files and samples of another
    cluster (``cluster_id``) are skipped.
    """
    out: dict[int, dict[str, Any]] = {}
    directory = Path(rundir) / TELEMETRY_DIR
    if ranks is not None:
        names = [f"rank{r}.json" for r in ranks]
    else:
        try:
            names = os.listdir(directory)
        except OSError:
            return out
    for name in names:
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        data = read_sample_file(directory / name, cluster_id) or read_sample_file(directory / name, cluster_id)
        if data is not None and name == f"rank{data['rank']}.json":
            out[data["rank"]] = data
    return out
