"""Which kernel a cluster belongs to (``kernel_id``: the current notebook's cluster told from other
notebooks'), and each rank once in a stream frame, at 64 ranks too."""

from __future__ import annotations

import asyncio
import json
import os
import time

import psutil
from server_fakes import FakeClusters

from jupyter_mgpu.server.kernels import kernel_of, kernel_pids
from jupyter_mgpu.server.manager import ClusterManager


def test_a_cluster_names_the_server_kernel_whose_pid_started_it(fake_clusters):
    mine = fake_clusters.make("555-eeee0001", world_size=1)  # kernel pid: this test process
    fake_clusters.make("555-eeee0002", world_size=1, kernel_pid=os.getppid())
    kernels = {os.getpid(): "kernel-a"}
    by_id = {c["cluster_id"]: c for c in ClusterManager(use_nvml=False, kernels=lambda: kernels).clusters()["clusters"]}
    assert by_id[mine.name]["kernel_id"] == "kernel-a"
    # a kernel the server does not run (here: our parent, which no kernel of ours is below) is None
    assert by_id["555-eeee0002"]["kernel_id"] is None
    # without a kernel table (a custom manager) every cluster's kernel is unknown, never a guess
    assert all(c["kernel_id"] is None for c in ClusterManager(use_nvml=False).clusters()["clusters"])
    # a table that fails to read is no failed snapshot
    boom = ClusterManager(use_nvml=False, kernels=lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    assert [c["kernel_id"] for c in boom.clusters()["clusters"]] == [None, None]


def test_a_kernel_started_through_a_wrapper_is_found_by_its_parent():
    # the kernel manager knows the wrapper's pid (our parent here); the cluster names the kernel's own
    assert kernel_of(os.getpid(), {os.getppid(): "wrapped"}) == "wrapped"
    assert kernel_of(os.getpid(), {os.getpid(): "direct"}) == "direct"
    assert kernel_of(os.getpid(), {}) is None
    assert kernel_of(None, {1: "x"}) is None and kernel_of(True, {1: "x"}) is None
    gone = max(psutil.pids()) + 10_000
    assert kernel_of(gone, {os.getpid(): "x"}) is None  # a pid that no longer runs has no parents


def test_kernel_pids_reads_the_provisioners_and_tolerates_strange_managers():
    class Provisioner:
        def __init__(self, pid):
            self.pid = pid

    class Kernel:
        def __init__(self, pid):
            self.provisioner = Provisioner(pid)

    class Manager:
        def __init__(self):
            self.kernels = {"a": Kernel(11), "b": Kernel(None), "c": Kernel(True)}

        def list_kernel_ids(self):
            return [*self.kernels, "ended"]

        def get_kernel(self, kid):
            return self.kernels[kid]  # "ended": a KeyError, as when a kernel ends mid-listing

    assert kernel_pids(Manager()) == {11: "a"}
    assert kernel_pids(None) == {}
    assert kernel_pids(object()) == {}


def test_a_64_rank_frame_carries_each_rank_once(mgpu_root):
    fc = FakeClusters(mgpu_root)
    try:
        fc.make("555-eeee0003", world_size=64, processes=False)
        fc.make("555-eeee0004", world_size=32, processes=False)
        snap = ClusterManager(use_nvml=False).snapshot()
    finally:
        fc.close()
    ranks = [(c["cluster_id"], r["rank"]) for c in snap["clusters"] for r in c["ranks"]]
    assert len(ranks) == len(set(ranks)) == 96
    assert sorted(r for c, r in ranks if c == "555-eeee0003") == list(range(64))
    # the clusters' CPU devices are their ranks: the frame's devices do not list them again
    assert snap["devices"]["source"] == "clusters" and snap["devices"]["devices"] == []
    # the REST route still lists them, one per rank of a live cluster (none is alive here)
    assert ClusterManager(use_nvml=False).devices()["devices"] == []
    # a frame grows with the ranks, not faster: 64 ranks take about twice the bytes of 32
    per_rank = {c["cluster_id"]: len(json.dumps(c)) / c["world_size"] for c in snap["clusters"]}
    assert per_rank["555-eeee0003"] < 1.1 * per_rank["555-eeee0004"]


async def test_the_stream_names_the_notebooks_kernel(jp_fetch, jp_ws_fetch, fake_clusters):
    """A real kernel of this server: its cluster carries its id; a cluster of a process that is no kernel
    of this server carries None (the labextension labels it "another notebook")."""
    started = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({}))).body)
    kid = started["id"]
    try:
        kernel = None
        deadline = time.monotonic() + 30
        while kernel is None and time.monotonic() < deadline:  # the kernel's own process, found by its id
            kernel = next(
                (
                    p
                    for p in psutil.Process().children(recursive=True)
                    if any(kid in arg for arg in _cmdline(p)) and "ipykernel" in " ".join(_cmdline(p))
                ),
                None,
            )
            if kernel is None:
                await asyncio.sleep(0.1)
        assert kernel is not None, "the kernel's process never showed"
        fake_clusters.make("555-eeee0005", world_size=2, kernel_pid=kernel.pid)
        fake_clusters.make("555-eeee0006", world_size=2)  # started by this test process: not a kernel
        ws = await jp_ws_fetch("mgpu", "api", "stream")
        frame = json.loads(await asyncio.wait_for(ws.read_message(), 10))
        ws.close()
        owners = {c["cluster_id"]: c["kernel_id"] for c in frame["clusters"]}
        assert owners == {"555-eeee0005": kid, "555-eeee0006": None}
        rest = json.loads((await jp_fetch("mgpu", "api", "clusters", "555-eeee0005")).body)
        assert rest["kernel_id"] == kid
    finally:
        await jp_fetch("api", "kernels", kid, method="DELETE")


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []
