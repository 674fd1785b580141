"""Which of this server's kernels started a cluster, so the sidebar and the status bar can tell the current
notebook's cluster from the clusters of other notebooks.

A cluster's state file names its kernel by pid (``kernel_pid``, ``cluster/processes.kernel_identity``);
JupyterLab knows a notebook's kernel by the server's kernel id. The server's kernel manager keeps each
local kernel's pid in its provisioner; a kernel started through a wrapper (a shell script, ``conda run``)
has the wrapper's pid there, so the nearest parents of the cluster's kernel pid count too. A kernel this
server cannot see (another server's, a gateway's, a plain ``python`` process) is ``None``: "not one of
this server's kernels", which the labextension shows as such.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psutil

PARENTS_CHECKED = 4  # a wrapper is the kernel's parent, or a few levels up at most

KernelPids = Callable[[], dict[int, str]]


def kernel_pids(kernel_manager: Any) -> dict[int, str]:
    """``{pid: kernel id}`` of the local kernels ``kernel_manager`` (the server's) runs; ``{}`` when it cannot say.

    Called from the stream's worker thread: the manager's kernel table is only read, and a kernel that
    starts or ends meanwhile is simply seen on the next snapshot."""
    out: dict[int, str] = {}
    if kernel_manager is None:
        return out
    try:
        ids = list(kernel_manager.list_kernel_ids())
    except Exception:  # a manager of another kind, or its table changing under us
        return out
    for kid in ids:
        try:
            provisioner = getattr(kernel_manager.get_kernel(kid), "provisioner", None)
            pid = getattr(provisioner, "pid", None)
        except Exception:  # the kernel ended between the listing and this look
            continue
        if isinstance(pid, int) and not isinstance(pid, bool):
            out[pid] = str(kid)
    return out


def kernel_of(pid: Any, by_pid: dict[int, str]) -> str | None:
    """The id of the kernel in ``by_pid`` whose process is ``pid`` or one of its nearest parents; else None."""
    if not by_pid or not isinstance(pid, int) or isinstance(pid, bool):
        return None
    if pid in by_pid:
        return by_pid[pid]
    try:
        parents = psutil.Process(pid).parents()[:PARENTS_CHECKED]
    except (psutil.Error, OSError, ValueError):
        return None
    return next((by_pid[p.pid] for p in parents if p.pid in by_pid), None)
