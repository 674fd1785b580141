"""One holding of the collective pictures (``widgets/collective_view.py``) drawn as a strip, for many ranks.

At 32 or 64 ranks a holding drawn cell by cell (``widgets/tensor_cells.py``) is thousands of shapes
per figure, text a few px high, and N³ of them across an all_gather's frames. A strip says what
matters at that scale in a few shapes: *whose data it holds*. A tracked tensor is summarised once
(:func:`strip_of`: how many non-zero values came from each origin mask, how many are 0, the range of
the values) and drawn as a bar split in proportion to its origins, each part in its origin's fill
(``widgets/collective_colors.py``) with the rank numbers printed where they fit; the hover says the
rest. A strip's markup is a few hundred bytes whatever the tensor's size, and a strip of one rank's
data alone is drawn once per figure and *used* (``<use>``) wherever it appears.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.widgets.collective_colors import (
    MAX_TRACKED_RANKS,
    OPS,
    OTHERS,
    OriginFill,
    ranks_of,
    ranks_text,
)
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, text_width

MAX_PARTS = 4  # parts of one strip; the smallest of more are drawn as one grey part, "…"


@dataclass(frozen=True)
class Strip:
    """A tracked tensor summarised: its shape, ``(origin mask, count)`` of its non-zero values (lowest
    rank first), how many values are 0, and the range of the values."""

    shape: tuple[int, ...]
    parts: tuple[tuple[int, int], ...]
    zeros: int
    lo: float
    hi: float

    @property
    def values(self) -> int:
        return sum(c for _, c in self.parts) + self.zeros


def strip_of(t: Any, high: Any = None) -> Strip:
    """The strip of tracked tensor ``t``; ``high`` is the same holding tracked for ranks from
    :data:`~.collective_colors.MAX_TRACKED_RANKS` up (the second pass of a reduction over more ranks)."""
    import numpy as np

    a = t.detach().resolve_conj().numpy().ravel()
    vals, nz = a.real, a.real != 0
    masks = a.imag[nz]
    if high is not None:  # the two masks of a value as one complex key: a 1-D unique, not a slow one by rows
        masks = masks + 1j * high.detach().resolve_conj().numpy().ravel().imag[nz]
    parts = _parts(*np.unique(masks, return_counts=True))
    finite = vals[np.isfinite(vals)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (math.nan, math.nan)
    return Strip(tuple(t.shape), parts, int(a.size - nz.sum()), lo, hi)


def _parts(keys: Any, counts: Any) -> tuple[tuple[int, int], ...]:
    """``(origin mask, count)`` for each distinct key (a mask, or a complex pair of masks: ranks below
    and from :data:`~.collective_colors.MAX_TRACKED_RANKS`), lowest rank first, then by mask; sorted
    in numpy (a reduction at 64 ranks gives tens of masks per strip and thousands of strips)."""
    import numpy as np

    re, im, counts_l = np.real(keys), np.imag(keys), np.asarray(counts).tolist()
    if keys.size and max(re.max(), im.max()) >= 2.0**64:  # a rank past 63 tracked alone: Python's ints
        merged = [(int(m) | int(h) << MAX_TRACKED_RANKS, c) for m, h, c in zip(re.tolist(), im.tolist(), counts_l)]
        return tuple(sorted(merged, key=lambda mc: (_low(mc[0]), mc[0])))
    lo, hi = re.astype(np.uint64), im.astype(np.uint64)  # a rank's bit is 63 at most: 64 ranks tracked alone
    low = np.where(lo != 0, _lowest_bit(lo), np.where(hi != 0, MAX_TRACKED_RANKS + _lowest_bit(hi), -1))
    order = np.lexsort((lo, hi, low)).tolist()
    lo_l, hi_l = lo.tolist(), hi.tolist()
    return tuple((lo_l[i] | hi_l[i] << MAX_TRACKED_RANKS, counts_l[i]) for i in order)


def _lowest_bit(x: Any) -> Any:
    """The index of each element's lowest set bit (0 for 0: the caller masks those)."""
    import numpy as np

    bit = x & (~x + np.uint64(1))  # two's complement, in unsigned arithmetic
    return np.log2(np.where(bit == 0, 1, bit)).astype(np.int64)


def _low(mask: int) -> int:
    """The lowest rank of ``mask`` (-1 for none)."""
    return (mask & -mask).bit_length() - 1


