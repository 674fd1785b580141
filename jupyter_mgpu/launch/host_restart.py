"""Start a dead rank again on its own host, in a cluster across hosts (``launch/host_cluster.py``), for
``mg.restart`` (``session/rank_restart.py``; one host: ``cluster/engine_restart.py``).

The launcher that started the engines starts one more for each dead rank: over SSH on the rank's host
(ipyparallel's engine set for that host, as at the start), or one more local engine. Its new engine id
registers; it is asked where it runs (``engine/startup/launched_setup.identify``) and must run on the
dead rank's host (else it is stopped, and one sentence says where it came up). A survivor opens a fresh
rendezvous store on its address of the cluster interface; the survivors rebuild their process group
into the next generation through it (``launched_setup.rejoin``) while each new engine is set up with its
rank's config (device, budget, environment, local rank) and joins that generation and the relay; then
the store is closed to newcomers, as at the start. The mpi, Slurm and PBS launchers cannot start one
engine on a given host, and ``--connect`` engines are not ours to start: each refused in one sentence,
as is a host that SSH no longer reaches.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.startup import launched_setup
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import ipp_cluster, rank_setup, ranks, relay
from jupyter_mgpu.launch.engine_waits import check_controller, gather

if TYPE_CHECKING:
    from jupyter_mgpu.launch.host_cluster import HostCluster

LAUNCHERS = ("local", "ssh")  # those that start one engine on a chosen host
AGAIN = "run %mgpu_init --restart to start the cluster again"
REGISTER_TIMEOUT = 60.0  # at least this long for a new engine to register (SSH, the controller's heartbeat)
SETUP_TIMEOUT = 120.0  # at least this long for torch to load on the new rank and the group to meet


def check(cluster: HostCluster, chosen: list[int]) -> None:
    """Refuse, in one sentence naming the rank and its host, a restart this cluster's launcher cannot do, or
    one whose host SSH no longer reaches (checked before anything is released or started)."""
    opts = cluster.opts
    r = chosen[0]
    if opts.launcher not in LAUNCHERS:
        why = (
            "its engines came from a running ipyparallel cluster (--connect)"
            if opts.launcher == "connect"
            else f"the {opts.launcher} launcher cannot start one engine on a given host"
        )
        raise MgpuError(
            f"rank {r} on {cluster.hosts[r]} cannot be started again: restarting a rank needs the ssh or local "
            f"launcher and {why}; {AGAIN}"
        )
    if opts.launcher == "ssh":
        for r in {cluster.hosts[r]: r for r in reversed(chosen)}.values():  # each host asked once
            entry = next((h for h, _ in opts.hosts if h.split("@", 1)[-1] == cluster.hosts[r]), cluster.hosts[r])
            problem = ipp_cluster.ssh_problem(opts, entry)
            if problem and problem.startswith("cannot reach"):
                raise MgpuError(f"rank {r}'s host {cluster.hosts[r]} is gone ({problem}); {AGAIN}")
            if problem:  # it answers, but cannot run an engine any more
                raise MgpuError(f"rank {r} cannot be started again on {cluster.hosts[r]}: {problem}")


def start_again(session: Any, chosen: list[int], survivors: list[int], timeout: float) -> dict[int, int]:
    """Start each of ``chosen`` again on its host, joined with ``survivors`` in the next process-group
    generation; the new pids. The cluster's rank -> engine mapping follows the new engines."""
    cluster: HostCluster = session.cluster
    sets: list[str] = []
    try:
        new = _started(cluster, chosen, max(REGISTER_TIMEOUT, timeout), sets)
        pids = _join(session, new, chosen, survivors, max(SETUP_TIMEOUT, timeout))
    except BaseException:
        _stop_sets(cluster, sets)
        raise
    for r, e in new.items():
        cluster.rank_to_engine[r] = e.engine_id
        cluster.rank_info[r] = e.info
    return pids


