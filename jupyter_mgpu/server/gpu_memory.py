"""The host's GPUs as NVML sees them, with each one's memory split into this user's and other users'.

On a shared GPU node NVML lists every process using a GPU, whoever runs it. The sidebar shows how much
memory other users hold (``other_users_bytes``), never who they are: a process's pid is looked up only
to compare its owner's uid with this server's, and only byte counts leave this module. A process whose
owner cannot be seen (another user's under ``hidepid``, another container's) counts as another user's.
Where NVML cannot list processes, both shares are ``None`` and only the device's total is shown.

Devices are the ones visible to this server (``CUDA_VISIBLE_DEVICES``: indices or UUIDs), numbered as
CUDA numbers them, which is what ``%mgpu_init`` starts one engine per.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import psutil


def owner_uid(pid: int) -> int | None:
    """The real uid of process ``pid``, or None when it cannot be seen."""
    try:
        uid: int = psutil.Process(pid).uids().real
        return uid
    except (psutil.Error, ValueError, OSError):
        return None


def split_memory(
    processes: Iterable[Any], uid: int, owner_of: Callable[[int], int | None] = owner_uid
) -> tuple[int, int]:
    """``(own, other users')`` bytes of NVML process records (``.pid``, ``.usedGpuMemory``).

    A process listed twice (compute and graphics) counts once; one whose usage NVML cannot tell
    (``usedGpuMemory`` None) counts as 0.
    """
    own = other = 0
    seen: set[int] = set()
    for proc in processes:
        pid, used = getattr(proc, "pid", None), getattr(proc, "usedGpuMemory", None)
        if not isinstance(pid, int) or pid in seen:
            continue
        seen.add(pid)
        used = used if isinstance(used, int) and used > 0 else 0
        if owner_of(pid) == uid:
            own += used
        else:
            other += used
    return own, other


def _processes(nvml: Any, handle: Any) -> list[Any]:
    out = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    try:
        out += list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
    except Exception:  # not supported on this device: compute processes are what matters here
        pass
    return out


def read_devices(
    nvml: Any, visible: str | None, uid: int, owner_of: Callable[[int], int | None] = owner_uid
) -> list[dict[str, Any]]:
    """One entry per GPU visible to this server (keys mirrored by ``DeviceEntry`` in the labextension)."""
    tokens = [t.strip() for t in visible.split(",")] if visible else None
    indices = tokens if tokens is not None else [str(i) for i in range(nvml.nvmlDeviceGetCount())]
    out = []
    for cuda_index, token in enumerate(indices):
        if not token or token.startswith("-"):  # CUDA stops at the first invalid entry
            break
        handle = (
            nvml.nvmlDeviceGetHandleByIndex(int(token)) if token.isdigit() else nvml.nvmlDeviceGetHandleByUUID(token)
        )
        name = nvml.nvmlDeviceGetName(handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            util: int | None = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:
            util = None
        own: int | None
        other: int | None
        try:
            own, other = split_memory(_processes(nvml, handle), uid, owner_of)
        except Exception:  # NVML may not list processes here (permissions, some containers)
            own = other = None
        out.append(
            {
                "id": f"cuda:{cuda_index}",
                "kind": "cuda",
                "index": cuda_index,
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "used_bytes": int(mem.used),
                "total_bytes": int(mem.total),
                "utilization": util,
                "cluster_id": None,
                "rank": None,
                "own_bytes": own,
                "other_users_bytes": other,
            }
        )
    return out


def nvml_devices() -> list[dict[str, Any]] | None:
    """This host's GPUs through nvidia-ml-py, or None without it, a driver or a GPU (not an error)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return read_devices(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getuid())
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
