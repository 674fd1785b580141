"""What ``%mgpu_status`` and ``mg.where`` read of the ranks (``session/rank_status.py``): telemetry files and
exit records in rank order, one status row per rank with the memory figures every view uses, and each
rank's guard asked what it does (dead and silent ranks said as such)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.watch import collective_guard
from jupyter_mgpu.session import rank_status

GiB = 1 << 30


class Cluster(SimpleNamespace):
    """What ``rank_status`` reads of a cluster: its directory, its exit records and its engine maps."""

    def exits(self) -> dict[int, dict[str, Any]]:
        return self.dead


def _cluster(path: Path, dead: dict[int, dict[str, Any]] | None = None) -> Cluster:
    return Cluster(path=path, dead=dead or {}, rank_to_engine={0: 10, 1: 11, 2: 12}, engine_pids={0: 100, 1: 101})


def _write_sample(rundir: Path, rank: int, **fields: Any) -> dict[str, Any]:
    """A rank's telemetry record as its sampler writes it: JSON with matching ``seq`` and ``check``."""
    directory = rundir / telemetry.TELEMETRY_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    data = {"seq": 3, "time": time.time(), "rank": rank, "state": "idle", "op": None, **fields, "check": 3}
    (directory / f"rank{rank}.json").write_text(json.dumps(data).ljust(telemetry.RECORD_BYTES))
    return data


def test_memory_is_every_ranks_latest_sample_in_rank_order(tmp_path):
    s0 = _write_sample(tmp_path, 0, state="busy", op="matmul", resident_bytes=5 * GiB)
    s2 = _write_sample(tmp_path, 2, resident_bytes=GiB)
    _write_sample(tmp_path, 3)
    out = rank_status.memory(_cluster(tmp_path, dead={3: {"returncode": -9}}), 5)
    assert [s["rank"] for s in out] == [0, 1, 2, 3, 4]
    assert out[0] == s0 and out[2] == s2  # the sample as the rank wrote it
    assert out[1] == {"rank": 1, "time": None, "state": "starting"}  # no sample yet
    assert out[3]["state"] == "dead"  # its exit record wins over its last sample
    assert out[4]["state"] == "starting"


def test_a_sample_torn_by_a_write_reads_as_none_yet(tmp_path):
    _write_sample(tmp_path, 0, seq=4)  # "check" (3) differs from "seq": caught mid-write
    assert rank_status.memory(_cluster(tmp_path), 1)[0]["state"] == "starting"


def test_status_has_one_row_per_rank_with_the_limit_every_view_shows(tmp_path):
    gpu_sample = {
        "rank": 0,
        "state": "busy",
        "op": "all_reduce",
        "kind": "cuda",
        "allocated_bytes": 2 * GiB,
        "total_bytes": 80 * GiB,
        "budget_bytes": 10 * GiB,
    }
    cpu_sample = {"rank": 1, "state": "idle", "resident_bytes": 3 * GiB}  # no budget: no limit of its own
    devices = [DeviceInfo("cuda", 0, "H100", 80 * GiB, host="node0"), DeviceInfo("cpu", 1, "CPU", 16 * GiB)]
    rows = rank_status.status(_cluster(tmp_path), [gpu_sample, cpu_sample], devices, "nccl")
    assert rows == [
        {
            "rank": 0,
            "engine_id": 10,
            "pid": 100,
            "device": "node0:cuda:0",
            "name": "H100",
            "backend": "nccl",
            "memory_used": 2 * GiB,
            "memory_total": 10 * GiB,  # a budget below the GPU's memory is its limit
            "state": "busy",
            "op": "all_reduce",
        },
        {
            "rank": 1,
            "engine_id": 11,
            "pid": 101,
            "device": "cpu:1",
            "name": "CPU",
            "backend": "nccl",
            "memory_used": 3 * GiB,
            "memory_total": 16 * GiB,  # the device's own size
            "state": "idle",
            "op": None,
        },
    ]


def test_status_of_a_cpu_device_whose_budget_is_on_its_process(tmp_path):
    sample = {"rank": 2, "state": "idle", "resident_bytes": 3 * GiB, "baseline_resident_bytes": GiB}
    sample["budget_bytes"] = 4 * GiB
    (row,) = rank_status.status(_cluster(tmp_path), [sample], [DeviceInfo("cpu", 2, "CPU", 4 * GiB)], "gloo")
    assert row["memory_total"] == 5 * GiB  # the engine's runtime + the budget
    assert row["pid"] is None and row["engine_id"] == 12


def test_where_asks_each_live_rank_and_names_dead_and_silent_ones(tmp_path):
    since = time.time() - 5
    state = SimpleNamespace(rank=1, call_depth=0, call_started=None, call_ended=since, backend="gloo")
    guard = collective_guard.Listener(str(tmp_path), state)  # rank 1's guard thread, as an engine runs it
    guard.start()
    try:
        out = rank_status.where(_cluster(tmp_path, dead={2: {"signal_name": "SIGKILL"}}), 4, timeout=5.0)
    finally:
        guard.sock.shutdown(socket.SHUT_RDWR)
        guard.sock.close()
        guard.join(5)
    assert [w["rank"] for w in out] == [0, 1, 2, 3]
    silent = {"state": "unknown", "seconds": None, "collective": None, "line": None, "stack": []}
    assert out[0] == {"rank": 0, **silent}  # no guard answers: never judged
    assert out[2] == {"rank": 2, **silent, "state": "dead"}
    assert out[3] == {"rank": 3, **silent}
    assert out[1]["state"] == "idle" and out[1]["collective"] is None and out[1]["line"] is None
    assert 4.5 <= out[1]["seconds"] <= 60  # idle since its last call ended
    assert isinstance(out[1]["stack"], list)
    assert not guard.is_alive()
