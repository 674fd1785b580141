"""Engines on several hosts through ipyparallel's launchers: launcher choice, per-host pinning, rank order.

``start(n, launcher=..., hosts=..., ...)`` checks the request (``options``), starts ipyparallel's
controller and the user's launcher (``ipp_cluster``), orders ranks by host then local device
(``ranks``) and sets each engine up (``host_cluster``). The single-host path (``cluster.Cluster``,
engines forked from a warm supervisor) is untouched; this one is chosen only when a launcher,
``--hosts`` or ``--connect`` is given.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.launch.options import LAUNCHERS, LaunchOptions, parse

OPTION_NAMES = (
    "launcher",
    "hosts",
    "per_host",
    "interface",
    "connect",
    "partition",
    "time",
    "account",
    "launcher_args",
)


def requested(options: dict[str, Any]) -> bool:
    """Whether ``options`` (``mg.init`` keywords) ask for launcher-started engines."""
    return any(options.get(k) not in (None, "", [], ()) for k in ("launcher", "hosts", "connect"))


def start(
    n: int | None,
    *,
    cpu: bool = False,
    backend: str | None = None,
    mem_per_device: int | None = None,
    timeout: float = 60.0,
    telemetry_period: float = 0.1,
    **launch: Any,
) -> Any:
    """Start (or join) a cluster of launcher-started engines; a :class:`HostCluster`."""
    from jupyter_mgpu.launch.host_cluster import HostCluster

    opts = parse(n, **launch)
    return HostCluster.start(
        opts,
        cpu=cpu,
        backend=backend,
        mem_per_device=mem_per_device,
        timeout=timeout,
        telemetry_period=telemetry_period,
    )


__all__ = ["LAUNCHERS", "OPTION_NAMES", "LaunchOptions", "parse", "requested", "start"]
