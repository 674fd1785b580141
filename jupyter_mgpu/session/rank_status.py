"""What ``%mgpu_status`` and the memory views read of a session's ranks, from the files the ranks
write (telemetry, exit records): no round trip to a possibly busy engine."""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.engine import memory_figures
from jupyter_mgpu.engine import telemetry as tele


def memory(cluster: Any, world_size: int) -> list[dict[str, Any]]:
    """The latest telemetry sample of every rank, in rank order (``state`` is ``dead`` for lost ranks)."""
    samples = tele.read_samples(cluster.path)
    dead = cluster.exits()
    out = []
    for r in range(world_size):
        s = dict(samples.get(r) or {"rank": r, "time": None})
        if r in dead:
            s["state"] = "dead"
        s.setdefault("state", "starting")
        out.append(s)
    return out


def status(
    cluster: Any, samples: list[dict[str, Any]], devices: list[DeviceInfo], backend: str
) -> list[dict[str, Any]]:
    """One row per rank: rank, engine id, pid, device, backend, memory, state."""
    rows = []
    for sample, dev in zip(samples, devices):
        r = sample["rank"]
        f = memory_figures.figures(sample)  # the limit every view shows (runtime + budget on CPU)
        used, total = f["used"], f["limit"] or dev.total_memory
        rows.append(
            {
                "rank": r,
                "engine_id": cluster.rank_to_engine.get(r),
                "pid": cluster.engine_pids.get(r),
                "device": dev.label,
                "name": dev.name,
                "backend": backend,
                "memory_used": used,
                "memory_total": total,
                "state": sample["state"],
                "op": sample.get("op"),
            }
        )
    return rows
