"""Rank colours shared by every widget: rank k has the same colour in every picture.

A tab20-like categorical palette: the ten strong colours first (ranks 0–9), then their ten light
companions (ranks 10–19), then it repeats. Twenty colours are all the eye tells apart, so pictures of
more ranks also *mark* a colour (:func:`rank_mark`): ranks 20–39 hatched, 40–59 dotted, 60–79
cross-hatched — 80 ranks told apart by colour and mark (the collective pictures also print rank
numbers). A rank colour only ever stands for a rank: the collective pictures colour a value by the rank
its data came from (``collective_colors.py``), never by the value.
"""

from __future__ import annotations

TAB20_STRONG = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
TAB20_LIGHT = (
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
PALETTE = TAB20_STRONG + TAB20_LIGHT
EMPTY = "#ffffff"
MARKS = ("solid", "hatched", "dotted", "cross-hatched")  # one per round of the palette, then again


def rank_color(rank: int) -> str:
    """The colour of rank ``rank`` (a hex string such as ``#1f77b4``), stable for every widget."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a whole number ≥ 0, got {rank!r}")
    return PALETTE[rank % len(PALETTE)]


def rank_mark(rank: int) -> str:
    """How rank ``rank``'s colour is marked: ``solid`` for ranks 0–19, ``hatched`` 20–39, ``dotted``
    40–59, ``cross-hatched`` 60–79, then again (past 80 ranks only printed numbers tell them apart)."""
    rank_color(rank)  # the same check
    return MARKS[(rank // len(PALETTE)) % len(MARKS)]


def text_color(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (a ``#rrggbb`` colour)."""
    r, g, b = (int(background[i : i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"
