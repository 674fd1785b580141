"""What the sidebar shows, without tornado: this user's clusters, their ranks' memory, the host's devices.

The manager reads only this user's private runtime directories (``rundir.cluster_dirs()``: owned by
this uid, mode 0700, with a state file), skips stale ones (kernel gone), and reads each rank's latest
telemetry sample from the files the engines' sampler threads write. It never talks to the engines
through ipyparallel (a busy engine would not answer) and never imports torch (a server must stay
light); GPUs are read through NVML (nvidia-ml-py) when it is installed, else the devices are the CPU
virtual devices of the running clusters. Stopping a cluster signals only processes whose command
line names that cluster's directory and that belong to this user.

Each cluster names the server kernel that started it (``kernel_id``, see ``server/kernels.py``) so the
labextension can tell the current notebook's cluster from other notebooks'. Each rank is in a snapshot
once: without NVML the host's devices are the clusters' CPU virtual devices, i.e. their ranks, which the
stream's frame already carries under ``clusters``; the frame's ``devices`` leaves them out.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.engine.records.memory_figures import figures, used_of_limit
from jupyter_mgpu.engine.records.telemetry import read_samples
from jupyter_mgpu.engine.watch import collective_watch
from jupyter_mgpu.server import gpu_memory
from jupyter_mgpu.server.kernels import KernelPids, kernel_of

CLUSTER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
STOP_GRACE = 3.0
RESTART_WINDOW = 30.0  # a kernel's new cluster starting within this many seconds of its last one: restarting


class ClusterNotFound(LookupError):
    """No running cluster of this user has that id (or the id is malformed)."""


@dataclass(frozen=True)
class StopResult:
    cluster_id: str
    signalled: list[int]
    killed: list[int]
    remaining: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster_id": self.cluster_id,
            "signalled": self.signalled,
            "killed": self.killed,
            "remaining": self.remaining,
        }


def _process_of_cluster(pid: Any, path: Path) -> psutil.Process | None:
    """The live process ``pid`` if it belongs to this user and its command line names ``path``."""
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE or proc.uids().real != os.getuid():
            return None
        cmdline = proc.cmdline()
    except (psutil.Error, TypeError, ValueError, OSError):
        return None
    text = str(path)
    return proc if any(text in arg for arg in cmdline) else None


def _rank_entry(
    rank: int, pid: Any, sample: dict[str, Any] | None, alive: bool, now: float, host: str | None = None
) -> dict[str, Any]:
    """One rank of a cluster payload: memory used/limit in bytes (the convention of every view, see
    ``engine/records/memory_figures``) and as text, state, what it does now (``activity``: running which line,
    waiting in which collective, for how long), age of the telemetry sample; ``host`` in a cluster
    across hosts (the sidebar groups ranks under it)."""
    entry: dict[str, Any] = {
        "rank": rank,
        "pid": int(pid) if pid is not None else None,
        "alive": alive,
        "host": host or (sample or {}).get("host"),
        "device": None,
        "kind": None,
        "state": "dead" if not alive else "unknown",
        "op": None,
        "activity": None,
        "used_bytes": 0,
        "peak_bytes": 0,
        "total_bytes": 0,
        "figures": "",
        "sample_age_s": None,
    }
    if sample is None:
        return entry
    f = figures(sample)
    used = int(f["used"] or 0)
    entry.update(
        device=sample.get("device"),
        kind=sample.get("kind"),
        state=(sample.get("state") or "unknown") if alive else "dead",
        op=sample.get("op"),
        activity=collective_watch.describe(sample.get("where"), now) if alive else None,
        used_bytes=used,
        peak_bytes=int(f["peak"] or used),
        total_bytes=int(f["limit"] or 0),
        figures=used_of_limit(sample),
        sample_age_s=round(max(0.0, now - float(sample.get("time", now))), 3),
    )
    return entry


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class ClusterManager:
    """Discovers and describes this user's jupyter_mgpu clusters; stops one on request.

    ``dirs`` (a callable returning candidate cluster directories) and ``nvml`` exist for tests and
    for servers that know better; by default they are ``rundir.cluster_dirs`` and nvidia-ml-py.
    ``kernels`` gives ``{pid: kernel id}`` of the server's kernels (``server/kernels.kernel_pids``); without
    it every cluster's ``kernel_id`` is None.
    """

    def __init__(
        self, dirs: Callable[[], list[Path]] | None = None, use_nvml: bool = True, kernels: KernelPids | None = None
    ):
        self._dirs = dirs or rd.cluster_dirs
        self._kernels = kernels
        self._use_nvml = use_nvml and not os.environ.get("JUPYTER_MGPU_FORCE_CPU")
        self._seen: dict[Any, dict[Any, float]] = {}  # kernel pid -> {cluster id: when last seen}

    # -- discovery -----------------------------------------------------------------------------
    def _live_dirs(self) -> list[Path]:
        out: list[Path] = []
        try:
            candidates = self._dirs()
        except OSError:
            return out
        for path in candidates:
            # re-check here too: a custom ``dirs`` must not widen what this user can see or stop
            if not rd.is_private(path) or rd.is_stale(path):
                continue
            state = rd.read_json(path / rd.STATE_FILE)
            if state is not None and state.get("status") != "spare":  # spare: a pre-warmed supervisor
                out.append(path)
        return out

    def locate(self, cluster_id: str) -> tuple[Path, dict[str, Any]]:
        """The directory and state of this user's running cluster ``cluster_id``, else ClusterNotFound."""
        if not isinstance(cluster_id, str) or not CLUSTER_ID_RE.match(cluster_id):
            raise ClusterNotFound(f"malformed cluster id {cluster_id!r}")
        for path in self._live_dirs():
            state = rd.read_json(path / rd.STATE_FILE)
            if path.name == cluster_id and state is not None and state.get("cluster_id") == cluster_id:
                return path, state
        raise ClusterNotFound(f"no running jupyter_mgpu cluster of this user has id {cluster_id!r}")

    def _kernel_pids(self) -> dict[int, str]:
        if self._kernels is None:
            return {}
        try:
            return self._kernels()
        except Exception:  # the kernel table is a nicety: never a reason for a failed snapshot
            return {}

    def describe(
        self, path: Path, state: dict[str, Any], now: float | None = None, kernels: dict[int, str] | None = None
    ) -> dict[str, Any]:
        """The payload of one cluster (keys mirrored by ``ClusterInfo`` in the labextension); ``kernels`` as
        :meth:`_kernel_pids` gives it (read once per snapshot), else read here."""
        now = time.time() if now is None else now
        kernels = self._kernel_pids() if kernels is None else kernels
        samples = read_samples(path)
        engine_pids = {int(r): p for r, p in (state.get("engine_pids") or {}).items()}
        world_size = int(state.get("world_size") or len(engine_pids) or len(samples))
        supervisor_alive = _process_of_cluster(state.get("supervisor_pid"), path) is not None
        controller_alive = _process_of_cluster(state.get("controller_pid"), path) is not None
        # engines of ipyparallel's launchers may run on other hosts: their relay (the "supervisor")
        # writes an exits record when one is lost, and a --connect cluster's controller is not ours
        launched = bool(state.get("launcher"))
        if launched and state.get("controller_pid") is None:
            controller_alive = True
        hosts = state.get("hosts") or {}
        ranks = []
        for rank in range(world_size):
            pid = engine_pids.get(rank, (samples.get(rank) or {}).get("pid"))
            exited = (path / "exits" / f"{rank}.json").exists()
            if launched:
                alive = pid is not None and not exited and samples.get(rank) is not None
            else:
                alive = pid is not None and not exited and _process_of_cluster(pid, path) is not None
            ranks.append(_rank_entry(rank, pid, samples.get(rank), alive, now, hosts.get(str(rank))))
        status = str(state.get("status") or "unknown")
        if not (supervisor_alive and controller_alive) and status in ("starting", "running"):
            status = "stopped"
        elif status == "running" and not all(r["alive"] for r in ranks):
            status = "degraded"
        elif status == "starting" and self._replaces(state, now):
            status = "restarting"
        if status not in ("starting", "restarting"):
            self._note(state, now)
        for r in ranks:  # a rank that is not up yet, or no more, is not "dead" while its cluster starts or stops
            if not r["alive"] and status in ("starting", "restarting", "stopping", "stopped"):
                r["state"] = status
            if r["rank"] in (state.get("restarting") or ()):  # a dead rank started again (mg.restart)
                r["state"] = "restarting"
        return {
            "cluster_id": state.get("cluster_id", path.name),
            "status": status,
            "notebook": state.get("notebook"),
            "kernel_pid": state.get("kernel_pid"),
            "kernel_id": kernel_of(state.get("kernel_pid"), kernels),
            "controller_pid": state.get("controller_pid"),
            "supervisor_pid": state.get("supervisor_pid"),
            "world_size": world_size,
            "backend": state.get("backend"),
            "kind": (state.get("devices") or [{}])[0].get("kind", "cpu"),
            "started_at": state.get("started_at"),
            "devices": list(state.get("devices") or []),
            "ranks": ranks,
            "used_bytes": sum(r["used_bytes"] for r in ranks),
            "total_bytes": sum(r["total_bytes"] for r in ranks),
            "profile_time": _mtime(path / rd.PROFILE_FILE),
        }

    def profile(self, cluster_id: str) -> dict[str, Any]:
        """The last ``mg.profile()`` of cluster ``cluster_id`` as the sidebar draws it (``ProfilePayload``)."""
        path, _ = self.locate(cluster_id)
        data = rd.read_json(path / rd.PROFILE_FILE)
        if data is None:
            raise ClusterNotFound(f"cluster {cluster_id!r} has no profile yet: run one with mg.profile()")
        return data

    def _replaces(self, state: dict[str, Any], now: float) -> bool:
        """Whether this starting cluster's kernel had another cluster moments ago (``%mgpu_init --restart``)."""
        kernel, cid = state.get("kernel_pid"), state.get("cluster_id")
        seen = self._seen.setdefault(kernel, {})
        for old in [k for k, t in seen.items() if now - t > RESTART_WINDOW]:
            del seen[old]
        restarting = any(other != cid for other in seen)
        seen[cid] = now
        return restarting

    def _note(self, state: dict[str, Any], now: float) -> None:
        self._seen.setdefault(state.get("kernel_pid"), {})[state.get("cluster_id")] = now

    def clusters(self, profiles_sent: dict[str, float] | None = None) -> dict[str, Any]:
        """``{"time", "clusters": [...]}`` for every running cluster of this user.

        With ``profiles_sent`` (cluster id -> the ``profile_time`` a stream connection last carried; updated
        here), a cluster whose last profile is newer carries it as ``profile``, read along with the rest: the
        sidebar never asks for a profile of a cluster that has ended since (a 404 in the browser's console).
        """
        now = time.time()
        out = []
        kernels = self._kernel_pids()
        for path in self._live_dirs():
            state = rd.read_json(path / rd.STATE_FILE)
            if state is None:
                continue
            info = self.describe(path, state, now, kernels)
            cid, when = info["cluster_id"], info["profile_time"]
            if profiles_sent is not None and when is not None and profiles_sent.get(cid) != when:
                data = rd.read_json(path / rd.PROFILE_FILE)
                if data is not None:
                    info["profile"] = data
                    profiles_sent[cid] = when
            out.append(info)
        if profiles_sent is not None:
            for gone in set(profiles_sent) - {c["cluster_id"] for c in out}:
                del profiles_sent[gone]
        return {"time": now, "clusters": out}

    def cluster(self, cluster_id: str) -> dict[str, Any]:
        path, state = self.locate(cluster_id)
        return self.describe(path, state)

    # -- devices -------------------------------------------------------------------------------
    def _nvml_devices(self) -> list[dict[str, Any]] | None:
        return gpu_memory.nvml_devices() if self._use_nvml else None

    def devices(self, clusters: dict[str, Any] | None = None, cluster_ranks: bool = True) -> dict[str, Any]:
        """``{"time", "host", "source", "devices": [...]}``: NVML GPUs, else running clusters' CPU devices
        (with ``cluster_ranks=False`` none of those: source ``clusters`` and an empty list)."""
        gpus = self._nvml_devices()
        if gpus:
            return {"time": time.time(), "host": socket.gethostname(), "source": "nvml", "devices": gpus}
        out: list[dict[str, Any]] = []
        if not cluster_ranks:
            return {"time": time.time(), "host": socket.gethostname(), "source": "clusters", "devices": out}
        clusters = clusters if clusters is not None else self.clusters()
        for c in clusters["clusters"]:
            for r in c["ranks"]:
                if not r["alive"]:  # a stopped cluster's or a dead rank's device is no longer in use
                    continue
                info = c["devices"][r["rank"]] if r["rank"] < len(c["devices"]) else {}
                kind = info.get("kind", r["kind"] or "cpu")
                index = int(info.get("index", r["rank"]))
                out.append(
                    {
                        "id": f"{c['cluster_id']}/{kind}:{index}",
                        "kind": kind,
                        "index": index,
                        "name": info.get("name", f"{kind}:{index}"),
                        "used_bytes": r["used_bytes"],
                        "total_bytes": r["total_bytes"] or int(info.get("total_memory", 0)),
                        "utilization": None,
                        "cluster_id": c["cluster_id"],
                        "rank": r["rank"],
                        "own_bytes": None,  # a CPU virtual device is its rank's alone
                        "other_users_bytes": None,
                    }
                )
        return {"time": time.time(), "host": socket.gethostname(), "source": "clusters", "devices": out}

    def snapshot(self, profiles_sent: dict[str, float] | None = None) -> dict[str, Any]:
        """Clusters and devices at once (what one websocket frame carries), each rank once: the clusters' CPU
        devices are their ranks, so the devices are NVML's GPUs or none; see :meth:`clusters` for
        ``profiles_sent``."""
        clusters = self.clusters(profiles_sent)
        devices = self.devices(clusters, cluster_ranks=False)
        return {"time": clusters["time"], "clusters": clusters["clusters"], "devices": devices}

    # -- stopping ------------------------------------------------------------------------------
    def stop(self, cluster_id: str, grace: float = STOP_GRACE) -> StopResult:
        """SIGTERM the cluster's supervisor and controller, then SIGKILL what is left after ``grace`` s.

        Only processes of this user whose command line names this cluster's directory are touched
        (so a reused pid is never signalled). Raises :class:`ClusterNotFound` before signalling
        anything when the id is not one of this user's running clusters.
        """
        path, state = self.locate(cluster_id)
        main = [
            p
            for p in (_process_of_cluster(state.get(k), path) for k in ("supervisor_pid", "controller_pid"))
            if p is not None
        ]
        engines = (
            []
            if state.get("launcher")
            else [  # a launcher's engines end with their relay's links
                p
                for p in (_process_of_cluster(pid, path) for pid in (state.get("engine_pids") or {}).values())
                if p is not None
            ]
        )
        signalled = []
        for proc in main or engines:
            try:
                proc.send_signal(signal.SIGTERM)
                signalled.append(proc.pid)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(main + engines, timeout=grace)
        killed = []
        for proc in alive:
            if _process_of_cluster(proc.pid, path) is not None:
                try:
                    proc.kill()
                    killed.append(proc.pid)
                except psutil.Error:
                    pass
        _, still = psutil.wait_procs(alive, timeout=1.0)
        return StopResult(cluster_id, signalled, killed, [p.pid for p in still])