def _started(cluster: HostCluster, chosen: list[int], timeout: float, sets: list[str]) -> dict[int, ranks.Engine]:
    """One new engine per rank, registered and identified on the rank's host (appends its engine sets)."""
    client = cluster.client
    before = set(client.ids) | set(cluster.rank_to_engine.values())
    stamp = int(time.time() * 1000)
    with ipp_cluster.stderr_to(cluster.path / "processes.log"):
        for r in chosen:
            set_id = f"rank{r}-{stamp}"
            sets.append(set_id)
            ipp_cluster.start_one(cluster.ipp, cluster.opts, cluster.loop, cluster.hosts[r], set_id, timeout)
    deadline = time.monotonic() + timeout
    while len(set(client.ids) - before) < len(chosen):
        check_controller(cluster, "while a rank started again")
        ended = [r for r, s in zip(chosen, sets) if ipp_cluster.set_stopped(cluster.ipp, s)]
        if ended or time.monotonic() > deadline:
            r = (ended or chosen)[0]
            said = ipp_cluster.launcher_output(cluster.ipp)
            how = "its launcher ended" if ended else f"it did not register within {timeout:.0f} s"
            raise MgpuError(
                f"the new engine of rank {r} on {cluster.hosts[r]} did not start: {how}"
                + (f" ({said})" if said else "")
            )
        client.spin()
        time.sleep(0.02)
    found = rank_setup.identify(cluster, sorted(set(client.ids) - before), timeout)
    new: dict[int, ranks.Engine] = {}
    for r in chosen:
        free = [e for e in found if e.engine_id not in {n.engine_id for n in new.values()}]
        e = next((e for e in free if e.key == cluster.rank_info[r]["host_key"]), None)
        if e is None:
            stray = free[0]
            where = stray.info.get("label") or stray.info["hostname"]
            raise MgpuError(
                f"the engine started again for rank {r} runs on {where}, not on {cluster.hosts[r]}: it was "
                f"stopped; {AGAIN}"
            )
        e.host, e.local_rank = cluster.hosts[r], int(cluster.rank_configs[r]["local_rank"])
        new[r] = e
    return new


def _join(
    session: Any, new: dict[int, ranks.Engine], chosen: list[int], survivors: list[int], timeout: float
) -> dict[int, int]:
    """Open a store on a survivor, set the new engines up as their ranks in the next group generation while
    the survivors rejoin it, close the store to newcomers; the new ranks' pids."""
    cluster: HostCluster = session.cluster
    client = cluster.client
    where = {r: f"rank {r} ({cluster.hosts[r]})" for r in range(cluster.world_size)}
    host = min(survivors)  # rank 0 while it lives, as at the start
    address = str(cluster.rank_info[host]["address"])
    engine = client[cluster.rank_to_engine[host]]
    opened = engine.apply_async(launched_setup.open_store, address, cluster.world_size, cluster.spec.timeout)
    port = gather(cluster, {host: opened}, 60, "opening a rendezvous store for the restart", where)[host]
    store = {"host": address, "port": int(port), "world_size": cluster.world_size}
    session.recovery.generation += 1
    generation = session.recovery.generation
    for r in chosen:  # the dead engine's record: the new one's link writes its own if it ends
        (cluster.path / "exits" / f"{r}.json").unlink(missing_ok=True)
    config = {r: {**cluster.rank_configs[r], "store": store, "restart": {"generation": generation}} for r in chosen}
    futures = {r: client[new[r].engine_id].apply_async(launched_setup.setup, config[r]) for r in chosen}
    futures.update(
        {r: client[cluster.rank_to_engine[r]].apply_async(launched_setup.rejoin, generation, store) for r in survivors}
    )
    try:
        done = gather(cluster, futures, timeout, "joining the rebuilt process group", where)
    except BaseException:  # closed once the survivor's wait for the group ends (its calls run in order)
        engine.apply_async(launched_setup.close_store_listener)
        raise
    closed = engine.apply_async(launched_setup.close_store_listener)
    gather(cluster, {host: closed}, 30, "closing the rendezvous store to newcomers", where)
    linked = (relay.request(cluster.path, {"cmd": "linked"}) or {}).get("ranks", [])
    missing = [r for r in chosen if r not in linked]
    if missing:
        raise MgpuError(f"{where[missing[0]]} did not link up with {cluster.address} (the notebook's host)")
    for r in chosen:
        cluster.rank_configs[r] = config[r]
    return {r: int(done[r]["pid"]) for r in chosen}


def _stop_sets(cluster: HostCluster, sets: list[str]) -> None:
    """Stop the engine sets a failed restart started (their engines, wherever they run); never raises."""
    with ipp_cluster.stderr_to(cluster.path / "processes.log"):
        for set_id in sets:
            try:
                cluster.loop.run(lambda s=set_id: cluster.ipp.stop_engines(s), 20)
            except Exception:
                pass
