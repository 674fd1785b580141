"""The memory budget of a CPU virtual device, enforced by the OS (RLIMIT_DATA), and OOM wording.

The limit covers the process's data segment and private writable mappings (where torch's CPU
allocator puts tensors). It is set to what the engine already uses plus the budget, so the budget is
what user code may allocate on top of the runtime; an allocation past it fails inside torch's own
allocator with a real out-of-memory error.
"""

from __future__ import annotations

import re
import resource

# thread stacks, gloo buffers and allocator slack created after the limit is set
RUNTIME_HEADROOM = 256 * 1024**2


def current_data_bytes() -> int:
    """VmData of this process: the quantity RLIMIT_DATA limits."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def apply(budget_bytes: int) -> int:
    """Limit this process to ``budget_bytes`` of new data; returns the limit set."""
    limit = current_data_bytes() + budget_bytes + RUNTIME_HEADROOM
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return limit


_OOM_PATTERNS = (
    re.compile(r"DefaultCPUAllocator: (?:can't|not enough memory)", re.I),
    re.compile(r"CUDA out of memory", re.I),
    re.compile(r"out of memory", re.I),
)
_TRIED = re.compile(r"(?:you tried to allocate|Tried to allocate) ([0-9.]+) ?(bytes|[KMGT]i?B)", re.I)


def is_oom(exc: BaseException) -> bool:
    """True for torch's allocator failures and Python's MemoryError."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(p.search(str(exc)) for p in _OOM_PATTERNS)


def requested_bytes(message: str) -> int | None:
    """The allocation size an allocator error names, if it names one."""
    m = _TRIED.search(message)
    if not m:
        return None
    value, unit = float(m.group(1)), m.group(2).lower()
    scale = {"bytes": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
             "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}[unit]
    return int(value * scale)
