"""The compact data the placement view and the trace player draw (no widget code, no torch).

One format for both: ``panels`` (a grid of tiles each), ``blocks`` (a rectangle of a panel and the
tiles it covers), and ``frames`` (blocks each rank gains/loses, transfer arrows, computed blocks,
bytes held per rank, a caption). The static view is one frame; a trace is many. Frames carry only
differences, so a trace of thousands of events stays small, and the browser steps back and forth
by applying them (nothing is re-sent while playing). Everything here grows linearly with the ranks
but a frame's transfer arrows, which an all-gather makes for every pair: above :data:`MAX_ARROWS` a
frame carries each rank's count of sends and receives (``flows``) instead. Where each part is drawn is
``placement_geometry.py``'s; a single panel has no title of its own (the caption names the tensor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout import tiles as lay
from jupyter_mgpu.tracing import replay as tr
from jupyter_mgpu.units import format_bytes
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.placement_geometry import check_world

MAX_ARROWS = 64  # a frame draws at most this many arrows, or 2 per rank; beyond, each rank's counts
TEXT_FORM = "mg.show(tensor, text=True) prints its placement as text instead"


def _project(box: Sequence[Sequence[int]], dims: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, int]]:
    if not dims:
        return (0, 1), (0, 1)
    if len(dims) == 1:
        return (0, 1), tuple(box[dims[0]])  # type: ignore[return-value]
    return tuple(box[dims[0]]), tuple(box[dims[1]])  # type: ignore[return-value]


def _tiles_of(panel: dict[str, Any], rows: tuple[int, int], cols: tuple[int, int]) -> list[int]:
    return [
        i
        for i, t in enumerate(panel["tiles"])
        if rows[0] <= t["rows"][0] and t["rows"][1] <= rows[1] and cols[0] <= t["cols"][0] and t["cols"][1] <= cols[1]
    ]


def _panel_out(
    p: dict[str, Any], title: str, size: tuple[int, int], itemsize: int, dim_names: tuple[str, str]
) -> dict[str, Any]:
    tiles = [[t["rows"][0], t["rows"][1], t["cols"][0], t["cols"][1]] for t in p["tiles"]]
    return {
        "title": title,
        "size": list(size),
        "rows": p["rows"],
        "cols": p["cols"],
        "itemsize": itemsize,
        "dims": list(dim_names),
        "tiles": tiles,
        # sizes are formatted here, in the one format of every view (the browser only shows them)
        "tile_bytes": [format_bytes((r1 - r0) * (c1 - c0) * itemsize) for r0, r1, c0, c1 in tiles],
    }


def view_data(
    shape: Sequence[int],
    placement: pl.Placement,
    world_size: int,
    itemsize: int,
    title: str,
    dims: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The data of a tensor's placement view: one frame where every rank holds its shard."""
    table = pl.shard_table(tuple(shape), placement, world_size)
    pieces = [(s.rank, s.ranges, "") for s in table]
    return pieces_view_data(
        shape, pieces, world_size, itemsize, title, f"{placement.label} over {world_size} ranks", dims
    )


def mesh_view_data(layout: Any, world_size: int, dims: Sequence[int] | None = None) -> dict[str, Any]:
    """The view of a DTensor layout (``layout.dtensor_layout.DTensorLayout``) on any mesh: replicas are
    the same block held by several ranks, Partial pieces are marked, tips give the mesh coordinates."""
    pieces = []
    for s in layout.table:
        where = f" at mesh {s.coordinate}"
        if s.partial:
            where += ", a full-size operand of " + " and ".join(f"P({op})" for op in s.partial_ops)
        pieces.append((s.rank, s.ranges, where))
    title = f"{layout.name + ' ' if layout.name else ''}{layout.shape} {layout.dtype}"
    data = pieces_view_data(
        layout.shape, pieces, world_size, layout.itemsize, title, f"{layout.label}, {world_size} ranks", dims
    )
    ops = sorted({op for s in layout.table for op in s.partial_ops})
    if ops:
        data["partial"] = " ".join(f"P({op})" for op in ops)
        data["frames"][0]["caption"] += f" — {data['partial']}: the value is the reduction of the ranks' pieces"
    return data


