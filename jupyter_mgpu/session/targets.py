"""Which ranks a call goes to: ``targets=`` (``--targets``) read the way ipyparallel's ``%px`` reads it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jupyter_mgpu.errors import MgpuError


def parse_targets(targets: Any, world_size: int) -> list[int]:
    """Ranks named by ``targets``: None/"all", an int, ``"0,2"``, ``"1:3"`` or an iterable of ints."""
    if targets is None or (isinstance(targets, str) and targets.strip().lower() in ("all", "")):
        return list(range(world_size))
    if isinstance(targets, bool):
        raise MgpuError(f"targets must be ranks such as 0 or [0, 2], got {targets!r}")
    if isinstance(targets, int):
        ranks = [targets]
    elif isinstance(targets, str):
        ranks = []
        for part in targets.split(","):
            part = part.strip()
            try:
                if ":" in part:
                    lo, hi = part.split(":", 1)
                    ranks.extend(range(int(lo or 0), int(hi) if hi else world_size))
                else:
                    ranks.append(int(part))
            except ValueError:
                raise MgpuError(f"targets must be ranks such as 0,2 or 1:3, got {targets!r}") from None
    elif isinstance(targets, Iterable):
        ranks = list(targets)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise MgpuError(f"targets must be whole-number ranks, got {targets!r}")
    else:
        raise MgpuError(f"targets must be ranks such as 0 or [0, 2], got {targets!r}")
    if not ranks:
        raise MgpuError("targets names no rank")
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise MgpuError(f"rank {bad[0]} is out of range: this session has ranks 0-{world_size - 1}")
    return sorted(dict.fromkeys(ranks))
