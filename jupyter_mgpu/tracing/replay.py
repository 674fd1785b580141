"""Pure replay of a trace: merge the ranks' events into one timeline, group them into frames, and
compute what each rank holds after every frame (no torch, nothing drawn).

Semantics of the actions: ``hold`` and ``recv`` add their blocks to the rank's holdings, ``free``
removes them; ``send``, ``compute`` and ``reduce`` change nothing (they are drawn as arrows and
highlights). A block is ``(tensor, box, buf)``; ``buf`` tags a temporary copy (a ring chunk slot, a
panel buffer), so a copy of a block a rank already holds is counted in its memory separately.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

Key = tuple[str, tuple[tuple[int, int], ...], Any]
ACTIONS = ("hold", "send", "recv", "compute", "reduce", "free")


def merge(per_rank: Iterable[Iterable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One timeline: by op, then step, then time; a rank's own events keep their order (``seq``)."""
    events = [e for evs in per_rank for e in evs]
    return sorted(events, key=lambda e: (e.get("op", 0), e["step"], e["time"], e["rank"], e.get("seq", 0)))


def key_of(block: dict[str, Any]) -> Key:
    return (block["tensor"], tuple(tuple(r) for r in block["box"]), block.get("buf"))


def frame_keys(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (op, step) of each frame, in timeline order."""
    out: list[tuple[int, int]] = []
    for e in events:
        k = (e.get("op", 0), e["step"])
        if not out or out[-1] != k:
            out.append(k)
    return out


def group(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The merged events cut into frames: one frame per (op, step)."""
    frames: list[list[dict[str, Any]]] = []
    last = None
    for e in events:
        k = (e.get("op", 0), e["step"])
        if k != last:
            frames.append([])
            last = k
        frames[-1].append(e)
    return frames


def replay(frames: list[list[dict[str, Any]]], world_size: int) -> list[list[set[Key]]]:
    """Holdings after each frame: ``states[f][rank]`` is the set of blocks rank holds."""
    cur: list[set[Key]] = [set() for _ in range(world_size)]
    states = []
    for fr in frames:
        for e in fr:
            r = e["rank"]
            if e["action"] in ("hold", "recv"):
                cur[r].update(key_of(b) for b in e["blocks"])
            elif e["action"] == "free":
                cur[r].difference_update(key_of(b) for b in e["blocks"])
        states.append([set(s) for s in cur])
    return states


def box_numel(box: tuple[tuple[int, int], ...]) -> int:
    return math.prod(max(0, b - a) for a, b in box)


def union_numel(boxes: Iterable[tuple[tuple[int, int], ...]]) -> int:
    """Elements covered by the union of boxes (a block held twice, or inside a bigger one, counts once)."""
    boxes = [b for b in set(boxes) if box_numel(b) > 0]
    if len(boxes) <= 1:
        return sum(box_numel(b) for b in boxes)
    ndim = len(boxes[0])
    cuts = [sorted({x for b in boxes for x in b[d]}) for d in range(ndim)]
    total = 0

    def walk(d: int, chosen: list[tuple[int, int]], cands: list[tuple[tuple[int, int], ...]]) -> None:
        nonlocal total
        if d == ndim:
            if cands:
                total += math.prod(b - a for a, b in chosen)
            return
        for a, b in zip(cuts[d], cuts[d][1:]):
            inside = [x for x in cands if x[d][0] <= a and b <= x[d][1]]
            if inside:
                walk(d + 1, chosen + [(a, b)], inside)

    walk(0, [], boxes)
    return total


def memory(states: list[list[set[Key]]], tensors: dict[str, dict[str, Any]]) -> list[list[int]]:
    """Bytes each rank holds after each frame, from the blocks' sizes (the trace's own byte count).

    Overlapping blocks of one tensor count once; each temporary copy (``buf``) counts on its own.
    """
    cache: dict[frozenset[Key], int] = {}

    def rank_bytes(held: set[Key]) -> int:
        k = frozenset(held)
        if k not in cache:
            groups: dict[tuple[str, Any], list[tuple[tuple[int, int], ...]]] = {}
            for name, box, buf in held:
                groups.setdefault((name, buf), []).append(box)
            cache[k] = sum(
                union_numel(bs) * int(tensors.get(n, {}).get("itemsize", 1)) for (n, _), bs in groups.items()
            )
        return cache[k]

    return [[rank_bytes(s) for s in st] for st in states]


def final_placement(
    states: list[list[set[Key]]], world_size: int
) -> dict[str, list[list[tuple[tuple[int, int], ...]]]]:
    """``{tensor: [boxes held by rank 0, by rank 1, ...]}`` at the end (temporary copies left out)."""
    out: dict[str, list[list[tuple[tuple[int, int], ...]]]] = {}
    last = states[-1] if states else [set() for _ in range(world_size)]
    for r, held in enumerate(last):
        for name, box, buf in held:
            if buf is None:
                out.setdefault(name, [[] for _ in range(world_size)])[r].append(box)
    for lists in out.values():
        for boxes in lists:
            boxes.sort()
    return out


def caption(frame: list[dict[str, Any]], tensors: dict[str, dict[str, Any]]) -> str:
    """One line saying what happens in a frame (the op, counts per action, bytes received)."""
    e0 = frame[0]
    counts: dict[str, int] = {}
    for e in frame:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    what = ", ".join(f"{n} {a}" for a, n in counts.items())
    moved = sum(e["bytes"] for e in frame if e["action"] in ("recv",))
    tail = f", {moved:,} bytes received" if moved else ""
    return f"{e0.get('label', '')}: {what}{tail}"
