"""The sidebar's stack view (``GET {base_url}mgpu/api/clusters/<id>/where``): where every rank of a cluster
is now, merged into one tree of the user's frames, each node counting its ranks (``stack_merge.py``, as
``mg.where(merge=True)`` draws it in the notebook).

Each rank's guard answers from its own thread, so a busy or stuck rank answers too; the ranks are asked at
once, so silent ones cost the timeout once. Dead ranks and ranks being restarted are not asked; a rank on
another host, whose guard this server cannot reach, reads ``unknown``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.engine.watch import collective_guard
from jupyter_mgpu.stack_merge import lines, merge, rank_span

ASK_TIMEOUT = 2.0


def where(path: Path, state: dict[str, Any], timeout: float = ASK_TIMEOUT) -> dict[str, Any]:
    """``{"time", "ranks": "ranks 0–3 (4)", "lines": [[depth, frame or what the ranks do, their ranks], ...]}``
    for the cluster in ``path`` (its state file's ``state``)."""
    restarting = state.get("restarting") or ()
    rows = collective_guard.where_rows(
        path, int(state.get("world_size") or 0), rd.exit_records(path), restarting, timeout
    )
    root = merge(rows)
    return {
        "time": time.time(),
        "ranks": rank_span(root.ranks) if root.ranks else "",
        "lines": [[depth, label, span] for depth, label, span in lines(root)],
    }