def describe(s: Strip, op: str | None = None) -> str:
    """A strip's hover text: its shape, whose values it holds (each rank's alone, then the values
    combined from several ranks, in all), its zeros and the range of its values."""
    shape = "×".join(map(str, s.shape)) or "scalar"
    how = OPS.get(op or "", "combined")
    said, mixed, unknown = [], [(m, c) for m, c in s.parts if m & (m - 1)], 0
    for mask, count in s.parts:
        if mask == 0:
            unknown += count
        elif not mask & (mask - 1):
            said.append(f"{count} from rank {mask.bit_length() - 1}")
    if len(mixed) == 1:
        said.append(f"{mixed[0][1]} {how} from ranks {ranks_text(ranks_of(mixed[0][0]))}")
    elif mixed:
        union = 0
        for m, _ in mixed:
            union |= m
        count = sum(c for _, c in mixed)
        said.append(f"{count} {how} from several ranks each (ranks {ranks_text(ranks_of(union))} in all)")
    if unknown:
        said.append(f"{unknown} of unknown origin")
    if s.zeros:
        said.append(f"{s.zeros} zero{'s' if s.zeros > 1 else ''}")
    values = f"; values {s.lo:g} … {s.hi:g}" if s.values and not math.isnan(s.lo) else ""
    return f"{shape}: " + ", ".join(said) + values


def _groups(s: Strip, fill: OriginFill) -> list[tuple[str, int, int]]:
    """``(fill, count, origin mask)`` of the parts to draw: each rank's values alone, then every value
    combined from several ranks as one hatched part, then values of unknown origin; at most
    :data:`MAX_PARTS` (the smallest of more joined, grey)."""
    alone: dict[int, int] = {}
    mixed, mixed_ranks, unknown = 0, 0, 0
    for mask, count in s.parts:
        if mask == 0:
            unknown += count
        elif mask & (mask - 1):
            mixed, mixed_ranks = mixed + count, mixed_ranks | mask
        else:
            r = mask.bit_length() - 1
            alone[r] = alone.get(r, 0) + count
    groups = [(fill.of_rank(r), c, 1 << r) for r, c in sorted(alone.items())]
    if mixed:
        groups.append((fill.of_mixed(), mixed, mixed_ranks))
    if unknown:
        groups.append((fill.of_mask(0), unknown, 0))
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
        who = ranks_of(mask)
        tries = [ranks_text(who), f"{len(who)} ranks", f"{len(who)}"]
    else:
        tries = [str(mask.bit_length() - 1)] if mask else ["?"]
    return next((t for t in tries if text_width(t, MIN_FONT) + 3 <= width), "")


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
    """Strip ``s`` at (x, y), ``w`` × ``h`` px, appended to ``parts`` as markup. Its text takes the font
    of the group it is drawn in (``rank_grid`` draws strips inside one group that sets it).

    With ``shared``, a strip of one rank's data alone (or all zeros) is drawn once, as ``shared[id]`` for
    the figure's ``<defs>``, and used where it appears: an all_gather's N² entries are N drawings."""
    groups = _groups(s, fill)
    if shared is not None and len(groups) <= 1 and (not groups or groups[0][0] != OTHERS):
        mask = groups[0][2] if groups else -1
        key = f"mgpu-s-{mask.bit_length() - 1 if mask > 0 else 'z' if mask else 'u'}-{w * 10:.0f}-{h * 10:.0f}"
        if key not in shared:
            body: list[str] = []
            _draw_parts(body, groups, 0, 0, w, h)
            shared[key] = (
                f"<g id='{key}' font-family='sans-serif' font-size='{MIN_FONT}' text-anchor='middle'>{''.join(body)}</g>"
            )
        parts.append(f"<use href='#{key}' x='{x:.1f}' y='{y:.1f}'/>")
        return
    _draw_parts(parts, groups, x, y, w, h)


def _draw_parts(parts: list[str], groups: list[tuple[str, int, int]], x: float, y: float, w: float, h: float) -> None:
    if not groups:  # every value 0 (or nothing at all): white, says 0
        parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:g}' fill='#ffffff' {_EDGE}/>")
        if text_width("0", MIN_FONT) + 3 <= w:
            parts.append(f"<text x='{x + w / 2:.1f}' y='{y + h / 2 + 3.2:.1f}' fill='#b0b0b0'>0</text>")
        return
    total = sum(n for _, n, _ in groups)
    widths = [max(1.5, w * n / total) for _, n, _ in groups]
    scale = w / sum(widths)
    edge = _EDGE if len(groups) == 1 else ""
    at = x
    for (f, _, mask), gw in zip(groups, widths):
        gw *= scale
        parts.append(
            f"<rect x='{at:.1f}' y='{y:.1f}' width='{gw:.1f}' height='{h:g}' fill='{f}'{' ' + edge if edge else ''}/>"
        )
        label = _label(mask, f, gw)
        if label:
            ink = OriginFill.ink(f) if f != OTHERS else "#444444"
            parts.append(f"<text x='{at + gw / 2:.1f}' y='{y + h / 2 + 3.2:.1f}' fill='{ink}'>{label}</text>")
        at += gw
    if not edge:
        parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:g}' fill='none' {_EDGE}/>")


_EDGE = "stroke='#888888' stroke-width='.6'"
