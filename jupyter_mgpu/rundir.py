"""Per-cluster private runtime directories: where a cluster's store, state and telemetry live.

Every cluster gets ``<jupyter runtime dir>/jupyter-mgpu/<cluster id>/`` with mode 0700. The kernel,
the engines and the server extension of the same user find each other there; other users cannot
read it. A directory whose kernel is gone is stale: it is cleaned, never reused.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Any

STATE_FILE = "cluster.json"
PROFILE_FILE = "profile.json"  # the session's last mg.profile(), as the sidebar draws it


def base_dir() -> Path:
    """The user's ``jupyter-mgpu`` directory (created 0700 if missing)."""
    override = os.environ.get("JUPYTER_MGPU_RUNTIME_DIR")
    if override:
        root = Path(override)
    else:
        from jupyter_core.paths import jupyter_runtime_dir

        root = Path(jupyter_runtime_dir()) / "jupyter-mgpu"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    return root


def new_cluster_id() -> str:
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def create(cluster_id: str) -> Path:
    """Create a fresh private directory for ``cluster_id``; never reuses an existing one."""
    path = base_dir() / cluster_id
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    (path / "exits").mkdir(mode=0o700)
    return path


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (readers never see a half-written file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            data: dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return None


def complete_json(path: Path) -> bool:
    """True once ``path`` holds a whole JSON document (ipyparallel writes its files non-atomically)."""
    try:
        with open(path) as f:
            json.load(f)
        return True
    except (OSError, ValueError):
        return False


# A process's start, as ``process_start`` gives it, names it against pid reuse. Linux counts it from boot
# (/proc/PID/stat's starttime), so a step of the wall clock (NTP, a VM's time sync) never moves it: psutil's
# create_time adds the boot time /proc/stat gives now, which such a step moves by whole seconds, and a
# watchdog that compared those took a live kernel for gone and ended its cluster as it started (CI,
# session 43). A stamp past SINCE_BOOT_LIMIT is seconds since the epoch: another system's, or a state
# file an older jupyter_mgpu wrote.
SINCE_BOOT_LIMIT = 1e9  # 31 years of uptime
SAME_START_S = 0.5


def process_start(pid: int) -> float:
    """When ``pid`` started: seconds since boot on Linux (immune to clock steps), else since the epoch."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks
    except (OSError, IndexError, ValueError):
        import psutil

        return float(psutil.Process(pid).create_time())


def process_alive(pid: int, create_time: float | None = None) -> bool:
    """True if ``pid`` runs and (when given) started at ``create_time`` (a ``process_start``) — guards
    against pid reuse."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if create_time is not None:
            started = proc.create_time() if create_time >= SINCE_BOOT_LIMIT else process_start(pid)
            if abs(started - create_time) > SAME_START_S:
                return False
        return True
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, OSError):
        return False


def is_private(path: Path) -> bool:
    """The directory belongs to this user and nobody else can enter it."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and (st.st_mode & 0o077) == 0


def cluster_dirs(include_spare: bool = False) -> list[Path]:
    """This user's cluster directories that look valid (private, with a state file).

    Spare directories (a pre-warmed supervisor waiting for ``mg.init``) are skipped unless asked for.
    """
    root = base_dir()
    out = []
    for child in sorted(root.iterdir()):
        state = read_json(child / STATE_FILE) if is_private(child) else None
        if state is not None and (include_spare or state.get("status") != "spare"):
            out.append(child)
    return out


def is_stale(path: Path) -> bool:
    state = read_json(path / STATE_FILE)
    if state is None:
        # a directory being created right now has no state for a moment; give it a grace period
        try:
            return time.time() - path.stat().st_mtime > 30
        except OSError:
            return True
    return not process_alive(int(state["kernel_pid"]), state.get("kernel_create_time"))


def kill_processes_of(path: Path) -> None:
    """SIGKILL this user's processes whose command line names the cluster directory ``path``."""
    import psutil

    marker = str(path)
    for proc in psutil.process_iter(["pid", "uids", "cmdline"]):
        try:
            if (
                proc.info["uids"]
                and proc.info["uids"].real == os.getuid()
                and proc.pid != os.getpid()
                and any(marker in arg for arg in (proc.info["cmdline"] or []))
            ):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def clean_stale() -> list[str]:
    """Remove this user's cluster directories whose kernel is gone, and any process still naming them."""
    removed = []
    root = base_dir()
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink() and is_private(child) and is_stale(child):
            kill_processes_of(child)
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    return removed


def exit_records(path: Path) -> dict[int, dict[str, Any]]:
    """How the cluster's engines that ended did so: rank -> the record in ``exits/<rank>.json``
    (written by the supervisor that reaped it, or by the relay when a remote rank's link ended)."""
    out = {}
    for f in (Path(path) / "exits").glob("*.json"):
        rec = read_json(f)
        if rec is not None:
            out[int(rec["rank"])] = rec
    return out
