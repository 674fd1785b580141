"""The thin GPU-only path of an engine: bind its device, cap that device's memory, read allocator stats.

Only ever called inside an engine after ``CUDA_VISIBLE_DEVICES`` names its host's ranks' GPUs (as
torchrun does, ``engine/startup/gpu_plan.py``); the rank uses ``cuda:LOCAL_RANK``. No machine without a GPU
reaches this code, so it stays small.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_index: int | None = None  # the device bind() made current


def bind(index: int, mem_per_device: int | None) -> Any:
    """Make visible GPU ``index`` (the rank's local rank) current; cap its allocator at ``mem_per_device`` bytes."""
    global _index
    import torch

    torch.cuda.set_device(index)
    if mem_per_device:
        total = torch.cuda.get_device_properties(index).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, mem_per_device / total), index)
    _index = index
    return torch.device("cuda", index)


def on_out_of_memory(release: Callable[[], Any]) -> bool:
    """Call ``release`` when torch's caching allocator runs out of memory (after it freed its cache), so the
    next allocation finds what ``release`` gave back; False where this torch has no such observer."""
    import torch

    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return False
    attach(lambda device, size, allocated, free: release())
    return True


def own_device() -> int:
    """The rank's GPU index. The one bind() chose, not ``torch.cuda.current_device()`` alone: that is
    per thread, and a thread of ours (the telemetry sampler) starts on CUDA's default device 0."""
    import torch

    return _index if _index is not None else torch.cuda.current_device()


def memory() -> dict[str, Any]:
    """Allocator and device memory of the rank's own GPU, in bytes."""
    import torch

    device = own_device()
    free, total = torch.cuda.mem_get_info(device)
    return {
        "allocated_bytes": torch.cuda.memory_allocated(device),
        "reserved_bytes": torch.cuda.memory_reserved(device),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "free_bytes": free,
        "total_bytes": total,
        "name": torch.cuda.get_device_name(device),
        **_nvml_usage(device),
    }


_nvml_handle: Any = None
_nvml_unavailable = False


def _nvml_usage(device: int) -> dict[str, int]:
    """This process's memory on GPU ``device`` as NVML sees it (CUDA context included); {} without nvidia-ml-py."""
    global _nvml_handle, _nvml_unavailable
    if _nvml_unavailable:
        return {}
    try:
        import os

        import torch

        try:
            import pynvml  # provided by nvidia-ml-py
        except ImportError:
            _nvml_unavailable = True
            return {}

        if _nvml_handle is None:
            try:
                pynvml.nvmlInit()
            except Exception:
                _nvml_unavailable = True
                raise
            uuid = str(torch.cuda.get_device_properties(device).uuid)  # maps the CUDA index to its NVML device
            _nvml_handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        pid = os.getpid()
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(_nvml_handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return {"nvml_used_bytes": int(proc.usedGpuMemory)}
    except Exception:
        pass
    return {}