def pieces_view_data(
    shape: Sequence[int],
    pieces: Sequence[tuple[int, Sequence[Sequence[int]], str]],
    world_size: int,
    itemsize: int,
    title: str,
    caption: str,
    dims: Sequence[int] | None = None,
) -> dict[str, Any]:
    """One frame where every rank holds its piece: ``pieces`` = ``(rank, global box, tip note)`` in rank order."""
    shape = tuple(shape)
    check_world(world_size, "the placement view", TEXT_FORM)
    d = lay.check_dims(len(shape), dims)
    boxes = {rank: tuple((int(r[0]), int(r[1])) for r in box) for rank, box, _ in pieces}
    notes = {rank: note for rank, _, note in pieces}
    numel = {rank: math.prod(b - a for a, b in box) for rank, box in boxes.items()}
    panels = lay.layout(shape, [(r, boxes[r]) for r, _, _ in pieces], d)
    size = (shape[d[0]] if len(d) == 2 else 1, shape[d[-1]] if d else 1)
    names = (f"dim {d[0]}" if len(d) == 2 else "", f"dim {d[-1]}" if d else "")
    out_panels, blocks, adds, tips = [], [], [], []
    for pi, p in enumerate(panels):
        fixed = ", ".join(f"dim {i}: {a}:{b}" for i, (a, b) in p["fixed"])
        out_panels.append(_panel_out(p, fixed, size, itemsize, names))  # the caption names the tensor
        ptips = []
        for t in p["tiles"]:
            lines = [
                f"rank {r}{notes[r]}: "
                + " × ".join(f"{a}:{b}" for a, b in boxes[r])
                + f", local shape {tuple(b - a for a, b in boxes[r])}, {format_bytes(numel[r] * itemsize)}"
                for r in t["owners"]
            ]
            ptips.append("\n".join(lines) or "held by no rank")
        tips.append(ptips)
        for rank, box, _ in pieces:
            if numel[rank] == 0 or not all(box[i][0] <= a and b <= box[i][1] for i, (a, b) in p["fixed"] if b > a):
                continue
            rows, cols = _project(box, d)
            blk = [pi, rows[0], rows[1], cols[0], cols[1], _tiles_of(p, rows, cols)]
            if blk not in blocks:  # a replica is the same block held by one more rank, not another block
                blocks.append(blk)
            adds.append([rank, blocks.index(blk)])
    mem = [numel.get(r, 0) * itemsize for r in range(world_size)]
    frame = {
        "add": adds,
        "rm": [],
        "arrows": [],
        "compute": [],
        "mem": mem,
        "mem_text": [format_bytes(m) for m in mem],
        "caption": f"{title}: {caption}",
    }
    return {
        "world_size": world_size,
        "colors": [rank_color(r) for r in range(world_size)],
        "panels": out_panels,
        "blocks": blocks,
        "frames": [frame],
        "tips": tips,
        "max_mem": max(mem + [1]),
    }


