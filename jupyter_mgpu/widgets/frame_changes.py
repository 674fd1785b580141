"""What each frame of a series of the rank × column figure changes (``widgets/rank_grid.py``).

A schedule step leaves most entries alone: its frame holds the very tensors the frame before held
there. :func:`changed` finds, frame by frame, the entries that are not the same tensors (an
all_gather on 64 ranks holds 266 000 entries over its frames, of which 4 032 change), so only those
are drawn again; :func:`tensors_of` gathers the distinct tensors they hold, to summarise at once; and
:func:`codes_once` puts a code drawn once in its place rather than naming it by number.
"""

from __future__ import annotations

import itertools
from typing import Any

from jupyter_mgpu.widgets.row_folding import SameAs
from jupyter_mgpu.widgets.slot_codes import Code

Part = str | int | tuple[Any, ...]  # markup, the number of a shared code, or a code (``widgets/slot_codes.py``)


def codes_once(codes: list[Code], parts: list[Part], patches: list[dict[int, Part]]) -> list[Code]:
    """Codes used once put in place of their number (in ``parts`` and ``patches``); the codes used more
    often, renumbered, are returned: sent once, named by number."""
    uses: dict[int, int] = {}
    for v in itertools.chain(parts, *(p.values() for p in patches)):
        if isinstance(v, int):
            uses[v] = uses.get(v, 0) + 1
    kept = [i for i in range(len(codes)) if uses.get(i, 0) > 1]
    number = {old: new for new, old in enumerate(kept)}

    def placed(v: Part) -> Part:
        return v if not isinstance(v, int) else number[v] if v in number else codes[v]

    parts[:] = [placed(v) for v in parts]
    for p in patches:
        for k, v in p.items():
            p[k] = placed(v)
    return [codes[i] for i in kept]


def changed(
    frames: list[list[list[Any]]],
    high: list[list[list[Any]]] | None,
    labels: list[list[list[str] | None]],
    nothing: list[list[str]],
) -> list[list[tuple[int, int, list[int] | None]]]:
    """Per frame, the ``(rank, column, entries)`` that may differ from the frame before (``entries``
    None: all of them): every one in frame 0, then the entries that are not the very same tensors (a
    schedule step shares what it leaves alone), and all of a column whose labels or nothing-text changed."""
    n, ncol = len(frames[0]), len(labels[0])
    out: list[list[tuple[int, int, list[int] | None]]] = [[(r, k, None) for r in range(n) for k in range(ncol)]]
    for f in range(1, len(frames)):
        moved: list[tuple[int, int, list[int] | None]] = []
        for k in range(ncol):
            relabelled = labels[f][k] != labels[f - 1][k] or nothing[f][k] != nothing[f - 1][k]
            for r in range(n):
                h, before = frames[f][r][k], frames[f - 1][r][k]
                twins = (high[f][r][k], high[f - 1][r][k]) if high else (None, None)
                if relabelled:
                    moved.append((r, k, None))
                elif h is not before or twins[0] is not twins[1]:
                    js = entries_moved(h, before, *twins)
                    if js is None or js:
                        moved.append((r, k, js))
        out.append(moved)
    return out


def entries_moved(h: Any, before: Any, twin: Any, twin_before: Any) -> list[int] | None:
    """The entries of list ``h`` that are not the very tensors of list ``before`` (with their twins of
    the second pass), or None where the two are not lists of one length."""
    if not (isinstance(h, list) and isinstance(before, list) and len(h) == len(before)):
        return None
    js = [j for j, (a, b) in enumerate(zip(h, before)) if a is not b]
    if twin is twin_before:
        return js
    if not (isinstance(twin, list) and isinstance(twin_before, list) and len(twin) == len(twin_before) == len(h)):
        return None
    return sorted(set(js) | {j for j, (a, b) in enumerate(zip(twin, twin_before)) if a is not b})


def tensors_of(
    frames: list[list[list[Any]]],
    high: list[list[list[Any]]] | None,
    todo: list[list[tuple[int, int, list[int] | None]]],
) -> list[tuple[Any, Any]]:
    """The distinct tracked tensors ``(t, twin)`` of the entries ``todo`` names, to summarise at once."""
    out: dict[tuple[int, int], tuple[Any, Any]] = {}
    for f, moved in enumerate(todo):
        for r, k, js in moved:
            h = frames[f][r][k]
            if h is None or isinstance(h, SameAs):
                continue
            twin = high[f][r][k] if high else None
            entries = h if isinstance(h, list) else [h]
            twins = (twin if isinstance(twin, list) else [twin]) if twin is not None else [None] * len(entries)
            for j in range(len(entries)) if js is None else js:
                t, t2 = entries[j], twins[j]
                if t is not None:
                    out.setdefault((id(t), id(t2)), (t, t2))
    return list(out.values())
