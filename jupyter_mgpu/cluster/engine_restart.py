"""Start dead ranks' engines again in a running one-host cluster: the supervisor forks each one as it forked
the first (same device, budget, environment; ``engine/startup/launcher.py``), it joins the process group
generation the survivors rebuild into, and registers with the controller under its rank's engine id.

Kernel side: ask the supervisor (``restart/<rank>.json``), then wait for each new engine's pid and its
registration. The controller must first have dropped the dead engine, or the new one would be given another
id: the kernel asks it to at once, as the engine itself asks when it leaves, rather than wait out the
heartbeat's silence (``cluster/processes.py``: 30 s).
"""

from __future__ import annotations

import time
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.engine.startup.doorbell import ring as ring_supervisor
from jupyter_mgpu.errors import EngineDiedError, MgpuError, rank_list

RESTART_DIR = "restart"  # read by the supervisor (engine/startup/launcher.py)


def forget_dead(cluster: Any, ranks: list[int], timeout: float) -> None:
    """Have the controller drop the dead ranks' engines (their ids free for the new ones), and wait until it has."""
    deadline = time.monotonic() + timeout
    engines = {cluster.rank_to_engine[r] for r in ranks}
    client = cluster.client
    for eid in sorted(engines & set(client.ids)):
        # the request a leaving engine sends (ipyparallel's Hub.unregister_engine), on the client's own query
        # socket: the hub answers nothing, and tells every client as when a heart stops
        client.session.send(client._query_socket, "unregistration_request", content={"id": eid})
    while engines & set(cluster.client.ids):
        if time.monotonic() > deadline:
            raise MgpuError(f"the controller still lists the dead engine of {rank_list(ranks)} after {timeout:.0f} s")
        cluster.client.spin()
        time.sleep(0.02)


def request(cluster: Any, ranks: list[int], generation: int, master: tuple[str, int] | None) -> None:
    """Ask the supervisor to fork a new engine for each of ``ranks``, joining group ``generation``."""
    folder = cluster.path / RESTART_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    for r in ranks:
        rd.write_json(folder / f"{r}.json", {"rank": r, "generation": generation, "master": master})
    ring_supervisor(cluster.path)


def wait_registered(cluster: Any, ranks: list[int], old_pids: dict[int, int], timeout: float) -> dict[int, int]:
    """Wait until each restarted rank has a new pid and its engine is registered; the new pids. A rank that
    fails to start again raises the error it wrote."""
    deadline = time.monotonic() + timeout
    while True:
        engines = {int(r): int(p) for r, p in (rd.read_json(cluster.path / "engines.json") or {}).items()}
        fresh = {r: engines[r] for r in ranks if r in engines and engines[r] != old_pids.get(r)}
        failed = {r: e for r, e in cluster.exits().items() if r in fresh}
        if failed:
            from jupyter_mgpu.cluster.local import describe_exit

            r = min(failed)
            raise EngineDiedError(describe_exit(r, failed[r], "while starting again"), ranks=sorted(failed))
        cluster.client.spin()
        if len(fresh) == len(ranks) and {cluster.rank_to_engine[r] for r in ranks} <= set(cluster.client.ids):
            return fresh
        if time.monotonic() > deadline:
            missing = sorted(set(ranks) - set(fresh)) or ranks
            raise MgpuError(f"{rank_list(missing)} did not start again within {timeout:.0f} s")
        time.sleep(0.01)
