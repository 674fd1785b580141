"""Engines on several hosts through ipyparallel's launchers: launcher choice, per-host pinning, rank order.

``start(request, opts)`` takes the request checked by ``options.parse``, starts ipyparallel's
controller and the user's launcher (``ipp_cluster``), orders ranks by host then local device
(``ranks``) and sets each engine up (``host_cluster``). The single-host path (``cluster.Cluster``,
engines forked from a warm supervisor) is untouched; this one is chosen only when a launcher,
``--hosts`` or ``--connect`` is given.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.init_options import InitOptions
from jupyter_mgpu.launch.launcher_options import LAUNCHERS, LaunchOptions, parse


def start(request: LaunchOptions, opts: InitOptions) -> Any:
    """Start (or join) a cluster of launcher-started engines; a :class:`HostCluster`.

    ``request`` is ``parse`` of the launch options, ``opts`` the checked options of the whole start
    (``session/options.py``)."""
    from jupyter_mgpu.launch.host_cluster import HostCluster

    return HostCluster.start(request, opts)


__all__ = ["LAUNCHERS", "LaunchOptions", "parse", "start"]
