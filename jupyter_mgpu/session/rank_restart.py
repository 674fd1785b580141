"""``%mgpu_restart`` / ``mg.restart``: start dead ranks again and keep everything the others hold.

One engine lost (the OOM killer, a segfault in an extension, a CUDA error that poisons the process) used to
cost the whole cluster: ``%mgpu_init --restart`` started every rank afresh, their models and data gone. Here
the supervisor forks a new engine for each dead rank, on the same device with the same budget and
environment (``cluster/engine_restart.py``), while the survivors leave their broken process group for a new
generation that the new engines join; the survivors' namespaces, shards and tensors are untouched. What a new
rank lacks is said plainly (the names its peers define); ``%mgpu_init --restart`` still starts over. On a
cluster across hosts the launcher that started the engines starts the rank again on its own host
(``launch/host_restart.py``: ssh or local; the others refuse in one sentence).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.errors import MgpuError, rank_list

NAMES_SHOWN = 8  # a new rank's missing names listed (within NAMES_WIDTH characters), then counted
NAMES_WIDTH = 60
SETTLE_S = 15.0  # how long a survivor released from a collective with the dead rank gets to leave its call: DDP
# unwinding its backward on 4 ranks over 2 loaded cores stayed busy past 3 s (run F of session 29); it returns once idle


@dataclass
class Restarted:
    """What a restart did: the ranks started again, their new pids, seconds taken, names they lack."""

    ranks: list[int]
    pids: dict[int, int]
    seconds: float
    lacking: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        said = f"{rank_list(self.ranks)} started again in {self.seconds:.1f} s; the process group was rebuilt"
        if self.lacking:
            shown: list[str] = []
            for name in self.lacking[:NAMES_SHOWN]:
                if shown and len(", ".join([*shown, name])) > NAMES_WIDTH:
                    break
                shown.append(name)
            more = f" and {len(self.lacking) - len(shown)} more" if len(self.lacking) > len(shown) else ""
            verb = "is" if len(self.ranks) == 1 else "are"
            said += f"\n{rank_list(self.ranks)} {verb} new: {', '.join(shown)}{more}"
            said += f" {'is' if len(self.lacking) == 1 else 'are'} not defined there"
            said += "\n(mg.heal copies them from a peer, or run their cells again)"
        return said

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _chosen(session: Any, ranks: list[int] | None) -> list[int]:
    """The dead ranks to start again, or one sentence on what is wrong with the request."""
    world = session.world_size
    dead = sorted(session.cluster.exits())
    if ranks is None:
        if not dead:
            raise MgpuError("no rank is dead: nothing to restart (%mgpu_init --restart starts every rank again)")
        return dead
    wanted = sorted({int(r) for r in ranks})
    outside = [r for r in wanted if not 0 <= r < world]
    if outside:
        raise MgpuError(f"{rank_list(outside)} is out of range: this session has ranks 0-{world - 1}")
    alive = [r for r in wanted if r not in dead]
    if alive:
        raise MgpuError(
            f"{rank_list(alive)} {'is' if len(alive) == 1 else 'are'} alive: only a dead rank is restarted "
            "(%mgpu_init --restart starts every rank again)"
        )
    return wanted


def restart(session: Any, ranks: list[int] | None = None) -> Restarted:
    """Start ``ranks`` (default: every dead one) again on their devices; the other ranks keep everything."""
    from jupyter_mgpu.cluster.local import Cluster

    session.check_alive()
    cluster = session.cluster
    chosen = _chosen(session, ranks)
    if not isinstance(cluster, Cluster):  # across hosts: through the launcher that started the engines
        from jupyter_mgpu.launch import host_restart

        host_restart.check(cluster, chosen)
    survivors = [r for r in range(session.world_size) if r not in cluster.exits()]
    if not survivors:
        raise MgpuError("every rank is dead: run %mgpu_init --restart to start a new cluster")
    busy = session.recovery.busy(survivors)
    if busy:  # left in a collective with the dead rank (it can never complete): released, as the stop button does
        session.recovery.release(busy)
        busy = session.recovery.wait_idle(busy, SETTLE_S)
    if busy:
        raise MgpuError(
            f"{rank_list(busy)} still run{'s' if len(busy) == 1 else ''} a call: restart once it ends, or stop it"
        )
    began = time.monotonic()
    cluster.restarting = chosen  # the sidebar says so (the cluster's state file) until they are up
    cluster.write_state("running")
    try:
        return _restart(session, chosen, survivors, began)
    finally:
        cluster.restarting = []
        if session.alive:
            cluster.write_state("running")


def _restart(session: Any, chosen: list[int], survivors: list[int], began: float) -> Restarted:
    from jupyter_mgpu.cluster.local import Cluster
    from jupyter_mgpu.engine.execution import namespace_transfer

    cluster = session.cluster
    timeout = max(30.0, session.timeout)
    if isinstance(cluster, Cluster):
        pids = _fork_again(session, chosen, survivors, timeout)
    else:
        from jupyter_mgpu.launch import host_restart

        pids = host_restart.start_again(session, chosen, survivors, timeout)
    recovery = session.recovery
    recovery.dirty, recovery.released = None, set()
    for handle in list(session.handles.values()):  # their shards on the new ranks died with the old engines
        lose = getattr(handle, "_lose", None)
        if lose is not None:
            lose(chosen)
    cluster.engine_pids.update(pids)
    for r in chosen:
        session.direct.forget(r)
    if 0 in chosen and survivors:  # a new rank 0 serves a new store: the survivors' variables follow it
        address = session.run(_master_address, targets=[0])[0]
        session.run(_use_master, address, targets=survivors)
    theirs = set().union(*(set(n) for n in session.run(namespace_transfer.names, targets=survivors)))
    mine = set().union(*(set(n) for n in session.run(namespace_transfer.names, targets=chosen)))
    return Restarted(chosen, pids, time.monotonic() - began, sorted(theirs - mine))


def _fork_again(session: Any, chosen: list[int], survivors: list[int], timeout: float) -> dict[int, int]:
    """One host: the supervisor forks each dead rank again while the survivors rebuild; the new pids."""
    from jupyter_mgpu.cluster import engine_restart
    from jupyter_mgpu.engine.startup import runtime

    cluster = session.cluster
    engine_restart.forget_dead(cluster, chosen, timeout)  # the controller frees their engine ids first
    master = None
    if 0 in survivors:  # the one-host store rank 0 serves for MASTER_ADDR / MASTER_PORT, kept
        address = session.run(_master_address, targets=[0])[0]
        master = (address[0], int(address[1])) if address else None
    recovery = session.recovery
    recovery.generation += 1
    rebuilt = session._view(survivors).apply_async(runtime.rebuild_process_group, recovery.generation)
    old = dict(cluster.engine_pids)
    engine_restart.request(cluster, chosen, recovery.generation, master)
    pids = engine_restart.wait_registered(cluster, chosen, old, timeout)
    rebuilt.wait(timeout)
    if not rebuilt.ready():
        raise MgpuError(f"{rank_list(survivors)} did not join the new process group within {timeout:.0f} s")
    rebuilt.get()
    return pids


def _master_address() -> list[Any] | None:
    import os

    port = os.environ.get("MASTER_PORT")
    return [os.environ.get("MASTER_ADDR", "127.0.0.1"), int(port)] if port else None


def _use_master(address: list[Any] | None) -> None:
    import os

    if address:
        os.environ.update(MASTER_ADDR=str(address[0]), MASTER_PORT=str(address[1]))
