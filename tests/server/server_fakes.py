"""Fake-but-real clusters for the server tests: state files as cluster.py writes them, telemetry as
the engines write it, and real sleeper processes whose command lines name the cluster dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from jupyter_mgpu import rundir


class FakeClusters:
    """Cluster directories laid out as cluster.py writes them, with real processes to stop."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []

    def sleeper(self, *names: str) -> subprocess.Popen:
        """A real process whose command line names ``names`` (as a cluster's processes name its dir)."""
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *names])
        self.procs.append(proc)
        # until the child has exec'd, its command line is still the forking test's: a rank looks dead
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if names and names[-1] in psutil.Process(proc.pid).cmdline():
                    break
            except psutil.Error:
                pass
            time.sleep(0.005)
        return proc

    def make(
        self,
        cluster_id: str,
        world_size: int = 2,
        *,
        kernel_pid: int | None = None,
        kernel_create_time: float | None = None,
        mode: int = 0o700,
        processes: bool = True,
        used: int = 300 << 20,
        budget: int = 1 << 30,
        status: str = "running",
        ranks_up: bool = True,
    ) -> Path:
        """``ranks_up=False``: no engine has started yet (no engine pids, no telemetry), as while starting."""
        path = self.root / cluster_id
        path.mkdir(mode=0o700)
        (path / "exits").mkdir()
        (path / "telemetry").mkdir()
        pid = os.getpid() if kernel_pid is None else kernel_pid
        if kernel_create_time is None:
            kernel_create_time = rundir.process_start(pid) if psutil.pid_exists(pid) else 0.0
        sup = self.sleeper("-m", "jupyter_mgpu.engine.startup.launcher", str(path)) if processes else None
        ctl = self.sleeper(f"--profile-dir={path / 'profile'}") if processes else None
        engines = (
            {
                str(r): self.sleeper("-m", "jupyter_mgpu.engine.startup.launcher", str(path)).pid
                for r in range(world_size)
            }
            if processes and ranks_up
            else {}
        )
        state = {
            "cluster_id": cluster_id,
            "status": status,
            "kernel_pid": pid,
            "kernel_create_time": kernel_create_time,
            "notebook": "demo.ipynb",
            "world_size": world_size,
            "backend": "gloo",
            "devices": [
                {"kind": "cpu", "index": r, "name": f"CPU virtual device {r}", "total_memory": budget}
                for r in range(world_size)
            ],
            "controller_pid": ctl.pid if ctl else 999999,
            "supervisor_pid": sup.pid if sup else 999998,
            "engine_pids": engines,
            "started_at": time.time(),
        }
        (path / "cluster.json").write_text(json.dumps(state))
        for r in range(world_size if ranks_up else 0):
            sample = {
                "time": time.time(),
                "rank": r,
                "pid": int(engines.get(str(r), 0)),
                "device": f"cpu:{r}",
                "kind": "cpu",
                "state": "idle",
                "op": None,
                "resident_bytes": used + r,
                "peak_resident_bytes": used + r,
                "budget_bytes": budget,
            }
            (path / "telemetry" / f"rank{r}.json").write_text(json.dumps(sample))
        os.chmod(path, mode)
        return path

    def pids(self, path: Path) -> list[int]:
        state = json.loads((path / "cluster.json").read_text())
        return [state["supervisor_pid"], state["controller_pid"], *state["engine_pids"].values()]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
