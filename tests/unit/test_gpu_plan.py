"""torchrun's GPU convention (``engine/startup/gpu_plan.py``): every engine sees its host's ranks' GPUs, in
local-rank order and named as its parent names them, and uses ``cuda:LOCAL_RANK``. The configs are
built the way ``cluster/local.py`` (one host) and ``launch/host_cluster.py`` (several hosts) build them,
from the real device pickers (``devices.discover``, ``launch/ranks.py``)."""

from __future__ import annotations

import pytest

from jupyter_mgpu import devices as devmod
from jupyter_mgpu.engine.group import torchrun_env
from jupyter_mgpu.engine.startup import gpu_plan
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import ranks

GiB = 2**30
UUIDS = [f"GPU-{i}a1b2c3d-0000-1111-2222-33334444555{i}" for i in range(4)]


def one_host_config(monkeypatch, gpus: int, n: int | None = None, picked: list[int] | None = None) -> dict:
    """What ``cluster/local.py`` gives ``runtime.setup`` for ``%mgpu_init n --devices picked`` on a host
    with ``gpus`` visible GPUs (``devices.discover`` itself picks them)."""
    monkeypatch.setattr(devmod, "cuda_device_count", lambda: gpus)
    monkeypatch.setattr(devmod, "_nvml_info", lambda i: ("NVIDIA H100", 80 * GiB))
    picked_devices = devmod.discover(n, devices=picked)
    return {"cluster_id": "c1", "devices": [d.to_dict() for d in picked_devices]}


def host_configs(per_host: dict[str, int], gpus: int | None) -> list[dict]:
    """Per-rank configs as ``launch/host_cluster.py`` makes them: engines ordered by ``ranks.order``, devices
    from ``ranks.devices`` (``gpus`` per host, or CPU virtual devices when None)."""
    engines, eid = [], 0
    for host, k in per_host.items():
        for _ in range(k):
            info = {
                "hostname": host,
                "host_key": f"key-{host}",
                "label": None,
                "pid": 100 + eid,
                "gpus": gpus or 0,
                "gpu_info": [("NVIDIA H100", 80 * GiB)] * (gpus or 0),
                "cuda_started": False,
                "available_memory": 64 * GiB,
                "cpus": 8,
                "local_rank_hint": None,
            }
            engines.append(ranks.Engine(eid, info))
            eid += 1
    ranked = ranks.order(engines, list(per_host))
    devs = [d.to_dict() for d in ranks.devices(ranked, cpu=gpus is None, mem_per_device=None)]
    counts = ranks.per_host_counts(ranked)
    hosts = list(dict.fromkeys(e.host for e in ranked))
    return [
        {
            "cluster_id": "c2",
            "devices": devs,
            "rank": r,
            "local_rank": e.local_rank,
            "local_world_size": counts[e.host],
            "group_rank": hosts.index(e.host),
            "group_world_size": len(hosts),
            "host": e.host,
        }
        for r, e in enumerate(ranked)
    ]


def plans(config: dict, parent: str | None) -> list[tuple[str | None, int | None]]:
    return [astuple(gpu_plan.plan(config, r, parent)) for r in range(len(config["devices"]))]


def astuple(p: gpu_plan.GpuPlan) -> tuple[str | None, int | None]:
    return (p.visible_devices, p.device_index)


def test_one_host_four_gpus_every_rank_sees_all_four_and_uses_its_rank(monkeypatch):
    config = one_host_config(monkeypatch, gpus=4)
    assert plans(config, None) == [("0,1,2,3", 0), ("0,1,2,3", 1), ("0,1,2,3", 2), ("0,1,2,3", 3)]
    for r in range(4):  # the device index is torchrun's LOCAL_RANK, which the engine also exports
        assert gpu_plan.plan(config, r, None).device_index == int(torchrun_env.variables(config, r)["LOCAL_RANK"])
    two_of_four = one_host_config(monkeypatch, gpus=4, n=2)
    assert plans(two_of_four, None) == [("0,1", 0), ("0,1", 1)]


def test_devices_0_2_shows_only_gpus_0_and_2_rank_1_uses_cuda_1(monkeypatch):
    config = one_host_config(monkeypatch, gpus=4, picked=[0, 2])
    assert [d["index"] for d in config["devices"]] == [0, 2]
    assert plans(config, None) == [("0,2", 0), ("0,2", 1)]
    assert plans(config, "4,5,6,7") == [("4,6", 0), ("4,6", 1)]  # indices into what the parent sees
    reordered = one_host_config(monkeypatch, gpus=4, picked=[3, 1])  # local rank 0 drives GPU 3
    assert plans(reordered, None) == [("3,1", 0), ("3,1", 1)]


