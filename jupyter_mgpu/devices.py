"""Device discovery: visible CUDA GPUs, or CPU virtual devices where there are none.

CUDA is never initialised here (the controller must stay fork-safe): GPUs are counted through NVML
(nvidia-ml-py) when it is installed, else through torch's NVML-based device count.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.units import format_bytes

MIN_BUDGET = 16 * 1024**2  # below this a rank cannot run its own checks and collectives

DEFAULT_CPU_DEVICES = 2


@dataclass(frozen=True)
class DeviceInfo:
    """One device an engine drives: ``kind`` is ``"cuda"`` or ``"cpu"`` (a CPU virtual device)."""

    kind: str
    index: int
    name: str
    total_memory: int  # bytes: the GPU's memory, or the CPU virtual device's budget
    host: str | None = None  # the host, in a cluster that spans hosts (``--launcher``, ``--hosts``, ``--connect``)

    @property
    def label(self) -> str:
        """``cuda:1``, or ``node2:cuda:1`` in a cluster across hosts."""
        return f"{self.host}:{self.kind}:{self.index}" if self.host else f"{self.kind}:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cuda_device_count() -> int:
    """Number of CUDA GPUs visible to this process, without initialising CUDA."""
    known = cuda_device_count_without_torch()
    if known is not None:
        return known
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    return int(torch.cuda.device_count())


def cuda_device_count_without_torch() -> int | None:
    """The visible CUDA GPUs as NVML counts them, 0 where there is no NVIDIA driver; None where only torch can
    tell (a driver, but no nvidia-ml-py): importing torch takes seconds, too long for a check over SSH."""
    if os.environ.get("JUPYTER_MGPU_FORCE_CPU"):
        return 0
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            total: int = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return total
        return len([v for v in visible.split(",") if v.strip() and not v.strip().startswith("-")])
    except Exception:
        pass
    if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")):
        return 0  # no NVIDIA driver on this machine: no need to import torch to know
    return None


def _nvml_info(index: int) -> tuple[str, int] | None:
    """(name, total bytes) of visible GPU ``index`` from NVML, mapping through CUDA_VISIBLE_DEVICES."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if visible:
                token = visible.split(",")[index].strip()
                handle = (
                    pynvml.nvmlDeviceGetHandleByIndex(int(token))
                    if token.isdigit()
                    else pynvml.nvmlDeviceGetHandleByUUID(token)
                )
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            return name, int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def default_cpu_budget(n: int) -> int:
    """A fair share of the RAM available now: 90% of it split evenly over ``n`` virtual devices."""
    import psutil

    return int(psutil.virtual_memory().available * 0.9 / max(n, 1))


def discover(
    n: int | None = None,
    *,
    cpu: bool = False,
    devices: list[int] | None = None,
    mem_per_device: int | None = None,
) -> list[DeviceInfo]:
    """Pick the devices a cluster of ``n`` engines drives, one engine per device."""
    if n is not None and (not isinstance(n, int) or isinstance(n, bool)):
        raise MgpuError(f"the number of devices must be a whole number, got {n!r}")
    if n is not None and n < 1:
        raise MgpuError(f"the number of devices must be at least 1, got {n}")
    if devices is not None:
        if len(devices) == 0:
            raise MgpuError("--devices lists no device; give indices such as 0,2")
        if len(set(devices)) != len(devices):
            raise MgpuError(f"--devices lists a device twice: {','.join(map(str, devices))}")
        if any(d < 0 for d in devices):
            raise MgpuError(f"device indices must be 0 or more, got {','.join(map(str, devices))}")
        if n is not None and n != len(devices):
            raise MgpuError(
                f"asked for {n} devices but --devices lists {len(devices)} "
                f"({','.join(map(str, devices))}); give one or make them agree"
            )
    gpus = 0 if cpu else cuda_device_count()
    if gpus:
        indices = devices if devices is not None else list(range(gpus if n is None else n))
        if max(indices) >= gpus or (n is not None and n > gpus):
            wanted = n if n is not None else len(indices)
            raise MgpuError(
                f"asked for {wanted} GPUs (indices {','.join(map(str, indices))}) but only {gpus} "
                f"{'is' if gpus == 1 else 'are'} visible; use fewer, or --cpu for CPU virtual devices"
            )
        out = []
        for i in indices:
            info = _nvml_info(i)
            name, total = info if info else (f"CUDA GPU {i}", 0)
            out.append(DeviceInfo("cuda", i, name, total))
        return out
    indices = devices if devices is not None else list(range(n if n is not None else DEFAULT_CPU_DEVICES))
    budget = mem_per_device if mem_per_device is not None else default_cpu_budget(len(indices))
    check_cpu_budget(budget, len(indices))
    return [DeviceInfo("cpu", i, f"CPU virtual device {i}", budget) for i in indices]


def check_cpu_budget(budget: int, n: int) -> None:
    """Refuse a budget too small for a rank to start; warn when all ranks' budgets pass the free RAM."""
    import warnings

    import psutil

    if budget < MIN_BUDGET:
        raise MgpuError(
            f"--mem-per-device {format_bytes(budget)} is below the {format_bytes(MIN_BUDGET)} a rank "
            "needs to start (its own collectives and checks); give at least that much"
        )
    available = psutil.virtual_memory().available
    if budget * n > available:
        warnings.warn(
            f"{n} devices × {format_bytes(budget)} is more than the {format_bytes(available)} of memory "
            "available now: the machine may run out of memory before a rank reaches its budget",
            stacklevel=4,
        )
