"""Rank colours shared by every widget: rank k has the same colour in every picture.

A tab20-like categorical palette: the ten strong colours first (ranks 0–9), then their ten light
companions (ranks 10–19), then it repeats. Values in the collective pictures use the same mapping
(value v ↔ rank v−1), so the demo data ``rank + 1`` keeps its rank's colour wherever it goes.
"""

from __future__ import annotations

TAB20_STRONG = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TAB20_LIGHT = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
               "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
PALETTE = TAB20_STRONG + TAB20_LIGHT
EMPTY = "#ffffff"


def rank_color(rank: int) -> str:
    """The colour of rank ``rank`` (a hex string such as ``#1f77b4``), stable for every widget."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a whole number ≥ 0, got {rank!r}")
    return PALETTE[rank % len(PALETTE)]


def text_color(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (a ``#rrggbb`` colour)."""
    r, g, b = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


def ramp(t: float) -> str:
    """A sequential colour for ``t`` in [0, 1] (light yellow → dark blue), for data that is not categorical."""
    t = min(1.0, max(0.0, t))
    stops = ((255, 255, 217), (127, 205, 187), (29, 145, 192), (37, 52, 148), (8, 29, 88))
    pos = t * (len(stops) - 1)
    i = min(int(pos), len(stops) - 2)
    f = pos - i
    c = [round(a + (b - a) * f) for a, b in zip(stops[i], stops[i + 1])]
    return "#%02x%02x%02x" % tuple(c)
