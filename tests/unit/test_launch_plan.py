"""Launch options and the rank/device plan for engines on several hosts (``launch/launcher_options.py``, ``ranks.py``):
pure functions, fed what engines report about their hosts."""

from __future__ import annotations

import pytest

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import launcher_options as options
from jupyter_mgpu.launch import ranks

GiB = 2**30


def _engine(eid: int, host: str, hint: int | None = None, gpus: int = 0, mem: int = 64 * GiB, label=None):
    return ranks.Engine(
        eid,
        {
            "hostname": host,
            "host_key": f"key-{host}",
            "label": label,
            "pid": 100 + eid,
            "gpus": gpus,
            "cuda_started": False,
            "available_memory": mem,
            "cpus": 8,
            "local_rank_hint": hint,
        },
    )


def test_hosts_parse_in_order_with_counts_users_and_per_host():
    assert options.parse_hosts("node1:4,mgpu@node2:4", None) == [("node1", 4), ("mgpu@node2", 4)]
    assert options.parse_hosts("a, b", 2) == [("a", 2), ("b", 2)]
    opts = options.parse(None, hosts="node1:4,node2:2")
    assert (opts.launcher, opts.n, opts.host_names) == ("ssh", 6, ["node1", "node2"])
    with pytest.raises(MgpuError, match="give the engines on a as a:N"):
        options.parse_hosts("a,b", None)
    with pytest.raises(MgpuError, match="asked for 4 engines but --hosts lists 6"):
        options.parse(4, hosts="node1:4,node2:2")


def test_launcher_options_map_to_ipyparallel_names_and_are_checked():
    assert options.parse(8, launcher="Slurm", per_host=4, partition="gpu", time="1:00:00").launcher == "slurm"
    assert options.parse(2, launcher="mpi", launcher_args="'--allow-run-as-root --oversubscribe'").launcher_args == [
        "--allow-run-as-root",
        "--oversubscribe",
    ]
    for kwargs, message in [
        (dict(launcher="slurm", per_host=9), "--per-host 9 is more than the 8 engines"),
        (dict(launcher="ssh"), "--launcher ssh needs --hosts"),
        (dict(launcher="mpi", account="x"), "batch-system options"),
        (dict(launcher="pbs", account="x"), "--account is a Slurm option"),
        (dict(launcher="local", interface="eth0; rm -rf /"), "--interface takes an interface name"),
        (dict(launcher="local", connect="/tmp/x.json"), "leave out --launcher"),
    ]:
        with pytest.raises(MgpuError, match=message):
            options.parse(8, **kwargs)


def test_ranks_follow_the_hosts_order_then_the_launchers_local_rank():
    engines = [_engine(0, "node10", 1), _engine(1, "node2", 0), _engine(2, "node10", 0), _engine(3, "node2", 1)]
    ranked = ranks.order(engines)
    assert [(e.host, e.local_rank, e.engine_id) for e in ranked] == [
        ("node2", 0, 1),
        ("node2", 1, 3),
        ("node10", 0, 2),
        ("node10", 1, 0),
    ]  # natural order of names
    ranked = ranks.order([_engine(0, "b"), _engine(1, "a"), _engine(2, "b")], host_order=["b", "a"])
    assert [(e.host, e.local_rank) for e in ranked] == [("b", 0), ("b", 1), ("a", 0)]


def test_two_hosts_with_one_name_stay_apart():
    e1, e2 = _engine(0, "node"), _engine(1, "node")
    e2.info["host_key"] = "another-machine"
    assert sorted(e.host for e in ranks.order([e1, e2])) == ["node", "node#2"]


def test_devices_pin_each_rank_to_its_hosts_local_device():
    ranked = ranks.order([_engine(i, h, gpus=2) for i, h in enumerate(["n1", "n1", "n2", "n2"])])
    devs = ranks.devices(ranked, cpu=False, mem_per_device=None)
    assert [d.label for d in devs] == ["n1:cuda:0", "n1:cuda:1", "n2:cuda:0", "n2:cuda:1"]
    for e in ranked:
        e.info["gpu_info"] = [("H100", 80 * GiB), ("H100", 80 * GiB)]
    assert {(d.name, d.total_memory) for d in ranks.devices(ranked, cpu=False, mem_per_device=None)} == {
        ("H100", 80 * GiB)
    }
    cpu = ranks.devices(ranked, cpu=True, mem_per_device=GiB)
    assert [(d.label, d.total_memory) for d in cpu][:2] == [("n1:cpu:0", GiB), ("n1:cpu:1", GiB)]


def test_a_host_with_too_few_devices_is_named():
    ranked = ranks.order([_engine(i, h, gpus=g) for i, (h, g) in enumerate([("n1", 2), ("n1", 2), ("n1", 2)])])
    with pytest.raises(MgpuError, match="n1 has 2 GPUs but 3 engines were started there"):
        ranks.devices(ranked, cpu=False, mem_per_device=None)
    mixed = ranks.order([_engine(0, "n1", gpus=1), _engine(1, "n2", gpus=0)])
    with pytest.raises(MgpuError, match="n2 has no GPU while n1 has"):
        ranks.devices(mixed, cpu=False, mem_per_device=None)
    small = ranks.order([_engine(i, "n3", mem=3 * GiB) for i in range(4)])
    with pytest.raises(
        MgpuError,
        match=r"n3 has 3\.0 GiB of memory available: it holds 1 CPU virtual device of "
        r"2\.0 GiB, not the 4 started there",
    ):
        ranks.devices(small, cpu=True, mem_per_device=2 * GiB)
    assert [d.total_memory for d in ranks.devices(small, cpu=True, mem_per_device=None)] == [int(3 * GiB * 0.9 / 4)] * 4


def test_ssh_hosts_are_checked_before_any_engine_starts(monkeypatch):
    from jupyter_mgpu.launch import ipp_cluster

    facts = {
        "n1": {"gpus": 0, "available_memory": 64 * GiB, "address": "10.0.0.1", "interfaces": "ib0, lo"},
        "mgpu@n2": {"gpus": 0, "available_memory": 3 * GiB, "address": None, "interfaces": "eth0, lo"},
        "n3": "cannot reach n3 over SSH: no answer within 20 s",
    }
    asked = []
    monkeypatch.setattr(ipp_cluster, "ssh_facts", lambda opts, host: asked.append(host) or facts[host])

    def check(hosts, interface=None, mem=None):
        ipp_cluster.check_ssh_hosts(options.parse(None, hosts=hosts, interface=interface), True, mem)

    with pytest.raises(MgpuError, match="^cannot reach n3 over SSH"):
        check("n1:1,n3:1")
    with pytest.raises(MgpuError, match="^there is no interface ib0 with an IPv4 address on n2; it has eth0, lo$"):
        check("n1:1,mgpu@n2:1", interface="ib0")
    with pytest.raises(
        MgpuError, match=r"^n2 has 3\.0 GiB .* holds 1 CPU virtual device of 2\.0 GiB, not the 2 asked for"
    ):
        check("n1:2,mgpu@n2:2", mem=2 * GiB)
    check("n1:2,mgpu@n2:1", mem=2 * GiB)
    facts["mgpu@n2"] = {**facts["mgpu@n2"], "gpus": None}  # a driver but no NVML: torch would have to count
    check("n1:2,mgpu@n2:2", mem=2 * GiB)  # left to the check once the engines run
    assert sorted(asked) == sorted(["n1", "n3"] + ["n1", "mgpu@n2"] * 4)  # asked in parallel
