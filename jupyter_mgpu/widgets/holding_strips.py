"""One holding of the collective pictures (``widgets/collective_view.py``) drawn as a strip, for many ranks.

At 32 or 64 ranks a holding drawn cell by cell (``widgets/tensor_cells.py``) is thousands of shapes
per figure, text a few px high, and N³ of them across an all_gather's frames. A strip says what
matters at that scale in a few shapes: *whose data it holds*. A tracked tensor is summarised once
(:func:`strip_of`: how many non-zero values came from each rank alone, how many combine several ranks,
how many are 0, the range of the values; :func:`strips_of` summarises the thousands of a schedule at
once) and drawn as a bar split in proportion to its origins, each part in its origin's fill
(``widgets/collective_colors.py``) with the rank numbers printed where they fit; the hover says the
rest. A strip is a short code (:func:`strip_code`, ``widgets/slot_codes.py``) whatever the tensor's
size, and a strip of one rank's data alone is drawn once per figure and *used* (``<use>``) wherever
it appears.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

from jupyter_mgpu.widgets.collective_colors import (
    MAX_TRACKED_RANKS,
    OPS,
    OTHERS,
    OriginFill,
    mask_text,
)
from jupyter_mgpu.widgets.colors import EMPTY
from jupyter_mgpu.widgets.grid_geometry import STRIP_H
from jupyter_mgpu.widgets.slot_codes import Code, Names, code_svg, tenths
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, text_width

MAX_PARTS = 4  # parts of one strip; the smallest of more are drawn as one grey part, "…"


class Strip(NamedTuple):
    """A tracked tensor summarised: its shape, ``(rank, count)`` of its non-zero values of one rank's data
    alone (lowest rank first), how many combine several ranks' data (``mixed``: the union of those ranks
    in ``mixed_ranks``; ``mixed_alike`` when they all combine the very same ranks), how many are of
    unknown origin, how many are 0, and the range of the values."""

    shape: tuple[int, ...]
    alone: tuple[tuple[int, int], ...]
    mixed: int
    mixed_ranks: int
    mixed_alike: bool
    unknown: int
    zeros: int
    lo: float
    hi: float

    @property
    def values(self) -> int:
        return sum(c for _, c in self.alone) + self.mixed + self.unknown + self.zeros


def strip_of(t: Any, high: Any = None) -> Strip:
    """The strip of tracked tensor ``t``; ``high`` is the same holding tracked for ranks from
    :data:`~.collective_colors.MAX_TRACKED_RANKS` up (the second pass of a reduction over more ranks)."""
    return strips_of([(t, high)])[0]


def strips_of(pairs: list[tuple[Any, Any]]) -> list[Strip]:
    """The strips of many tracked tensors ``(t, high)`` at once (:func:`strip_of` each): the schedule
    of a reduction at 64 ranks draws thousands, summarised here in a few numpy passes over all of them."""
    import numpy as np
    import torch

    out: list[Strip | None] = [None] * len(pairs)
    alike: dict[tuple[Any, bool], list[int]] = {}
    for i, (t, high) in enumerate(pairs):
        alike.setdefault((tuple(t.shape), high is not None), []).append(i)
    values, masks, sizes, todo = [], [], [], []
    for (shape, twinned), idx in alike.items():
        size = math.prod(shape)
        if not size:
            for i in idx:
                out[i] = _strip_by_ints(shape, np.zeros(0), [])
            continue
        a = torch.stack([pairs[i][0] for i in idx]).detach().resolve_conj().numpy().reshape(len(idx), size)
        h = None
        if twinned:
            h = torch.stack([pairs[i][1] for i in idx]).detach().resolve_conj().numpy().reshape(len(idx), size).imag
        big = a.imag.max(axis=1) >= 2.0**64  # a rank past 63 in a mask: Python's ints
        if h is not None:
            big |= h.max(axis=1) >= 2.0 ** (64 - MAX_TRACKED_RANKS)
        for row in np.flatnonzero(big).tolist():
            ints = [int(x) for x in a[row].imag.tolist()]
            if h is not None:
                ints = [x | int(y) << MAX_TRACKED_RANKS for x, y in zip(ints, h[row].tolist())]
            out[idx[row]] = _strip_by_ints(shape, a[row].real, ints)
        keep = np.flatnonzero(~big)
        m = a.imag[keep].astype(np.uint64)
        if h is not None:  # the ranks past 52 in the bits above the first pass's
            m |= h[keep].astype(np.uint64) << np.uint64(MAX_TRACKED_RANKS)
        values.append(a.real[keep].ravel())
        masks.append(m.ravel())
        sizes += [size] * len(keep)
        todo += [idx[k] for k in keep.tolist()]
    if todo:
        for i, s in zip(todo, _strips(pairs, todo, np.concatenate(values), np.concatenate(masks), sizes)):
            out[i] = s
    return [s for s in out if s is not None]


def _strips(pairs: list[Any], todo: list[int], vals: Any, masks: Any, sizes: list[int]) -> list[Strip]:
    """The strips of tensors laid end to end: ``vals`` their values, ``masks`` their origin masks (uint64),
    ``sizes`` how many values each has (at least one)."""
    import numpy as np

    b = len(sizes)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    seg = np.repeat(np.arange(b), sizes)
    nz = vals != 0
    zeros = np.bincount(seg[~nz], minlength=b)
    m, sn = masks[nz], seg[nz]
    unknown = m == 0
    single = ((m & (m - np.uint64(1))) == 0) & ~unknown
    mixed = ~single & ~unknown
    ranks = _lowest_bit(m[single])
    alone = np.bincount(sn[single] * 64 + ranks, minlength=b * 64).reshape(b, 64)
    unknown_n = np.bincount(sn[unknown], minlength=b)
    mixed_n = np.bincount(sn[mixed], minlength=b)
    union = np.zeros(b, dtype=np.uint64)
    alike = np.ones(b, dtype=bool)
    if mixed.any():
        mm, ms = m[mixed], sn[mixed]
        first = np.flatnonzero(np.concatenate(([True], ms[1:] != ms[:-1])))
        union[ms[first]] = np.bitwise_or.reduceat(mm, first)
        alike[ms[first]] = np.minimum.reduceat(mm, first) == np.maximum.reduceat(mm, first)
    finite = np.isfinite(vals)
    lo = np.fmin.reduceat(np.where(finite, vals, np.nan), starts)
    hi = np.fmax.reduceat(np.where(finite, vals, np.nan), starts)
    rows, cols = np.nonzero(alone)
    per: list[list[tuple[int, int]]] = [[] for _ in range(b)]
    for r, c, n in zip(rows.tolist(), cols.tolist(), alone[rows, cols].tolist()):
        per[r].append((c, n))
    zl, ul, ml, un, al, lol, hil = (x.tolist() for x in (zeros, unknown_n, mixed_n, union, alike, lo, hi))
    shapes = [tuple(pairs[i][0].shape) for i in todo]
    return list(map(Strip, shapes, map(tuple, per), ml, un, al, ul, zl, lol, hil))


def _strip_by_ints(shape: Any, vals: Any, masks: list[int]) -> Strip:
    """A strip whose origin masks need Python's ints (ranks past 63), or of an empty tensor."""
    import numpy as np

    alone: dict[int, int] = {}
    mixed = unknown = union = 0
    kinds: set[int] = set()
    for v, mask in zip(vals.tolist(), masks):
        if v == 0:
            continue
        if mask == 0:
            unknown += 1
        elif mask & (mask - 1):
            mixed, union = mixed + 1, union | mask
            kinds.add(mask)
        else:
            r = mask.bit_length() - 1
            alone[r] = alone.get(r, 0) + 1
    finite = vals[np.isfinite(vals)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (math.nan, math.nan)
    zeros = int((vals == 0).sum())
    return Strip(tuple(shape), tuple(sorted(alone.items())), mixed, union, len(kinds) <= 1, unknown, zeros, lo, hi)


def _lowest_bit(x: Any) -> Any:
    """The index of each element's lowest set bit (0 for 0: the caller masks those)."""
    import numpy as np

    bit = x & (~x + np.uint64(1))  # two's complement, in unsigned arithmetic
    return np.log2(np.where(bit == 0, 1, bit)).astype(np.int64)


def describe(s: Strip, op: str | None = None, shape: bool = True) -> str:
    """A strip's hover text: its shape (unless not ``shape``), whose values it holds (each rank's alone,
    then the values combined from several ranks, in all), its zeros and the range of its values."""
    how = OPS.get(op or "", "combined")
    said = [f"{count} from rank {r}" for r, count in s.alone]
    if s.mixed and s.mixed_alike:
        said.append(f"{s.mixed} {how} from ranks {mask_text(s.mixed_ranks)}")
    elif s.mixed:
        said.append(f"{s.mixed} {how} from several ranks each (ranks {mask_text(s.mixed_ranks)} in all)")
    if s.unknown:
        said.append(f"{s.unknown} of unknown origin")
    if s.zeros:
        said.append(f"{s.zeros} zero{'s' if s.zeros > 1 else ''}")
    values = f"; values {s.lo:g} … {s.hi:g}" if s.values and not math.isnan(s.lo) else ""
    return (f"{shape_text(s)}: " if shape else "") + ", ".join(said) + values


def shape_text(s: Strip) -> str:
    """A strip's shape as its hover says it (``11×11``)."""
    return "×".join(map(str, s.shape)) or "scalar"


def _groups(s: Strip, fill: OriginFill) -> list[tuple[str, int, int]]:
    """``(fill, count, origin mask)`` of the parts to draw: each rank's values alone, then every value
    combined from several ranks as one hatched part, then values of unknown origin; at most
    :data:`MAX_PARTS` (the smallest of more joined, grey)."""
    groups = [(fill.of_rank(r), c, 1 << r) for r, c in s.alone]
    if s.mixed:
        groups.append((fill.of_mixed(), s.mixed, s.mixed_ranks))
    if s.unknown:
        groups.append((fill.of_mask(0), s.unknown, 0))
    if len(groups) > MAX_PARTS:
        keep = sorted(groups, key=lambda g: -g[1])[: MAX_PARTS - 1]
        rest = [g for g in groups if g not in keep]
        groups = [g for g in groups if g in keep] + [(OTHERS, sum(g[1] for g in rest), 0)]
        fill.others = True
    return groups


def _label(mask: int, fill: str, width: float) -> str:
    """The rank numbers printed on a part ``width`` px wide, shortened to fit, or nothing."""
    if fill == OTHERS:
        tries = ["…"]
    elif mask & (mask - 1):  # several ranks
        count = bin(mask).count("1")
        tries = [mask_text(mask), f"{count} ranks", f"{count}"]
    else:
        tries = [str(mask.bit_length() - 1)] if mask else ["?"]
    return next((t for t in tries if text_width(t, MIN_FONT) + 3 <= width), "")


def strip_code(s: Strip, w: int, h: int, fill: OriginFill, names: Names, shared: dict[str, str] | None = None) -> Code:
    """Strip ``s`` drawn ``w`` × ``h`` (tenths of a px) as a code (``widgets/slot_codes.py``): its parts
    side by side in proportion to their values, each in its origin's fill with its ranks printed where
    they fit; all zeros, white with a 0. Its text takes the font of the group it is drawn in
    (``rank_grid`` draws strips inside one group that sets it).

    With ``shared``, a strip of one rank's data alone (or all zeros) is drawn once, as ``shared[id]`` for
    the figure's ``<defs>``, and its code says to use it: an all_gather's N² entries are N drawings."""
    groups = _groups(s, fill)
    if not groups:  # every value 0 (or nothing at all): white, says 0
        fill.zero = True
        code: Code = names.part(EMPTY, "#b0b0b0", w, "0" if text_width("0", MIN_FONT) + 3 <= w / 10 else "")
    else:
        total = sum(n for _, n, _ in groups)
        widths = [max(1.5, w / 10 * n / total) for _, n, _ in groups]
        scale = w / sum(widths)
        edges = [0, *(round(e * scale) for e in itertools.accumulate(widths[:-1])), w]
        code = ()
        for (f, _, mask), a, b in zip(groups, edges, edges[1:]):
            ink = OriginFill.ink(f) if f != OTHERS else "#444444"
            code += names.part(f, ink, b - a, _label(mask, f, (b - a) / 10))
    if shared is None or len(groups) > 1 or (groups and groups[0][0] == OTHERS):
        return code
    mask = groups[0][2] if groups else -1
    key = f"mgpu-{mask.bit_length() - 1 if mask > 0 else 'z' if mask else 'u'}-{w}"  # one drawing, one name
    key += f"-{h}" if h != tenths(STRIP_H) else ""
    if key not in shared:
        shared[key] = (
            f"<g id='{key}' font-family='sans-serif' font-size='{MIN_FONT}' text-anchor='middle'>"
            f"{code_svg(code, 0, 0, h, names.fills.table, names.labels.table)}</g>"
        )
    return ("u", key)


def draw_strip(
    parts: list[str],
    s: Strip,
    x: float,
    y: float,
    w: float,
    h: float,
    fill: OriginFill,
    shared: dict[str, str] | None = None,
) -> None:
    """Strip ``s`` at (x, y), ``w`` × ``h`` px, appended to ``parts`` as markup (:func:`strip_code`)."""
    names = Names()
    code = strip_code(s, tenths(w), tenths(h), fill, names, shared)
    parts.append(code_svg(code, tenths(x), tenths(y), tenths(h), names.fills.table, names.labels.table))
