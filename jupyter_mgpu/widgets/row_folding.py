"""Folding equal rows of the before/after figure of a collective over many ranks.

After an all_gather every one of N ranks holds the same N entries: drawn rank by rank that is N² strips
and, at 64 ranks, a figure 3 800 px tall that repeats one row 64 times. In the strips drawing
(``widgets/grid_geometry.py``) a holding equal to the one of the rank above it is drawn as one line,
"same as rank r", so the figure grows with the ranks (N rows of one line, plus what differs), and what
differs still stands out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.ops.holdings import holdings_equal


@dataclass(frozen=True)
class SameAs:
    """A holding drawn as "same as rank ``rank``": its rank holds exactly what rank ``rank`` holds."""

    rank: int


def fold_equal(column: list[Any]) -> list[Any]:
    """``column`` (one holding per rank) with each list holding equal to the one above it replaced by
    :class:`SameAs` the first rank of its run. Only lists fold: a tensor or a nothing-box is one line
    already."""
    out: list[Any] = []
    first = 0
    for r, h in enumerate(column):
        if r and isinstance(h, list) and holdings_equal(h, column[r - 1], exact=True):
            out.append(SameAs(first))
            continue
        first = r
        out.append(h)
    return out
