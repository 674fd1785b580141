"""The events of one DTensor redistribute on one rank, planned from the pure mesh tables.

Torch runs a redistribute as transform steps, one mesh dim each (``_gen_transform_infos``); for each
step this plans what a rank sends, receives, reduces, holds and frees so that it ends holding exactly
its box of the result, with boxes from ``layout/mesh.py`` (which splits as torch does). The trace hook
(``engine/records/dtensor_trace.py``) records these events around torch's real call. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.layout.mesh import Mesh, MeshPlacement, Partial, local_box, placements_label
from jupyter_mgpu.layout.placement import Replicate, Shard

Box = tuple[tuple[int, int], ...]
SRC, DST = "src", "dst"  # roles of the two tensors in a planned event


@dataclass(frozen=True)
class Event:
    """One planned event: ``tensor`` is the role (``"src"`` or ``"dst"``), named when recorded."""

    step: int
    action: str
    tensor: str
    box: Box
    nbytes: int
    peer: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


def collective_of(src: MeshPlacement, dst: MeshPlacement, group_size: int) -> str:
    """The collective torch runs to turn ``src`` into ``dst`` on one mesh dim ("local": none)."""
    if group_size == 1:
        return "local"
    if isinstance(src, Partial):
        return "all_reduce" if isinstance(dst, Replicate) else "reduce_scatter" if isinstance(dst, Shard) else "local"
    if isinstance(src, Shard):
        return "all_gather" if isinstance(dst, Replicate) else "all_to_all" if isinstance(dst, Shard) else "local"
    return "local"  # Replicate -> Shard keeps a chunk, Replicate -> Partial keeps the value


def numel(box: Box) -> int:
    """Elements in ``box``."""
    return math.prod(b - a for a, b in box)


def _overlap(a: Box, b: Box) -> Box | None:
    box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return box if all(lo < hi for lo, hi in box) else None


def plan_events(
    shape: Sequence[int],
    mesh: Mesh,
    chain: Sequence[Sequence[MeshPlacement]],
    mesh_dims: Sequence[int],
    rank: int,
    itemsize: int,
) -> list[Event]:
    """What ``rank`` does in a redistribute through ``chain`` (placements before each step and after the last).

    Step ``k`` changes mesh dim ``mesh_dims[k - 1]``. Pieces moved are the overlaps of boxes before and
    after within that dim's group of ranks; at the end of each step the rank holds exactly its box of
    the result (``dst``); the source (``src``) is never freed.
    """
    if rank not in mesh.ranks:
        return []
    shp = tuple(int(s) for s in shape)
    boxes = [{r: local_box(shp, mesh.shape, pls, mesh.coordinate(r)) for r in mesh.ranks} for pls in chain]
    labels = [placements_label(pls) for pls in chain]
    out: list[Event] = []
    first = boxes[0][rank]
    if numel(first):
        out.append(
            Event(0, "hold", SRC, first, numel(first) * itemsize, None, {"before": labels[0], "after": labels[-1]})
        )
    me = mesh.coordinate(rank)
    for k, d in enumerate(mesh_dims, start=1):
        before, after, mine = boxes[k - 1], boxes[k], boxes[k][rank]
        coll = collective_of(chain[k - 1][d], chain[k][d], mesh.shape[d])
        info = {"collective": coll, "mesh_dim": d, "before": labels[k - 1], "after": labels[k]}
        prev = SRC if k == 1 else DST
        peers = [mesh.rank_at((*me[:d], i, *me[d + 1 :])) for i in range(mesh.shape[d]) if i != me[d]]
        got: list[Box] = []
        if coll in ("all_gather", "all_to_all", "all_reduce", "reduce_scatter"):
            action = "reduce" if coll in ("all_reduce", "reduce_scatter") else "send"
            for g in peers:
                if (piece := _overlap(before[rank], after[g])) is not None:
                    out.append(Event(k, action, prev, piece, numel(piece) * itemsize, g, info))
        if coll in ("all_gather", "all_to_all"):
            for g in peers:
                if (piece := _overlap(before[g], mine)) is not None:
                    out.append(Event(k, "recv", DST, piece, numel(piece) * itemsize, g, info))
                    got.append(piece)
        if numel(mine):
            out.append(Event(k, "hold", DST, mine, numel(mine) * itemsize, None, info))
        old = ([before[rank]] if k > 1 else []) + got  # pieces of the result no longer held as such
        for box in dict.fromkeys(b for b in old if b != mine and numel(b)):
            out.append(Event(k, "free", DST, box, numel(box) * itemsize, None, info))
    return out
