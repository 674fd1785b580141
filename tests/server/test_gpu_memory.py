"""GPU memory split into this user's and other users' (the NVML path, with a fake NVML: no GPU here).

Process ownership is real: the pids NVML reports are real processes of this user and of another uid,
looked up the way the server does on a shared node; only the driver is faked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fake_nvml import FakeNVML
from whole_words import names

from jupyter_mgpu.server import gpu_memory
from jupyter_mgpu.server.manager import ClusterManager

GiB = 1 << 30
NOBODY = 65534


@pytest.fixture
def other_users_pid():
    """A live process of another uid: pid 1 for a non-root test run, else a sleeper run as nobody."""
    if os.getuid() != 0:
        yield 1
        return
    proc = subprocess.Popen(["sleep", "60"], user=NOBODY, group=NOBODY, cwd="/")
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


def _gone_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def _gpus(own: int, other: int, gone: int) -> list[dict]:
    return [
        {
            "name": "Fake A100",
            "uuid": "GPU-aaaa",
            "total": 40 * GiB,
            "used": 30 * GiB,
            "util": 50,
            "processes": [
                {"pid": own, "used": 2 * GiB},
                {"pid": other, "used": 20 * GiB},
                {"pid": gone, "used": 5 * GiB},
            ],
            "graphics": [{"pid": own, "used": 2 * GiB}],
        },  # listed twice: counts once
        {"name": "Fake H100", "uuid": "GPU-bbbb", "total": 80 * GiB, "used": 1 * GiB, "util": 0, "processes": []},
    ]


def test_split_counts_own_and_other_users_bytes_each_process_once():
    procs = [
        type("P", (), {"pid": p, "usedGpuMemory": u})()
        for p, u in [(10, 100), (11, 200), (10, 100), (12, None), (13, 50)]
    ]
    owners = {10: 7, 11: 8, 12: 7}  # 13: not visible
    assert gpu_memory.split_memory(procs, 7, owners.get) == (100, 250)


def test_devices_split_memory_by_owner_and_name_nobody(other_users_pid):
    gone = _gone_pid()
    nvml = FakeNVML(_gpus(os.getpid(), other_users_pid, gone))
    [a, h] = gpu_memory.read_devices(nvml, None, os.getuid())
    assert (a["id"], a["name"], a["total_bytes"], a["used_bytes"], a["utilization"]) == (
        "cuda:0",
        "Fake A100",
        40 * GiB,
        30 * GiB,
        50,
    )
    assert a["own_bytes"] == 2 * GiB
    assert a["other_users_bytes"] == 25 * GiB  # another uid's process, and one that cannot be seen
    assert (h["own_bytes"], h["other_users_bytes"]) == (0, 0)
    text = json.dumps([a, h])
    assert not names(text, other_users_pid) and not names(text, gone) and "pid" not in text


def test_visible_devices_are_numbered_as_cuda_numbers_them():
    nvml = FakeNVML(_gpus(os.getpid(), os.getpid(), os.getpid()))
    assert [(d["id"], d["name"]) for d in gpu_memory.read_devices(nvml, "1", 0)] == [("cuda:0", "Fake H100")]
    assert [d["name"] for d in gpu_memory.read_devices(nvml, "GPU-bbbb,GPU-aaaa", 0)] == ["Fake H100", "Fake A100"]
    assert [d["name"] for d in gpu_memory.read_devices(nvml, "0,-1,1", 0)] == ["Fake A100"]  # CUDA stops at -1


def test_without_process_list_the_shares_are_unknown_not_an_error():
    gpus = _gpus(1, 1, 1)
    gpus[0]["processes"] = None  # NVML: insufficient permissions
    [a, _] = gpu_memory.read_devices(FakeNVML(gpus), None, 0)
    assert a["used_bytes"] == 30 * GiB and a["own_bytes"] is None and a["other_users_bytes"] is None


def test_manager_sends_the_split_and_no_pid_of_anyone_else(monkeypatch, mgpu_root, other_users_pid):
    nvml = FakeNVML(_gpus(os.getpid(), other_users_pid, _gone_pid()))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("JUPYTER_MGPU_FORCE_CPU", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")
    payload = ClusterManager().snapshot()
    assert payload["devices"]["source"] == "nvml"
    [dev] = payload["devices"]["devices"]
    assert (dev["own_bytes"], dev["other_users_bytes"]) == (2 * GiB, 25 * GiB)
    assert not names(json.dumps(payload), other_users_pid)
    assert nvml.inits == nvml.shutdowns == 1


def test_no_driver_means_cluster_devices(monkeypatch, mgpu_root):
    class NoDriver(FakeNVML):
        def nvmlInit(self):
            raise self.NVMLError("driver not loaded")

    monkeypatch.setitem(sys.modules, "pynvml", NoDriver())
    monkeypatch.delenv("JUPYTER_MGPU_FORCE_CPU", raising=False)
    devices = ClusterManager().devices()
    assert devices["source"] == "clusters" and devices["devices"] == []
