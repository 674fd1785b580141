"""Pure replay of a trace: merge the ranks' events into one timeline, group them into frames, and
compute what each rank holds after every frame (no torch, nothing drawn).

The player shows :func:`steps`: the frames, less those that change nothing (a ``hold`` of a block
already held, a ``free`` of one that is not), whose events join the next step of their op (or the
previous one) so that every event is still counted; each step has its own caption (:func:`caption`:
the op, which of its steps this is, the collective, the count of each action, the bytes received).

Semantics of the actions: ``hold`` and ``recv`` add their blocks to the rank's holdings, ``free``
removes them; ``send``, ``compute`` and ``reduce`` change nothing (they are drawn as arrows and
highlights). A block is ``(tensor, box, buf)``; ``buf`` tags a temporary copy (a ring chunk slot, a
panel buffer), so a copy of a block a rank already holds is counted in its memory separately.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Step:
    """One step of the replay: its events (those that changed nothing folded in), its op and its place."""

    events: list[dict[str, Any]]
    op: int
    label: str
    index: int  # 1-based, among the steps of its op
    of: int  # the steps of its op
    repeat: int = 0  # 2, 3, ... for an op whose label an earlier op already had (0: the first)


def _changes(frame: list[dict[str, Any]], before: list[set[Key]], after: list[set[Key]]) -> bool:
    """Whether a frame shows anything: a holding that changes, a transfer or a computation."""
    return before != after or any(e["action"] in ("send", "recv", "reduce", "compute") for e in frame)


def steps(events: list[dict[str, Any]], world_size: int) -> list[Step]:
    """The merged events as the player's steps: one per (op, step) that changes something (see the module)."""
    frames = group(events)
    states = replay(frames, world_size)
    empty: list[set[Key]] = [set() for _ in range(world_size)]
    keep = [_changes(fr, states[i - 1] if i else empty, st) for i, (fr, st) in enumerate(zip(frames, states))]
    if frames and not any(keep):
        keep[0] = True  # nothing changes at all: still one step to show the events
    kept = [i for i, k in enumerate(keep) if k]
    owner: dict[int, int] = {}  # frame -> the kept frame its events join
    for i, fr in enumerate(frames):
        if keep[i]:
            owner[i] = i
            continue
        at = bisect.bisect(kept, i)
        nxt, prev = kept[at] if at < len(kept) else None, kept[at - 1] if at else None
        same = [j for j in (nxt, prev) if j is not None and frames[j][0].get("op", 0) == fr[0].get("op", 0)]
        owner[i] = (same or [j for j in (nxt, prev) if j is not None])[0]
    joined: dict[int, list[dict[str, Any]]] = {j: [] for j in kept}
    for i, fr in enumerate(frames):
        joined[owner[i]].extend(fr)
    per_op: dict[int, int] = {}
    for j in kept:
        op = frames[j][0].get("op", 0)
        per_op[op] = per_op.get(op, 0) + 1
    out: list[Step] = []
    seen_op: dict[int, int] = {}
    label_ops: dict[str, list[int]] = {}
    for j in kept:
        e0 = frames[j][0]
        op, label = e0.get("op", 0), str(e0.get("label", ""))
        seen_op[op] = seen_op.get(op, 0) + 1
        ops = label_ops.setdefault(label, [])
        if op not in ops:
            ops.append(op)
        repeat = ops.index(op) + 1 if len(ops) > 1 else 0
        events_j = sorted(joined[j], key=lambda e: (e.get("op", 0), e["step"], e["time"], e["rank"], e.get("seq", 0)))
        out.append(Step(events_j, op, label, seen_op[op], per_op[op], repeat))
    return out


def step_events(events: list[dict[str, Any]], world_size: int) -> list[list[dict[str, Any]]]:
    """The events of each of :func:`steps`, as :func:`group`'s frames are (for :func:`replay`)."""
    return [s.events for s in steps(events, world_size)]


def _tensor_names(frame: list[dict[str, Any]], action: str, tensors: dict[str, dict[str, Any]]) -> str:
    names = dict.fromkeys(
        str(tensors.get(b["tensor"], {}).get("label", b["tensor"]))
        for e in frame
        if e["action"] == action
        for b in e["blocks"]
    )
    return ", ".join(names)


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


def caption(
    step: Step | list[dict[str, Any]], tensors: dict[str, dict[str, Any]], size: Callable[[int], str] = _bytes
) -> str:
    """One line saying what a step shows: the op (numbered when an earlier op had its label), which of
    the op's steps this is, the collective and mesh dim when the events name them, how many events of
    each action (the tensors held), the bytes received (written by ``size``) and how many events the step
    stands for."""
    if not isinstance(step, Step):
        step = Step(step, step[0].get("op", 0), str(step[0].get("label", "")), 1, 1)
    frame = step.events
    counts: dict[str, int] = {}
    for e in frame:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    parts = []
    for a, n in counts.items():
        held = _tensor_names(frame, a, tensors) if a == "hold" else ""
        parts.append(f"{n} {a}" + (f" ({held})" if held else ""))
    what = ", ".join(parts)
    colls = list(dict.fromkeys(str(e["collective"]) for e in frame if e.get("collective")))
    dims = list(dict.fromkeys(e["mesh_dim"] for e in frame if e.get("mesh_dim") is not None))
    how = " and ".join(colls) + (f" on mesh dim {', '.join(map(str, dims))}" if colls and dims else "")
    moved = sum(e["bytes"] for e in frame if e["action"] == "recv")
    tail = f", {size(moved)} received" if moved else ""
    name = step.label + (f" #{step.repeat}" if step.repeat else "")
    place = f" ({step.index}/{step.of})" if step.of > 1 else ""
    return f"{name}{place}: {how + ' · ' if how else ''}{what}{tail} · {len(frame)} events"
