"""ClusterManager without a server: discovery, privacy, staleness, telemetry, and safe stopping."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from server_fakes import running

from jupyter_mgpu.server.manager import ClusterManager, ClusterNotFound


def ids(payload):
    return [c["cluster_id"] for c in payload["clusters"]]


def test_lists_this_users_running_cluster_with_ranks_and_memory(fake_clusters):
    path = fake_clusters.make("111-aaaa0001", world_size=3, used=300 << 20, budget=1 << 30)
    payload = ClusterManager().clusters()
    assert ids(payload) == ["111-aaaa0001"]
    c = payload["clusters"][0]
    assert c["status"] == "running" and c["world_size"] == 3 and c["notebook"] == "demo.ipynb", c
    assert [r["rank"] for r in c["ranks"]] == [0, 1, 2]
    assert all(r["alive"] for r in c["ranks"]), c
    assert [r["pid"] for r in c["ranks"]] == fake_clusters.pids(path)[2:]
    assert [r["used_bytes"] for r in c["ranks"]] == [(300 << 20) + r for r in range(3)]
    assert c["used_bytes"] == sum((300 << 20) + r for r in range(3))
    assert c["total_bytes"] == 3 << 30


def test_devices_without_gpu_are_the_clusters_cpu_devices(fake_clusters):
    fake_clusters.make("111-aaaa0002", world_size=2)
    devices = ClusterManager(use_nvml=False).devices()
    assert devices["source"] == "clusters"
    assert [d["id"] for d in devices["devices"]] == ["111-aaaa0002/cpu:0", "111-aaaa0002/cpu:1"]
    assert all(d["total_bytes"] == 1 << 30 for d in devices["devices"])


def test_no_clusters_and_no_gpu_is_an_empty_answer_not_an_error(mgpu_root):
    m = ClusterManager()
    assert m.clusters()["clusters"] == []
    assert m.devices()["devices"] == []


def test_non_private_dirs_are_ignored(fake_clusters):
    fake_clusters.make("111-aaaa0003", mode=0o755)
    assert ids(ClusterManager().clusters()) == []


def test_other_users_dirs_are_ignored(fake_clusters, monkeypatch):
    fake_clusters.make("111-aaaa0004")
    assert ids(ClusterManager().clusters()) == ["111-aaaa0004"]
    monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 4242)  # the server now runs as someone else
    assert ids(ClusterManager().clusters()) == []
    with pytest.raises(ClusterNotFound):
        ClusterManager().stop("111-aaaa0004")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_dir_owned_by_another_uid_is_ignored(fake_clusters):
    path = fake_clusters.make("111-aaaa0005")
    os.chown(path, 65534, 65534)
    try:
        assert ids(ClusterManager().clusters()) == []
    finally:
        os.chown(path, 0, 0)


def test_stale_dirs_are_ignored(fake_clusters):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    fake_clusters.make("111-aaaa0006", kernel_pid=dead.pid, kernel_create_time=1.0, processes=False)
    # a live pid with the wrong start time is a reused pid: stale too
    fake_clusters.make("111-aaaa0007", kernel_pid=os.getpid(), kernel_create_time=1.0, processes=False)
    assert ids(ClusterManager().clusters()) == []


def test_symlinked_dir_is_ignored(fake_clusters, tmp_path):
    real = fake_clusters.make("111-aaaa0008")
    outside = tmp_path / "elsewhere"
    shutil.move(str(real), outside)
    os.symlink(outside, fake_clusters.root / "111-aaaa0008")
    assert ids(ClusterManager().clusters()) == []


def test_stop_ends_the_clusters_processes(fake_clusters):
    path = fake_clusters.make("111-aaaa0009", world_size=2)
    pids = fake_clusters.pids(path)
    result = ClusterManager().stop("111-aaaa0009", grace=2.0)
    assert set(result.signalled) == set(pids[:2])
    assert result.remaining == []
    assert not any(running(p) for p in pids[:2])


def test_stop_never_signals_a_pid_that_is_not_the_clusters(fake_clusters):
    path = fake_clusters.make("111-aaaa0010", world_size=1, processes=False)
    decoy = fake_clusters.sleeper("not-a-cluster")  # e.g. a pid reused by an unrelated process
    state = (path / "cluster.json").read_text().replace("999998", str(decoy.pid))
    (path / "cluster.json").write_text(state)
    result = ClusterManager().stop("111-aaaa0010", grace=0.2)
    assert result.signalled == [] and result.killed == []
    assert running(decoy.pid)


@pytest.mark.parametrize("bad", ["nope-0000", "../etc", "", "a/b", "111-aaaa0011/../x"])
def test_unknown_or_malformed_id_is_not_found_and_stops_nothing(fake_clusters, bad):
    path = fake_clusters.make("111-aaaa0011")
    with pytest.raises(ClusterNotFound, match="cluster"):
        ClusterManager().stop(bad)
    assert all(running(p) for p in fake_clusters.pids(path))


def test_dead_ranks_are_reported(fake_clusters):
    path = fake_clusters.make("111-aaaa0012", world_size=2)
    pids = fake_clusters.pids(path)
    victim = next(p for p in fake_clusters.procs if p.pid == pids[3])
    victim.kill()
    victim.wait()
    c = ClusterManager().clusters()["clusters"][0]
    assert [r["alive"] for r in c["ranks"]] == [True, False]
    assert c["ranks"][1]["state"] == "dead"
    assert c["status"] == "degraded"
    devices = ClusterManager(use_nvml=False).devices()["devices"]
    assert [d["rank"] for d in devices] == [0]  # the dead rank's device is not listed as in use


def test_a_dead_rank_being_started_again_is_restarting_not_dead(fake_clusters):
    """mg.restart lists the ranks it starts again in the cluster's state file until they are up."""
    import json

    path = fake_clusters.make("111-aaaa0013", world_size=2)
    victim = next(p for p in fake_clusters.procs if p.pid == fake_clusters.pids(path)[3])
    victim.kill()
    victim.wait()
    state = json.loads((path / "cluster.json").read_text())
    (path / "cluster.json").write_text(json.dumps({**state, "restarting": [1]}))
    c = ClusterManager(use_nvml=False).clusters()["clusters"][0]
    assert [r["state"] for r in c["ranks"]] == ["idle", "restarting"]
    (path / "cluster.json").write_text(json.dumps({**state, "restarting": []}))
    assert ClusterManager(use_nvml=False).clusters()["clusters"][0]["ranks"][1]["state"] == "dead"


