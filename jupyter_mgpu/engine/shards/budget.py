"""The memory budget of a CPU virtual device, and out-of-memory wording.

The budget caps the bytes of live CPU tensors on a rank, as a GPU of that size would: a shim in front
of torch's CPU allocator (``native/budget_allocator.cpp``, built by ``allocator_budget.py``) counts
every tensor storage and refuses, with torch's own out-of-memory error, an allocation that would take
the total past the budget. The engine's own memory (Python, libraries, gloo's buffers, threads) is
not the device's and does not count, however it grows; shard blocks the engine maps itself are
charged to the same count. So a "1 GiB" device holds 1 GiB of tensors, and the free memory the
planner sees is exactly what can still be allocated.

The OS limit (RLIMIT_DATA) stays as a backstop for the whole process. Where the shim cannot be built
(no C++ compiler) it is the budget itself, as before: the engine's data size at start plus the budget
plus headroom for the runtime, which makes the budget approximate (``mode()`` says which is in force).
"""

from __future__ import annotations

import os
import re
import resource

from jupyter_mgpu.engine.shards import allocator_budget

# rlimit mode: thread stacks, gloo buffers and allocator slack created after the limit is set
RUNTIME_HEADROOM = 256 * 1024**2
# allocator mode: the OS backstop leaves the engine this much beyond twice the budget for itself. It is
# host memory, not the device's: FSDP's all-gather/reduce-scatter buffers alone fragment glibc's heap
# until the data segment is ~2 GiB past the live tensors (measured with mg.compare on 4 ranks), so a
# tight backstop would fail allocations that the budget admits.
HOST_HEADROOM = 4 * 1024**3
_mode: str | None = None
_fallback_reason: str | None = None


def current_data_bytes() -> int:
    """VmData of this process: the quantity RLIMIT_DATA limits."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def apply(budget_bytes: int) -> int:
    """Cap this process's tensors at ``budget_bytes``; returns the OS limit set as the backstop."""
    global _mode, _fallback_reason
    try:
        if os.environ.get("JUPYTER_MGPU_BUDGET_SHIM", "1") == "0":
            raise allocator_budget.BuildError("JUPYTER_MGPU_BUDGET_SHIM=0 asks for the OS limit")
        allocator_budget.install(budget_bytes)
        _mode = "allocator"
        limit = current_data_bytes() + 2 * budget_bytes + HOST_HEADROOM
    except allocator_budget.BuildError as exc:
        _mode, _fallback_reason = "rlimit", str(exc)
        limit = current_data_bytes() + budget_bytes + RUNTIME_HEADROOM
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return limit


def mode() -> str | None:
    """``allocator`` (exact tensor bytes), ``rlimit`` (the OS limit, approximate) or None (no budget)."""
    return _mode


def fallback_reason() -> str | None:
    return _fallback_reason


def allocated() -> int | None:
    """Bytes of live tensors and shard blocks counted against the budget (None where not counted)."""
    return allocator_budget.allocated() if _mode == "allocator" else None


def room(budget_bytes: int) -> int | None:
    """Bytes a new tensor may still take on this rank (None: no budget is enforced)."""
    if _mode == "allocator":
        return max(0, budget_bytes - allocator_budget.allocated())
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard == resource.RLIM_INFINITY:
        return None
    soft = hard if soft == resource.RLIM_INFINITY else soft
    return max(0, soft - current_data_bytes() - RUNTIME_HEADROOM // 2)


def charge(nbytes: int, shared: bool) -> bool:
    """Count ``nbytes`` the engine maps itself (a shard block); False if that passes the budget."""
    if _mode == "allocator":
        return allocator_budget.adjust(nbytes)
    if shared:  # outside RLIMIT_DATA: the soft limit gives up room for it (private blocks count by themselves)
        _limit_by(-nbytes)
    return True


def uncharge(nbytes: int, shared: bool) -> None:
    """Give back what :func:`charge` counted."""
    if _mode == "allocator":
        allocator_budget.adjust(-nbytes)
    elif shared:
        _limit_by(nbytes)


def _limit_by(delta: int) -> None:
    """Move RLIMIT_DATA's soft limit by ``delta`` bytes (negative: less room for private memory)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard == resource.RLIM_INFINITY:
        return
    soft = hard if soft == resource.RLIM_INFINITY else soft
    resource.setrlimit(resource.RLIMIT_DATA, (max(0, min(hard, soft + delta)), hard))


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
    scale = {
        "bytes": 1,
        "kib": 1024,
        "mib": 1024**2,
        "gib": 1024**3,
        "tib": 1024**4,
        "kb": 1024,
        "mb": 1024**2,
        "gb": 1024**3,
        "tb": 1024**4,
    }[unit]
    return int(value * scale)