def trace_data(
    events: list[dict[str, Any]],
    tensors: dict[str, dict[str, Any]],
    world_size: int,
    samples: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The data of a trace replay: one frame per step of the merged ``events`` (``tracing.replay.steps``:
    the (op, step)s that change something).

    ``samples`` (telemetry: rank, time, bytes) add each rank's measured memory at each frame's time.
    """
    check_world(world_size, "the trace player", "t.events and t.final_placement() give the trace as data instead")
    steps = tr.steps(events, world_size)
    frames = [s.events for s in steps]
    states = tr.replay(frames, world_size)
    mem = tr.memory(states, tensors)
    names = [n for n in tensors if any(b["tensor"] == n for e in events for b in e["blocks"])]
    names += sorted({b["tensor"] for e in events for b in e["blocks"]} - set(names))
    panels: list[dict[str, Any]] = []
    pindex: dict[str, int] = {}
    dims_of: dict[str, tuple[int, ...]] = {}
    for n in names:
        meta = tensors.get(n, {"shape": [], "itemsize": 1, "label": n})
        shape = tuple(meta["shape"]) or (1,)
        d = lay.check_dims(len(shape), None)
        dims_of[n] = d
        boxes = [(0, tuple(tuple(r) for r in b["box"])) for e in events for b in e["blocks"] if b["tensor"] == n]
        boxes = [(0, box) for _, box in boxes if len(box) == len(shape)]
        p = lay.layout(shape, [(0, tuple(_full(box, shape, d))) for _, box in boxes], d)[0]
        size = (shape[d[0]] if len(d) == 2 else 1, shape[d[-1]])
        pindex[n] = len(panels)
        title = meta.get("label", n) + f" {tuple(meta['shape'])}"
        same = sum(q["title"].split(" #")[0] == title for q in panels)  # two tensors drawn alike: number them
        panels.append(
            _panel_out(
                p,
                title + (f" #{same + 1}" if same else ""),
                size,
                meta.get("itemsize", 1),
                (f"dim {d[0]}" if len(d) == 2 else "", f"dim {d[-1]}"),
            )
        )
        panels[-1]["_layout"] = p
    blocks: list[list[Any]] = []
    bindex: dict[tuple[Any, ...], int] = {}

    def blk(b: dict[str, Any]) -> int:
        n = b["tensor"]
        rows, cols = (
            _project(b["box"], dims_of[n])
            if len(b["box"]) == len(tensors.get(n, {}).get("shape", b["box"]))
            else ((0, 1), (0, 1))
        )
        k = (pindex[n], rows, cols)
        if k not in bindex:
            bindex[k] = len(blocks)
            blocks.append(
                [pindex[n], rows[0], rows[1], cols[0], cols[1], _tiles_of(panels[pindex[n]]["_layout"], rows, cols)]
            )
        return bindex[k]

    def visible(st: list[set[tr.Key]]) -> set[tuple[int, int]]:
        return {(r, blk({"tensor": k[0], "box": k[1]})) for r, held in enumerate(st) for k in held}

    out_frames: list[dict[str, Any]] = []
    prev: set[tuple[int, int]] = set()
    for step, st, m in zip(steps, states, mem):
        vis = visible(st)
        moves = _moves(step.events, blk, world_size)
        caption = tr.caption(step, tensors, format_bytes)
        if "flows" in moves:
            caption += f" · {moves['transfers']:,} transfers, drawn as each rank's counts"
        add, rm, mem_text = sorted(vis - prev), sorted(prev - vis), [format_bytes(x) for x in m]
        out_frames.append({"add": add, "rm": rm, **moves, "mem": m, "mem_text": mem_text, "caption": caption})
        prev = vis
    for p in panels:
        del p["_layout"]
    max_tele = _attach_telemetry(frames, out_frames, samples or [], world_size)
    return {
        "max_tele": max_tele,
        "world_size": world_size,
        "colors": [rank_color(r) for r in range(world_size)],
        "panels": panels,
        "blocks": blocks,
        "frames": out_frames,
        "tips": [],
        "max_mem": max([x for m in mem for x in m] + [1]),
    }


def _moves(frame: list[dict[str, Any]], blk: Any, world_size: int) -> dict[str, Any]:
    """A frame's ``arrows`` (``[from, to, block, is_reduce]``; -1 is the notebook) and ``compute``
    (``[rank, block]``); with more arrows than :data:`MAX_ARROWS` (or two per rank), ``flows`` instead:
    ``[rank, sends, receives]`` for each rank that moves anything, so the frame stays linear in the ranks."""
    arrows: list[list[Any]] = []
    compute: list[list[int]] = []
    for e in frame:
        bs = [blk(b) for b in e["blocks"]]
        peer = e.get("peer")
        if e["action"] in ("send", "reduce") and peer is not None:
            arrows.append([e["rank"], peer, bs[0] if bs else -1, e["action"] == "reduce"])
        elif e["action"] == "recv" and peer is not None and peer < 0:
            arrows.append([peer, e["rank"], bs[0] if bs else -1, False])
        elif e["action"] == "compute":
            compute.extend([e["rank"], b] for b in bs)
    if len(arrows) <= max(MAX_ARROWS, 2 * world_size):
        return {"arrows": arrows, "compute": compute}
    sends, gets = [0] * world_size, [0] * world_size
    for a, b, _, _ in arrows:
        if 0 <= a < world_size:
            sends[a] += 1
        if 0 <= b < world_size:
            gets[b] += 1
    flows = [[r, sends[r], gets[r]] for r in range(world_size) if sends[r] or gets[r]]
    return {"arrows": [], "compute": compute, "flows": flows, "transfers": len(arrows)}


def _full(box: tuple[Any, ...], shape: tuple[Any, ...], dims: tuple[int, ...]) -> list[tuple[int, int]]:
    """``box`` with the dims that are not drawn widened to the whole extent (one panel per tensor)."""
    return [tuple(r) if i in dims else (0, s) for i, (r, s) in enumerate(zip(box, shape))]


def visible_at(data: dict[str, Any], index: int) -> set[tuple[int, int]]:
    """``(rank, block)`` pairs shown at frame ``index`` (what the browser computes from the deltas)."""
    cur: set[tuple[int, int]] = set()
    for f in data.get("frames", [])[: index + 1]:
        cur.difference_update(tuple(x) for x in f["rm"])
        cur.update(tuple(x) for x in f["add"])
    return cur


def _attach_telemetry(
    frames: list[list[dict[str, Any]]], out: list[dict[str, Any]], samples: list[dict[str, Any]], world_size: int
) -> int:
    """Per frame, each rank's last telemetry sample at or before the frame's last event (-1: none)."""
    if not samples:
        return 0
    per_rank = [sorted((x["time"], x["bytes"]) for x in samples if x["rank"] == r) for r in range(world_size)]
    for fr, o in zip(frames, out):
        t = max(e["time"] for e in fr)
        row = []
        for series in per_rank:
            before = [b for ts, b in series if ts <= t]
            row.append(before[-1] if before else (series[0][1] if series else -1))
        o["tele"] = row
        o["tele_text"] = [format_bytes(b) if b >= 0 else "" for b in row]
    top: int = max([b for o in out for b in o.get("tele", []) if b > 0] + [1])
    return top
