"""Registered engines made ranks, for a host cluster's start (``launch/host_cluster.py``).

Ask each engine where it runs (``engine/startup/launched_setup.identify``: its host, the address that
reaches the notebook's host); once ranks are ordered, open the rendezvous store on rank 0, send every
engine its config (rank, local rank, host group, threads, store and relay addresses) so it joins the
process group, close the store to newcomers, and check that every rank linked up with the relay.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.startup import launched_setup
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import ranks, relay
from jupyter_mgpu.launch.engine_waits import gather

if TYPE_CHECKING:
    from jupyter_mgpu.launch.host_cluster import HostCluster


def identify(cluster: HostCluster, engine_ids: list[int], timeout: float) -> list[ranks.Engine]:
    """Where each engine runs, in the order of ``engine_ids``; raises for one that cannot reach this host."""
    futures = {
        eid: cluster.client[eid].apply_async(launched_setup.identify, cluster.opts.interface, cluster.address)
        for eid in engine_ids
    }
    where = {eid: f"engine {eid}" for eid in engine_ids}
    infos = gather(cluster, futures, max(30.0, timeout), "asking the engines where they run", where)
    for eid, info in infos.items():
        name = info.get("label") or info["hostname"]
        if not info.get("address"):
            if cluster.opts.interface:
                raise ranks.no_interface(cluster.opts.interface, name, str(info.get("interfaces")))
            raise MgpuError(f"{name} has no route to {cluster.address} (the notebook's host); give --interface")
    return [ranks.Engine(eid, infos[eid]) for eid in engine_ids]


def rank_configs(cluster: HostCluster, ranked: list[ranks.Engine], store_port: int) -> list[dict[str, Any]]:
    """The config ``launched_setup.setup`` gets on each rank, in rank order."""
    spec = cluster.spec
    rank0 = ranked[0]
    counts = ranks.per_host_counts(ranked)
    threads = ranks.threads(ranked)
    base = {
        "cluster_id": cluster.cluster_id,
        "devices": [d.to_dict() for d in spec.devices],
        "backend": spec.backend,
        "timeout": spec.timeout,
        "collective_timeout": spec.collective_timeout,
        "collective_checks": spec.collective_checks,
        "mem_per_device": spec.mem_per_device,
        "telemetry_period": spec.telemetry_period,
        "store": {"host": rank0.info["address"], "port": store_port, "world_size": len(ranked)},
        "relay": {"address": cluster.address, "port": cluster.relay_port},
        "cwd": os.getcwd(),
    }
    hosts = list(dict.fromkeys(e.host for e in ranked))  # in rank order: torchrun's GROUP_RANK
    return [
        {
            **base,
            "rank": r,
            "local_rank": e.local_rank,
            "local_world_size": counts[e.host],
            "group_rank": hosts.index(e.host),
            "group_world_size": len(hosts),
            "host": e.host,
            "threads": threads[r],
            "interface": e.info["interface"],
        }
        for r, e in enumerate(ranked)
    ]


def setup_ranks(cluster: HostCluster, ranked: list[ranks.Engine], timeout: float) -> None:
    """Join the ranks in one process group through a store on rank 0; each rank's pid afterwards."""
    spec = cluster.spec
    where = {r: f"rank {r} ({e.host})" for r, e in enumerate(ranked)}
    rank0 = ranked[0]
    port = gather(
        cluster,
        {
            0: cluster.client[rank0.engine_id].apply_async(
                launched_setup.open_store, rank0.info["address"], len(ranked), spec.timeout
            )
        },
        60,
        "opening the rendezvous store",
        where,
    )[0]
    configs = rank_configs(cluster, ranked, port)
    cluster.rank_configs = dict(enumerate(configs))
    futures = {
        r: cluster.client[e.engine_id].apply_async(launched_setup.setup, configs[r]) for r, e in enumerate(ranked)
    }
    done = gather(cluster, futures, timeout, "setting the engine up", where)
    gather(
        cluster,
        {0: cluster.client[rank0.engine_id].apply_async(launched_setup.close_store_listener)},
        30,
        "closing the rendezvous store to newcomers",
        where,
    )
    linked = (relay.request(cluster.path, {"cmd": "linked"}) or {}).get("ranks", [])
    missing = [r for r in range(len(ranked)) if r not in linked]
    if missing:
        raise MgpuError(f"{where[missing[0]]} did not link up with {cluster.address} (the notebook's host)")
    for r, res in done.items():
        cluster.engine_pids[r] = int(res["pid"])
