"""Process-group rendezvous: backend choice, a private FileStore, and the collective timeout."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from jupyter_mgpu.errors import MgpuError

KNOWN_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")
DEFAULT_TIMEOUT = 60.0


def choose_backend(requested: str | None, device_kind: str) -> str:
    """The backend for a cluster on ``device_kind`` devices: gloo on CPU, nccl on GPU, unless asked."""
    if requested is None:
        return "nccl" if device_kind == "cuda" else "gloo"
    name = str(requested).strip().lower()
    if name not in KNOWN_BACKENDS:
        raise MgpuError(f"unknown backend {requested!r}; choose gloo (CPU or GPU) or nccl (GPU)")
    if name == "nccl" and device_kind != "cuda":
        raise MgpuError("backend 'nccl' needs CUDA GPUs, but this cluster uses CPU virtual devices; use --backend gloo")
    import torch.distributed as dist

    if not dist.is_backend_available(name):
        raise MgpuError(f"backend {name!r} is not available in this build of torch; use gloo")
    return name


def check_timeout(timeout: float | int | None) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (0 < timeout < 86400 * 7):
        raise MgpuError(f"timeout must be a number of seconds above 0, got {timeout!r}")
    return float(timeout)


def collective_seconds(backend: str, given: float | None) -> float:
    """The group's collective timeout: the one given, else torch's default for ``backend`` (30 min for
    gloo, 10 for nccl): a legitimate long wait is never cut short; stuck ranks are named by the kernel."""
    if given is not None:
        return float(given)
    from torch.distributed import distributed_c10d as c10d

    try:
        return float(c10d._get_default_timeout(c10d.Backend(backend)).total_seconds())
    except Exception:  # another torch: its documented default
        return 600.0 if backend == "nccl" else 1800.0


def store_path(rundir: Path, generation: int = 0) -> Path:
    return Path(rundir) / f"store.{generation}"


def init_process_group(
    rundir: str,
    rank: int,
    world_size: int,
    backend: str,
    timeout: float,
    generation: int = 0,
    store: dict[str, Any] | None = None,
    collective_timeout: float | None = None,
) -> Any:
    """Join the cluster's process group (engine side). Traffic stays on loopback.

    ``generation`` > 0 rebuilds the group after a failed collective, through a fresh store file.
    With ``store`` (a cluster across hosts) the ranks meet in rank 0's TCP store instead
    (``engine/group/tcp_rendezvous.py``), each generation under its own prefix, on the interface set in
    ``GLOO_SOCKET_IFNAME`` by the engine's setup. ``timeout`` bounds the meeting; ``collective_timeout``
    (torch's default when None) is the group's. Returns the store the ranks met in.
    """
    import torch.distributed as dist
    from torch._C._distributed_c10d import FileStore, PrefixStore, Store

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    if store is not None:
        from jupyter_mgpu.engine.group import tcp_rendezvous as tcp_store_server

        meeting: Store = PrefixStore(f"mgpu-{generation}/", tcp_store_server.connect(store, timeout))
    else:
        meeting = FileStore(str(store_path(Path(rundir), generation)), world_size)
    kwargs: dict[str, Any] = {}
    if backend == "nccl":
        import torch

        kwargs["device_id"] = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(
        backend,
        store=meeting,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=collective_seconds(backend, collective_timeout)),
        **kwargs,
    )
    return meeting  # the store the ranks met in (the caller may share more through it)
