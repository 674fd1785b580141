"""Hand-written SVG for the collective pictures (``widgets/collective_view.py``): no matplotlib, no kaleido.

A :class:`Canvas` collects ``<text>`` and ``<rect>`` markup, every string it is given escaped (text and
hover titles alike: a rank's data or a user's label may hold ``<``, ``&`` or quotes); :func:`text_width`
and :func:`wrap` lay text out without a font engine, from the width of an average sans-serif character.
:data:`MIN_FONT` is the smallest text any picture draws. A figure's root sets the font family
(:data:`FONT`) once: its texts inherit it.
"""

from __future__ import annotations

import html

FONT = "font-family='sans-serif'"  # set once on a figure's root, which its texts inherit
CHAR = 0.62  # width of an average sans-serif character, in font sizes (for laying out text)
MIN_FONT = 9  # px: no text smaller, so a figure at its full width stays legible


def text_width(s: str, size: float) -> float:
    """The width of ``s`` in px at font ``size`` (an estimate)."""
    return len(s) * size * CHAR


def wrap(s: str, width: float, size: float) -> list[str]:
    """``s`` broken into lines of at most ``width`` px at font ``size``."""
    per = max(4, int(width / (size * CHAR)))
    lines, line = [], ""
    for word in s.split():
        if line and len(line) + 1 + len(word) > per:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + [line] if line else lines


class Canvas:
    """The parts of one SVG figure, in drawing order."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(
        self,
        x: float,
        y: float,
        s: str,
        size: float = 12,
        anchor: str = "start",
        weight: str = "normal",
        fill: str = "#222",
    ) -> None:
        bold = "" if weight == "normal" else f" font-weight='{weight}'"
        self.parts.append(
            f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size:g}' text-anchor='{anchor}'{bold} "
            f"fill='{fill}'>{html.escape(s)}</text>"
        )

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        fill: str,
        stroke: str = "none",
        sw: float = 0,
        dash: str = "",
        title: str = "",
    ) -> None:
        d = f" stroke-dasharray='{dash}'" if dash else ""
        head = (
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' fill='{fill}' "
            f"stroke='{stroke}' stroke-width='{sw:g}'{d}"
        )
        self.parts.append(f"{head}><title>{html.escape(title)}</title></rect>" if title else f"{head}/>")
