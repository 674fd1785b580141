"""Colour by origin in the collective pictures: a value is drawn in the colour of the rank its data came from.

Every rank's input is *tracked*: a complex tensor whose real part is the value and whose imaginary part
is a bitmask of the ranks the value came from (bit r where rank r's input is non-zero). The logical
schedule (``ops/collective_schedule.py``) moves and combines tracked tensors like plain ones — a sum
ORs the masks, a max keeps the mask of the larger value (both on a tie) — so every value of every
frame knows its origin. A float64 holds one bit exactly at any rank, but an OR of many only within
:data:`MAX_TRACKED_RANKS` bits: a reduction over more ranks is tracked in two passes of ranks
(``bits``), their masks joined by the picture (``widgets/holding_strips.py``). One rank: that rank's
colour (marked past 20 ranks, ``colors.rank_mark``); several (a reduction): stripes of their colours,
or one hatch with the ranks printed on it (more than :data:`MAX_STRIPES` ranks, or any mix in a strip of
many ranks); 0: white. A rank colour never stands for a value.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from jupyter_mgpu.widgets.colors import EMPTY, PALETTE, rank_color, rank_mark, text_color

MAX_TRACKED_RANKS = 52  # bits that an OR of masks in a float64 imaginary part keeps exactly
UNKNOWN = "#bdbdbd"  # a non-zero value whose origin is not known
STRIPE = 3.0  # width of one rank's stripe in a mixed cell, px
MAX_STRIPES = 8  # more ranks mixed in one value: one hatch (MANY), the ranks printed and in the hover
MANY = "url(#mgpu-mix-many)"
OTHERS = "#e4e4e4"  # a strip's smallest parts, joined (``holding_strips.py``)
OPS = {"sum": "summed", "avg": "averaged", "product": "multiplied", "max": "tied maximum", "min": "tied minimum"}


def track(x: Any, rank: int, bits: range | None = None) -> Any:
    """Rank ``rank``'s input as a tracked tensor (value, and a mask bit where the value is non-zero).

    The bit is ``rank - bits.start`` for a rank in ``bits`` (default: every rank, bit ``rank``); a rank
    outside ``bits`` is not tracked (mask 0): one pass of a reduction over more than
    :data:`MAX_TRACKED_RANKS` ranks."""
    import torch

    v = x.detach().to("cpu").double()
    bits = range(rank + 1) if bits is None else bits
    bit = float(2 ** (rank - bits.start)) if rank in bits and rank - bits.start < 1024 else 0.0
    return torch.complex(v, (v != 0).double() * bit)


def attach(values: Any, tracked: Any) -> Any:
    """The real ``values`` (a holding: tensor, list of slots, None) with the origin masks of ``tracked``.

    Where the structures differ (they should not), the values keep no origin (drawn grey)."""
    import torch

    if values is None:
        return None
    if isinstance(values, list):
        slots = tracked if isinstance(tracked, list) and len(tracked) == len(values) else [None] * len(values)
        return [attach(v, t) for v, t in zip(values, slots)]
    v = values.detach().to("cpu").double()
    if tracked is not None and not isinstance(tracked, list) and tuple(tracked.shape) == tuple(v.shape):
        return torch.complex(v, tracked.imag)
    return torch.complex(v, torch.zeros_like(v))


def ranks_of(mask: int) -> list[int]:
    """The ranks of origin mask ``mask`` (bit r: rank r), lowest first."""
    return [r for r, bit in enumerate(reversed(bin(int(mask))[2:])) if bit == "1"]


def ranks_text(who: list[int]) -> str:
    """Ranks as short text: runs joined (``0–7,9,12–15``)."""
    runs: list[list[int]] = []
    for r in who:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(f"{a}" if a == b else f"{a}–{b}" if b > a + 1 else f"{a},{b}" for a, b in runs)


def mask_text(mask: int) -> str:
    """The ranks of origin mask ``mask`` as :func:`ranks_text` says them, run by run of set bits (a strip
    of a ring's reduction at 64 ranks prints thousands: bit by bit was most of the time)."""
    runs, m = [], int(mask)
    while m:
        lo = (m & -m).bit_length() - 1
        x = m >> lo
        n = (~x & (x + 1)).bit_length() - 1  # the run of ones from bit lo
        runs.append((lo, lo + n - 1))
        m = x >> n << (lo + n)
    return ",".join(f"{a}" if a == b else f"{a}–{b}" if b > a + 1 else f"{a},{b}" for a, b in runs)


def rank_pattern(rank: int) -> str:
    """The ``<pattern>`` of a marked rank colour (ranks 20 and up: hatched, dotted, cross-hatched)."""
    color, mark = rank_color(rank), rank_mark(rank)
    head = f"<pattern id='mgpu-rank-{rank}' patternUnits='userSpaceOnUse' width='5' height='5'"
    base = f"<rect width='5' height='5' fill='{color}'/>"
    ink = "#000000" if text_color(color) == "#ffffff" else "#ffffff"  # marks of the other lightness
    if mark == "hatched":
        return f"{head} patternTransform='rotate(45)'>{base}<rect width='1.4' height='5' fill='{ink}' opacity='.5'/></pattern>"
    if mark == "dotted":
        return f"{head}>{base}<circle cx='2.5' cy='2.5' r='1.1' fill='{ink}' opacity='.6'/></pattern>"
    return f"{head}>{base}<path d='M0 0L5 5M5 0L0 5' stroke='{ink}' stroke-width='.9' opacity='.55'/></pattern>"


class OriginFill:
    """Fills for (value, origin mask) pairs; remembers the mixed masks used, for ``defs`` and the legend."""

    def __init__(self, op: str | None = None):
        self.op = op
        self.mixed: set[int] = set()
        self.ranks: set[int] = set()
        self.unknown = False
        self.many = False  # a value mixing more than MAX_STRIPES ranks was drawn
        self.others = False  # a strip joined its smallest parts
        self.marked: set[int] = set()  # ranks past 20 whose marked colour a swatch drew
        self.zero = False  # a value 0 was drawn (white)

    def __call__(self, value: float, mask: int) -> str:
        if value == 0:
            self.zero = True
            return EMPTY
        return self.of_mask(int(mask))

    def of_mask(self, mask: int) -> str:
        """The fill of a non-zero value of origin ``mask``: a rank's colour (marked past 20 ranks), stripes
        of a few ranks, one hatch for many, grey for none known."""
        who = ranks_of(mask)
        if not who:
            self.unknown = True
            return UNKNOWN
        if len(who) == 1:
            return self.of_rank(who[0])
        self.ranks.update(who)
        if len(who) > MAX_STRIPES:
            return self.of_mixed()
        self.mixed.add(mask)
        return f"url(#mgpu-mix-{mask})"

    def of_rank(self, rank: int) -> str:
        """The fill of a value of rank ``rank``'s data alone: its colour, marked past 20 ranks."""
        self.ranks.add(rank)
        return rank_color(rank) if rank < len(PALETTE) else f"url(#mgpu-rank-{rank})"

    def of_mixed(self) -> str:
        """The one hatch of values combined from many ranks (which ones is printed on it)."""
        self.many = True
        return MANY

    def swatch(self, rank: int) -> str:
        """Rank ``rank``'s own fill, for its label (not a value: the legend does not list it for this)."""
        if rank < len(PALETTE):
            return rank_color(rank)
        self.marked.add(rank)
        return f"url(#mgpu-rank-{rank})"

    @staticmethod
    @functools.lru_cache(maxsize=1024)
    def ink(fill: str) -> str:
        """Colour of a number drawn on ``fill``."""
        if fill.startswith("url(#mgpu-rank-"):
            return text_color(rank_color(int(fill[len("url(#mgpu-rank-") : -1])))
        return text_color(fill) if fill.startswith("#") else "#000000"

    def defs(self) -> str:
        """The patterns used: diagonal stripes for every mixed mask, the hatch of many ranks mixed, the
        marked colours of ranks past 20 (ids are the same in every picture)."""
        out = [rank_pattern(r) for r in sorted(self.ranks | self.marked) if r >= len(PALETTE)]
        if self.many:
            out.append(
                "<pattern id='mgpu-mix-many' patternUnits='userSpaceOnUse' width='6' height='6' "
                "patternTransform='rotate(45)'><rect width='6' height='6' fill='#d8d2ec'/>"
                "<rect width='2.5' height='6' fill='#9a8fc4'/></pattern>"
            )
        for mask in sorted(self.mixed):
            who = ranks_of(mask)
            w = STRIPE * len(who)
            stripes = "".join(
                f"<rect x='{i * STRIPE:g}' y='0' width='{STRIPE:g}' height='{w:g}' fill='{rank_color(r)}'/>"
                for i, r in enumerate(who)
            )
            out.append(
                f"<pattern id='mgpu-mix-{mask}' patternUnits='userSpaceOnUse' width='{w:g}' "
                f"height='{w:g}' patternTransform='rotate(45)'>{stripes}</pattern>"
            )
        return "".join(out)

    def legend(self, per_rank: bool = True) -> list[tuple[str, str]]:
        """``(fill, label)`` items: each rank drawn (``per_rank``), stripes or the hatch if any value mixes
        ranks, grey if any origin is unknown, white if a value 0 was drawn."""
        items = [(self.of_rank(r), f"from rank {r}") for r in sorted(self.ranks)] if per_rank else []
        how = OPS.get(self.op or "", "combined")
        if self.mixed:
            items.append((f"url(#mgpu-mix-{min(self.mixed)})", f"{how}: from the ranks of its stripes"))
        if self.many:
            items.append((MANY, f"{how}: from several ranks (printed on it)"))
        if self.others:
            items.append((OTHERS, "… values of several other ranks (hover for them)"))
        if self.unknown:
            items.append((UNKNOWN, "origin not tracked"))
        if self.zero:
            items.append((EMPTY, "value 0"))
        return items


def cell_title(value: float, mask: int) -> str:
    """Hover text of one drawn value (plain text: the canvas escapes it)."""
    v = f"{value:g}" if math.isfinite(value) else str(value)
    who = ranks_of(int(mask))
    if not who:
        return v
    return f"{v} (from rank{'s' if len(who) > 1 else ''} {', '.join(map(str, who))})"
