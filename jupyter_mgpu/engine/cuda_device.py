"""The thin GPU-only path of an engine: bind the device, cap its memory, read allocator stats.

Only ever called inside an engine after ``CUDA_VISIBLE_DEVICES`` names its one GPU; no machine
without a GPU reaches this code, so it stays small.
"""

from __future__ import annotations

from typing import Any


def bind(mem_per_device: int | None) -> Any:
    """Make the engine's single visible GPU current; cap its allocator at ``mem_per_device`` bytes."""
    import torch

    torch.cuda.set_device(0)
    if mem_per_device:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, mem_per_device / total), 0)
    return torch.device("cuda", 0)


def memory() -> dict[str, Any]:
    """Allocator and device memory of the current GPU, in bytes."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return {
        "allocated_bytes": torch.cuda.memory_allocated(),
        "reserved_bytes": torch.cuda.memory_reserved(),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "free_bytes": free,
        "total_bytes": total,
        "name": torch.cuda.get_device_name(0),
        **_nvml_usage(),
    }


_nvml_handle: Any = None
_nvml_unavailable = False


def _nvml_usage() -> dict[str, int]:
    """This process's memory on its GPU as NVML sees it (CUDA context included); {} without nvidia-ml-py."""
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
            uuid = str(torch.cuda.get_device_properties(0).uuid)  # maps CUDA index 0 to its NVML device
            _nvml_handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        pid = os.getpid()
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(_nvml_handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return {"nvml_used_bytes": int(proc.usedGpuMemory)}
    except Exception:
        pass
    return {}
