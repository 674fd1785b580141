"""What ``mg.restart`` refuses on a cluster across hosts before anything is released or started
(``launch/host_restart.check``): launchers that cannot start one engine on a given host, ``--connect``
engines, a host SSH no longer reaches. One sentence each, naming the rank and its host. The restarts
themselves run on real engines: ``tests/multihost/test_launcher_local.py`` and ``test_ssh_hosts.py``."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import host_restart
from jupyter_mgpu.launch.launcher_options import LaunchOptions


@dataclass
class _Cluster:
    opts: LaunchOptions
    hosts: dict[int, str] = field(default_factory=lambda: {0: "node1", 1: "node1", 2: "node2"})
    path: Path = Path("/nonexistent")


@pytest.mark.parametrize("launcher", ["mpi", "slurm", "pbs"])
def test_batch_and_mpi_launchers_say_they_cannot_start_one_engine_on_a_host(launcher):
    with pytest.raises(MgpuError) as info:
        host_restart.check(_Cluster(LaunchOptions(launcher, n=3)), [2])
    said = str(info.value)
    assert said.startswith("rank 2 on node2 cannot be started again: restarting a rank needs the ssh or local"), said
    assert f"the {launcher} launcher cannot start one engine on a given host" in said
    assert said.endswith("run %mgpu_init --restart to start the cluster again") and "\n" not in said


def test_connected_engines_are_not_started_again():
    with pytest.raises(MgpuError, match=r"rank 0 on node1 cannot be started again: .*\(--connect\); run %mgpu_init"):
        host_restart.check(_Cluster(LaunchOptions("connect", connect="/x/cluster.json")), [0, 1])


def test_local_launcher_is_accepted_without_asking_any_host():
    host_restart.check(_Cluster(LaunchOptions("local", n=3)), [1])  # nothing raised, no SSH


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")
def test_a_host_ssh_cannot_reach_is_named_as_gone():
    opts = LaunchOptions("ssh", n=2, hosts=[("node1", 1), ("mgpu@no-such-host.invalid", 1)])
    cluster = _Cluster(opts, hosts={0: "node1", 1: "no-such-host.invalid"})
    with pytest.raises(MgpuError) as info:
        host_restart.check(cluster, [1])
    said = str(info.value)
    assert said.startswith(
        "rank 1's host no-such-host.invalid is gone (cannot reach mgpu@no-such-host.invalid over SSH"
    ), said
    assert said.endswith("; run %mgpu_init --restart to start the cluster again"), said
