"""What ``%mgpu_status`` and the memory views read of a session's ranks, from the files the ranks
write (telemetry, exit records): no round trip to a possibly busy engine."""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.engine.records import memory_figures
from jupyter_mgpu.engine.records import telemetry as tele


def memory(cluster: Any, world_size: int) -> list[dict[str, Any]]:
    """The latest telemetry sample of every rank, in rank order (``state`` is ``dead`` for lost ranks)."""
    samples = tele.read_samples(cluster.path)
    dead, restarting = cluster.exits(), set(getattr(cluster, "restarting", ()) or ())
    out = []
    for r in range(world_size):
        s = dict(samples.get(r) or {"rank": r, "time": None})
        if r in restarting:  # mg.restart is starting it again (its new engine may not have written yet)
            s["state"] = "restarting"
        elif r in dead:
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


def where(cluster: Any, world_size: int, timeout: float = 2.0) -> list[dict[str, Any]]:
    """What every rank does now, in rank order (``mg.where``): ``state`` (``running``, ``collective``,
    ``idle``, ``dead``, ``restarting`` while ``mg.restart`` starts it again, or ``unknown`` for a rank that
    did not answer), ``seconds`` in it, ``collective``
    (``barrier #7``), ``line`` (the innermost line of the user's code) and ``stack`` (their frames,
    outermost first). Each rank's guard thread answers, so a busy rank answers too; the ranks are asked
    at once, so 64 ranks with some silent take ``timeout`` once, not once each."""
    from jupyter_mgpu.engine.watch import collective_guard

    restarting = getattr(cluster, "restarting", ()) or ()
    return collective_guard.where_rows(cluster.path, world_size, cluster.exits(), restarting, timeout)


def dump_recorders(cluster: Any, world_size: int, folder: str, timeout: float = 10.0) -> list[str]:
    """Write every rank's flight-recorder dump to ``folder/rank_<r>``, the files torch's ``torchfrtrace
    <folder>`` reads (``mg.where(dump=...)``, ``%mgpu_where --dump``); the paths written. Each rank's guard
    thread answers, so a stuck rank's collectives are in it."""
    import base64
    import os

    from jupyter_mgpu.engine.watch import collective_guard
    from jupyter_mgpu.errors import MgpuError

    dead = cluster.exits()
    alive = [r for r in range(world_size) if r not in dead]
    os.makedirs(folder, exist_ok=True)
    answers = collective_guard.ask_all(cluster.path, alive, "fr-dump", timeout, body="")
    paths = []
    for r, answer in answers.items():
        if not answer or "dump" not in answer:
            why = (answer or {}).get("error") or "it did not answer"
            raise MgpuError(f"rank {r}'s flight recorder could not be dumped: {why}")
        path = os.path.join(folder, f"rank_{r}")
        with open(path, "wb") as f:
            f.write(base64.b64decode(answer["dump"]))
        paths.append(path)
    return paths