def test_a_restart_shows_stopped_then_restarting_never_dead_ranks(fake_clusters):
    m = ClusterManager(use_nvml=False)
    old = fake_clusters.make("111-aaaa0020", world_size=2, used=300 << 20, budget=1 << 30)
    c = m.clusters()["clusters"][0]
    assert c["status"] == "running" and [r["figures"] for r in c["ranks"]] == ["300.0 MiB / 1.0 GiB"] * 2
    for proc in fake_clusters.procs:  # %mgpu_init --restart ends the old cluster's processes ...
        proc.kill()
        proc.wait()
    c = m.clusters()["clusters"][0]
    assert c["status"] == "stopped" and [r["state"] for r in c["ranks"]] == ["stopped", "stopped"]
    shutil.rmtree(old)  # ... removes its directory, and starts the new one
    fake_clusters.make("111-aaaa0021", world_size=2, status="starting", ranks_up=False)
    c = m.clusters()["clusters"][0]
    assert c["status"] == "restarting", c
    assert [(r["state"], r["pid"], r["figures"]) for r in c["ranks"]] == [("restarting", None, "")] * 2
    # a cluster being shut down (%mgpu_shutdown) marks itself stopping: its ranks end as "stopping"
    stopping = fake_clusters.make("111-aaaa0023", world_size=2, status="stopping")
    for proc in fake_clusters.procs[-2:]:
        proc.kill()
        proc.wait()
    c = next(c for c in m.clusters()["clusters"] if c["cluster_id"] == stopping.name)
    assert c["status"] == "stopping" and [r["state"] for r in c["ranks"]] == ["stopping", "stopping"]
    shutil.rmtree(stopping)
    # a first start (no earlier cluster of this kernel) is just starting
    other = ClusterManager(use_nvml=False).clusters()["clusters"][0]
    assert other["status"] == "starting" and [r["state"] for r in other["ranks"]] == ["starting"] * 2


def test_the_limit_is_runtime_plus_budget_as_in_the_dashboard(fake_clusters):
    from jupyter_mgpu.widgets.memory_dashboard import device_row

    path = fake_clusters.make("111-aaaa0022", world_size=1, used=400 << 20, budget=512 << 20)
    sample_file = path / "telemetry" / "rank0.json"
    sample = json.loads(sample_file.read_text())
    sample["baseline_resident_bytes"] = 200 << 20
    sample_file.write_text(json.dumps(sample))
    rank = ClusterManager(use_nvml=False).clusters()["clusters"][0]["ranks"][0]
    assert rank["total_bytes"] == 712 << 20 == device_row(sample)["limit"]
    assert rank["figures"] == "400.0 MiB / 712.0 MiB" and device_row(sample)["text"].startswith(rank["figures"])


class _FakeNVML:
    """A stand-in for nvidia-ml-py on this GPU-less machine (the GPU-only path): two GPUs, 80 GB each."""

    class _Mem:
        def __init__(self, used, total):
            self.used, self.total = used, total

    class _Util:
        gpu = 37

    def __init__(self):
        self.shutdowns = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return {"GPU-b": 1}[uuid]

    def nvmlDeviceGetName(self, h):
        return f"NVIDIA H100 #{h}".encode()

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._Mem((h + 1) * 10**9, 80 * 10**9)

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._Util()


@pytest.mark.parametrize(("visible", "physical"), [(None, [0, 1]), ("1", [1]), ("GPU-b", [1]), ("1,-1,0", [1])])
def test_gpus_come_from_nvml_mapped_through_cuda_visible_devices(monkeypatch, mgpu_root, visible, physical):
    fake = _FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("JUPYTER_MGPU_FORCE_CPU", raising=False)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    devices = ClusterManager().devices()
    assert devices["source"] == "nvml"
    assert [d["id"] for d in devices["devices"]] == [f"cuda:{i}" for i in range(len(physical))]
    assert [d["name"] for d in devices["devices"]] == [f"NVIDIA H100 #{p}" for p in physical]
    assert [d["used_bytes"] for d in devices["devices"]] == [(p + 1) * 10**9 for p in physical]
    assert fake.shutdowns == 1


def test_nvml_without_a_driver_falls_back_to_cluster_devices(monkeypatch, fake_clusters):
    class Broken(_FakeNVML):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", Broken())
    monkeypatch.delenv("JUPYTER_MGPU_FORCE_CPU", raising=False)
    fake_clusters.make("111-aaaa0013", world_size=1)
    devices = ClusterManager().devices()
    assert devices["source"] == "clusters" and len(devices["devices"]) == 1
