"""Colour by origin in the collective pictures: a value is drawn in the colour of the rank its data came from.

Every rank's input is *tracked*: a complex tensor whose real part is the value and whose imaginary part
is a bitmask of the ranks the value came from (bit r where rank r's input is non-zero). The logical
schedule (``ops/collective_schedule.py``) moves and combines tracked tensors like plain ones — a sum
ORs the masks, a max keeps the mask of the larger value (both on a tie) — so every value of every
frame knows its origin. One rank: that rank's colour; several (a reduction): stripes of their
colours; 0: white. A rank colour never stands for a value.
"""

from __future__ import annotations

import html
import math
from typing import Any

from jupyter_mgpu.widgets.colors import EMPTY, rank_color, text_color

MAX_TRACKED_RANKS = 52  # bits that a float64 imaginary part holds exactly
UNKNOWN = "#bdbdbd"  # a non-zero value whose origin is not known (a rank mask past 52 ranks)
STRIPE = 3.0  # width of one rank's stripe in a mixed cell, px


def track(x: Any, rank: int) -> Any:
    """Rank ``rank``'s input as a tracked tensor (value, and bit ``rank`` where the value is non-zero)."""
    import torch

    v = x.detach().to("cpu").double()
    bit = float(1 << rank) if rank < MAX_TRACKED_RANKS else 0.0
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
    return [r for r in range(MAX_TRACKED_RANKS) if mask >> r & 1]


class OriginFill:
    """Fills for (value, origin mask) pairs; remembers the mixed masks used, for ``defs`` and the legend."""

    def __init__(self, op: str | None = None):
        self.op = op
        self.mixed: set[int] = set()
        self.ranks: set[int] = set()
        self.unknown = False

    def __call__(self, value: float, mask: int) -> str:
        if value == 0:
            return EMPTY
        who = ranks_of(mask)
        if not who:
            self.unknown = True
            return UNKNOWN
        self.ranks.update(who)
        if len(who) == 1:
            return rank_color(who[0])
        self.mixed.add(mask)
        return f"url(#mgpu-mix-{mask})"

    @staticmethod
    def ink(fill: str) -> str:
        """Colour of a number drawn on ``fill``."""
        return text_color(fill) if fill.startswith("#") else "#000000"

    def defs(self) -> str:
        """An SVG pattern of diagonal stripes for every mixed mask used (ids are the same in every picture)."""
        out = []
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

    def legend(self) -> list[tuple[str, str]]:
        """``(fill, label)`` items: each rank drawn, stripes if any value mixes ranks, white for 0."""
        items = [(rank_color(r), f"from rank {r}") for r in sorted(self.ranks)[:20]]
        if self.mixed:
            how = {
                "sum": "summed",
                "avg": "averaged",
                "product": "multiplied",
                "max": "tied maximum",
                "min": "tied minimum",
            }.get(self.op or "", "combined")
            items.append((f"url(#mgpu-mix-{min(self.mixed)})", f"{how}: from the ranks of its stripes"))
        if self.unknown:
            items.append((UNKNOWN, "origin not tracked"))
        items.append((EMPTY, "0"))
        return items


def cell_title(value: float, mask: int) -> str:
    """Hover text of one drawn value."""
    v = f"{value:g}" if math.isfinite(value) else str(value)
    who = ranks_of(mask)
    if not who:
        return html.escape(v)
    return html.escape(f"{v} (from rank{'s' if len(who) > 1 else ''} {', '.join(map(str, who))})")
