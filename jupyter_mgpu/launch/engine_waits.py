"""The waits of a host cluster's start (``launch/host_cluster.py``): for the engines to register, and for one
call per engine to answer.

Each wait ends at the first failure, not after the others' waits, with one sentence naming the host or
the engine; meanwhile it watches the cluster's controller and relay, so a start whose infrastructure
ended says so instead of waiting out its timeout.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.cluster import missed_registrations as registrations
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import ipp_cluster

if TYPE_CHECKING:
    from jupyter_mgpu.launch.host_cluster import HostCluster


def check_controller(cluster: HostCluster, when: str) -> None:
    """Raise if the controller or the relay is gone (``when``: what the start was doing)."""
    failure = cluster.infrastructure_failure()
    if failure:
        raise MgpuError(f"{failure} {when}")


def wait_for_engines(cluster: HostCluster, timeout: float, host: str, client_file: Path) -> list[int]:
    """The ids of the engines once ``n`` registered (``--connect``: those running); ``client_file``: the
    controller's connection file, for a client that missed a registration (``cluster/missed_registrations.py``)."""
    want = cluster.opts.n
    deadline = time.monotonic() + timeout
    if cluster.opts.launcher == "connect":
        return _running_engines(cluster, want, timeout)
    assert want is not None  # parse() gives every launcher its engine count
    next_check = time.monotonic() + registrations.CHECK_EVERY_S
    while len(cluster.client.ids) < want:
        check_controller(cluster, "while the engines started")
        if time.monotonic() > next_check:  # an engine that registered while the client connected
            cluster.client = registrations.caught_up(cluster.client, client_file, 10)
            next_check = time.monotonic() + registrations.CHECK_EVERY_S
        ended = ipp_cluster.launcher_stopped(cluster.ipp)
        if ended or time.monotonic() > deadline:
            got = len(cluster.client.ids)
            tail = ipp_cluster.launcher_output(cluster.ipp)
            said = f"; it said: {tail}" if tail else ""
            if ended:
                raise MgpuError(
                    f"the {cluster.opts.launcher} launcher (started from {host}) ended after {got} of "
                    f"{want} engines registered{said}"
                )
            raise MgpuError(
                f"only {got} of {want} engines registered within {timeout:.0f} s ({cluster.opts.launcher} "
                f"launcher, started from {host}){said}"
            )
        cluster.client.spin()
        time.sleep(0.05)
    return sorted(cluster.client.ids)[:want]


def _running_engines(cluster: HostCluster, want: int | None, timeout: float) -> list[int]:
    """``--connect``: the ids of the engines the running cluster has (the first ``want`` of them)."""
    if want:
        try:  # too few: said below, with the figures
            cluster.client.wait_for_engines(want, timeout=timeout, block=True)
        except TimeoutError:
            pass
    ids = sorted(cluster.client.ids)
    if not ids:
        raise MgpuError(f"the cluster in {cluster.opts.connect} has no engines running")
    if want is not None and want > len(ids):
        raise MgpuError(f"asked for {want} engines but the cluster in {cluster.opts.connect} has {len(ids)}")
    return ids[:want] if want else ids


def gather(
    cluster: HostCluster, futures: dict[int, Any], timeout: float, what: str, where: dict[int, str]
) -> dict[int, Any]:
    """Results of one async call per engine; one clear sentence for the first that failed."""
    deadline = time.monotonic() + timeout
    out: dict[int, Any] = {}
    while len(out) < len(futures):  # the first failure is reported at once, not after the others' waits
        for key, ar in futures.items():
            if key in out or not ar.ready():
                continue
            try:
                out[key] = ar.get()
            except Exception as exc:
                ename = getattr(exc, "ename", type(exc).__name__)
                evalue = str(getattr(exc, "evalue", exc)).strip().splitlines()
                raise MgpuError(f"{what} failed on {where[key]}: {ename}: {evalue[-1] if evalue else ''}") from None
        if len(out) == len(futures):
            break
        if time.monotonic() > deadline:
            late = [k for k in futures if k not in out]
            raise MgpuError(f"{what} did not finish within {timeout:.0f} s on {where[late[0]]}")
        check_controller(cluster, f"while {what}")
        time.sleep(0.02)
    return out
