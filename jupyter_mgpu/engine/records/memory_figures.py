"""What one telemetry sample says about a device's memory, in the one convention every view uses.

The memory dashboard, the sidebar and status bar (through the server extension) and ``%mgpu_status``
all take *used* and *limit* from :func:`figures`, and print sizes with :func:`format_bytes` (binary
units, one decimal), so a device's limit reads the same everywhere:

- GPU: used = allocated bytes, limit = the budget if one is set below the device's memory, else the
  device's total memory.
- CPU virtual device whose budget counts tensor bytes (the sample carries ``allocated_bytes``): used =
  allocated bytes, limit = the budget, as on a GPU.
- CPU virtual device whose budget is enforced on the process's data: used = resident memory of the
  engine process, limit = the engine's own runtime (its resident memory before user code) + the
  budget — the resident size past which allocations fail.

Pure: no torch, safe to import in the server extension.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.units import format_bytes


def figures(sample: dict[str, Any]) -> dict[str, Any]:
    """``used``, ``peak``, ``reserved``, ``limit`` (bytes or None), ``baseline`` and their ``labels``."""
    if sample.get("kind") != "cuda" and "allocated_bytes" in sample:
        return {
            "used": sample.get("allocated_bytes"),
            "peak": sample.get("peak_allocated_bytes"),
            "reserved": None,
            "limit": sample.get("budget_bytes"),
            "baseline": 0,
            "labels": {"used": "allocated", "reserved": "", "peak": "peak allocated", "limit": "budget"},
        }
    if sample.get("kind") == "cuda" or "allocated_bytes" in sample:
        total, budget = sample.get("total_bytes"), sample.get("budget_bytes")
        limit = budget if budget and total and budget < total else total
        return {
            "used": sample.get("allocated_bytes"),
            "peak": sample.get("peak_allocated_bytes"),
            "reserved": sample.get("reserved_bytes"),
            "limit": limit,
            "baseline": 0,
            "labels": {
                "used": "allocated",
                "reserved": "reserved",
                "peak": "peak allocated",
                "limit": "budget" if limit != total else "total",
            },
        }
    baseline = sample.get("baseline_resident_bytes") or 0
    budget = sample.get("budget_bytes")
    return {
        "used": sample.get("resident_bytes"),
        "peak": sample.get("peak_resident_bytes"),
        "reserved": None,
        "limit": baseline + budget if budget else None,
        "baseline": baseline,
        "labels": {"used": "resident", "reserved": "", "peak": "peak resident", "limit": "runtime + budget"},
    }


def used_of_limit(sample: dict[str, Any]) -> str:
    """``389.4 MiB / 5.2 GiB`` (each size in its own unit), or just the used size when there is no limit."""
    f = figures(sample)
    if f["used"] is None:
        return "?"
    return f"{format_bytes(f['used'])} / {format_bytes(f['limit'])}" if f["limit"] else format_bytes(f["used"])