def test_parent_indices_are_mapped_through(monkeypatch):
    config = one_host_config(monkeypatch, gpus=4)
    assert plans(config, "3, 1,0 ,2") == [("3,1,0,2", r) for r in range(4)]
    # CUDA reads the list up to its first invalid entry: GPUs 6 and 7 only
    assert plans(one_host_config(monkeypatch, gpus=2), "6,7,-1,5") == [("6,7", 0), ("6,7", 1)]


def test_parent_uuids_are_mapped_through(monkeypatch):
    parent = ",".join(UUIDS)
    config = one_host_config(monkeypatch, gpus=4, picked=[1, 3])
    assert plans(config, parent) == [(f"{UUIDS[1]},{UUIDS[3]}", 0), (f"{UUIDS[1]},{UUIDS[3]}", 1)]
    mig = "MIG-aaaa-bbbb,MIG-cccc-dddd"
    assert plans(one_host_config(monkeypatch, gpus=2), mig) == [(mig, 0), (mig, 1)]


def test_two_hosts_two_ranks_each_see_their_own_hosts_gpus():
    configs = host_configs({"node1": 2, "node2": 2}, gpus=4)
    assert [c["host"] for c in configs] == ["node1", "node1", "node2", "node2"]
    got = [astuple(gpu_plan.plan(c, c["rank"], None)) for c in configs]
    assert got == [("0,1", 0), ("0,1", 1), ("0,1", 0), ("0,1", 1)]
    # each host's engines map through their own launcher's CUDA_VISIBLE_DEVICES (a Slurm job's, say)
    parents = {"node1": "2,3,0,1", "node2": f"{UUIDS[2]},{UUIDS[0]}"}
    got = [astuple(gpu_plan.plan(c, c["rank"], parents[c["host"]])) for c in configs]
    assert got == [("2,3", 0), ("2,3", 1), (f"{UUIDS[2]},{UUIDS[0]}", 0), (f"{UUIDS[2]},{UUIDS[0]}", 1)]
    for c in configs:
        p = gpu_plan.plan(c, c["rank"], None)
        assert p.local_rank == p.device_index == c["local_rank"]
        assert torchrun_env.variables(c, c["rank"])["LOCAL_RANK"] == str(p.device_index)


def test_uneven_hosts_list_only_their_ranks_gpus():
    configs = host_configs({"a": 3, "b": 1}, gpus=8)
    got = [(c["host"], *astuple(gpu_plan.plan(c, c["rank"], None))) for c in configs]
    assert got == [("a", "0,1,2", 0), ("a", "0,1,2", 1), ("a", "0,1,2", 2), ("b", "0", 0)]


def test_cpu_devices_leave_cuda_visible_devices_alone(monkeypatch):
    config = one_host_config(monkeypatch, gpus=0, n=3)
    assert [d["kind"] for d in config["devices"]] == ["cpu"] * 3
    for r in range(3):
        assert gpu_plan.plan(config, r, "0,1") == gpu_plan.GpuPlan(r, None, None)
    configs = host_configs({"a": 2, "b": 2}, gpus=None)
    assert [gpu_plan.plan(c, c["rank"], None) for c in configs] == [
        gpu_plan.GpuPlan(0, None, None),
        gpu_plan.GpuPlan(1, None, None),
        gpu_plan.GpuPlan(0, None, None),
        gpu_plan.GpuPlan(1, None, None),
    ]


def test_contradictions_are_one_sentence_naming_the_rank(monkeypatch):
    config = one_host_config(monkeypatch, gpus=4, picked=[0, 3])
    with pytest.raises(MgpuError, match=r"^rank 1 is to drive GPU 3, but CUDA_VISIBLE_DEVICES='5,6' shows only 2 GPUs"):
        gpu_plan.plan(config, 0, "5,6")
    with pytest.raises(MgpuError, match="^ranks 0 and 1 were both given GPU 4; each rank needs its own"):
        gpu_plan.plan(config, 1, "4,9,9,4")
    with pytest.raises(MgpuError, match="^rank 7 is not one of the 2 ranks"):
        gpu_plan.plan(config, 7, None)
    c = host_configs({"node1": 2, "node2": 2}, gpus=4)[3]
    with pytest.raises(MgpuError, match="^rank 3 on node2 was given local rank 0 but is rank 1 of its host's 2"):
        gpu_plan.plan({**c, "local_rank": 0}, 3, None)
    with pytest.raises(MgpuError, match="^rank 3 on node2 was told its host has 4 ranks"):
        gpu_plan.plan({**c, "local_world_size": 4}, 3, None)
