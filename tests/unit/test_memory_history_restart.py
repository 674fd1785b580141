"""The memory history of a rank that died and was started again (``monitoring/memory_monitor.py``): it says
the rank died even when ``mg.restart`` began before the reader's exit checks saw the death (a restart takes
0.4 s; run C of session 29 found the history going from ``busy`` straight to ``restarted``)."""

import json
import time
from pathlib import Path
from types import SimpleNamespace

from jupyter_mgpu.monitoring.memory_monitor import MemoryMonitor


class _Cluster:
    """What the reader uses of a cluster: its folder, id, engine pids and exit records."""

    def __init__(self, path) -> None:
        self.path, self.cluster_id = str(path), "c1"
        self.spec = SimpleNamespace(telemetry_period=0.1)
        self.engine_pids = {0: 100, 1: 101}
        (path / "telemetry").mkdir()
        (path / "exits").mkdir()

    def exits(self) -> dict:
        return {}

    def write(self, rank: int, pid: int, state: str, seq: int) -> None:
        sample = {"rank": rank, "pid": pid, "time": time.time(), "seq": seq, "check": seq, "state": state}
        (Path(self.path) / "telemetry" / f"rank{rank}.json").write_text(json.dumps(sample).ljust(512))


def _states(monitor: MemoryMonitor, rank: int) -> list[str]:
    return [h["state"] for h in monitor.history(60) if h["rank"] == rank]


def test_a_restart_the_reader_saw_only_afterwards_still_records_the_death(tmp_path):
    cluster = _Cluster(tmp_path)
    monitor = MemoryMonitor(SimpleNamespace(cluster=cluster, world_size=2, alive=True))
    cluster.write(1, 101, "busy", 1)
    monitor.poll_once()
    cluster.engine_pids[1] = 202  # killed and started again between two looks at the exit records
    time.sleep(0.01)
    monitor.poll_once()
    cluster.write(1, 202, "idle", 1)
    monitor.poll_once()
    assert _states(monitor, 1) == ["busy", "dead", "restarted", "idle"]


def test_a_death_already_recorded_is_not_recorded_twice(tmp_path):
    cluster = _Cluster(tmp_path)
    cluster.exits = lambda: {1: {"time": time.time()}}  # type: ignore[method-assign]
    monitor = MemoryMonitor(SimpleNamespace(cluster=cluster, world_size=2, alive=True))
    cluster.write(1, 101, "busy", 1)
    (tmp_path / "exits" / "1.json").write_text("{}")
    for _ in range(3):  # the exit records are looked at every third poll
        monitor.poll_once()
    cluster.engine_pids[1] = 202
    monitor.poll_once()
    assert _states(monitor, 1) == ["busy", "dead", "restarted"]
