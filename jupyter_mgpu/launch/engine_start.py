"""The first step of a host cluster's start (``launch/host_cluster.py``): its ipyparallel controller and engines.

Either join a cluster that already runs (``--connect``: its controller's address picks the interface), or
pick the interface, start ipyparallel's controller there and the engines with the user's launcher. Each
function fills the cluster's fields as it goes, so a start that fails midway stops what it started.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.cluster.processes import kernel_identity
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import ipp_cluster
from jupyter_mgpu.launch.addresses import choose_address

if TYPE_CHECKING:
    from jupyter_mgpu.launch.host_cluster import HostCluster


def join_running(cluster: HostCluster, host: str, connect: str) -> Path:
    """``--connect``: the running cluster in ``connect``; returns its client connection file."""
    cluster.ipp = ipp_cluster.connect_cluster(connect)
    client_file = Path(cluster.ipp.profile_dir) / "security" / f"ipcontroller-{cluster.ipp.cluster_id}-client.json"
    location = (rd.read_json(client_file) or {}).get("location")
    cluster.interface, cluster.address = choose_address(cluster.opts, host, location)
    return client_file


def start_controller_and_engines(
    cluster: HostCluster,
    host: str,
    register_timeout: float,
    phase: Callable[[str], None],
    cpu: bool = False,
    mem_per_device: int | None = None,
) -> Path:
    """Start the controller on the chosen interface and the engines with the user's launcher, once the hosts
    passed ``ipp_cluster.preflight`` (for ``cpu`` and ``mem_per_device``, the devices asked for); returns the
    client connection file. ``phase`` notes each step in ``launch.log``."""
    opts = cluster.opts
    cluster.interface, cluster.address = choose_address(opts, host)
    ipp_cluster.preflight(opts, host, cpu, mem_per_device)
    cluster.ipp = ipp_cluster.make_cluster(
        opts, cluster.path / "profile", cluster.cluster_id, kernel_identity(), cluster.address
    )
    phase("starting the controller")
    cluster.loop.run(cluster.ipp.start_controller, 60)
    phase(f"starting the engines ({opts.launcher})")
    cluster.controller = getattr(cluster.ipp.controller, "process", None)
    try:
        with ipp_cluster.stderr_to(cluster.path / "processes.log"):
            ipp_cluster.start_engines(cluster.ipp, opts, cluster.loop, register_timeout)
    except subprocess.CalledProcessError as exc:
        out = (exc.output or b"").decode(errors="replace").strip().splitlines()
        raise MgpuError(f"the {opts.launcher} launcher failed on {host}: {(out or [str(exc)])[-1]}") from None
    return Path(cluster.ipp.profile_dir) / "security" / f"ipcontroller-{cluster.cluster_id}-client.json"
