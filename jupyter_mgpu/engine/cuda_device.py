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
    }
