"""Entries of the collective pictures as short codes, and the markup each code stands for.

The schedule player (``widgets/player.py``) does not send an entry's SVG: it sends a *code* — a strip's
parts as ``(fill, width, printed label)`` triples of numbers (the fills and labels named once), a strip
drawn once and used (``<use>``), an entry not filled yet — once per distinct drawing, and for each step
only which entry now shows which code.
Where an entry is drawn follows from the figure's grid (``widgets/grid_geometry.py``), sent once. The
browser (``static/player.js``) turns codes into the very markup :func:`code_svg` makes here, character
for character, so an exported frame and a played one are the same SVG.

Every length is a whole number of tenths of a px (:func:`f10` prints them), so both sides print the
same digits without sharing a float formatter.
"""

from __future__ import annotations

import html
from typing import Any

Code = tuple[Any, ...]  # (fill, width, label, …), ("u", id) or ("n", width): see code_svg
EDGE = "stroke='#888888' stroke-width='.6'"  # a strip's outline


def tenths(v: float) -> int:
    """``v`` px in whole tenths of a px."""
    return round(v * 10)


def f10(v: int) -> str:
    """Tenths of a px as printed: ``1625`` → ``162.5``, ``1800`` → ``180``."""
    sign, a = ("-" if v < 0 else ""), abs(v)
    return f"{sign}{a // 10}.{a % 10}" if a % 10 else f"{sign}{a // 10}"


class Table:
    """Distinct values that codes name by number (fills with the ink of their labels, printed labels)."""

    def __init__(self) -> None:
        self.table: list[Any] = []
        self._index: dict[Any, int] = {}

    def index(self, value: Any) -> int:
        if value not in self._index:
            self._index[value] = len(self.table)
            self.table.append(value)
        return self._index[value]


class Names:
    """What a figure's codes refer to: ``fills`` (``(fill, ink of a label on it)``) and ``labels``."""

    def __init__(self) -> None:
        self.fills, self.labels = Table(), Table()

    def part(self, fill: str, ink: str, width: int, label: str) -> tuple[int, int, int]:
        """A strip's part as a code's triple: fill, width, label (0 for none, else its number + 1)."""
        return self.fills.index((fill, ink)), width, self.labels.index(label) + 1 if label else 0


def code_svg(code: Code, x: int, y: int, h: int, fills: list[Any], labels: list[str]) -> str:
    """The markup of ``code`` with its top left at (``x``, ``y``), ``h`` high (tenths of a px).

    ``(fill, width, label, …)``: a strip, one rect per part side by side (``fills[fill]``'s colour, a
    label ``labels[label - 1]`` centred on it in its ink), outlined; ``("u", id)``: the strip drawn once
    as ``id``; ``("n", width)``: an entry not filled yet (a dashed box)."""
    kind = code[0]
    if kind == "u":  # y 0 (a line of a row drawn once) goes without saying
        at_y = f" y='{f10(y)}'" if y else ""
        return f"<use href='#{code[1]}' x='{f10(x)}'{at_y}/>"
    if kind == "n":
        return (
            f"<rect x='{f10(x)}' y='{f10(y)}' width='{f10(code[1])}' height='{f10(h)}' fill='#fafafa' "
            "stroke='#999999' stroke-width='.8' stroke-dasharray='3 2'/>"
        )
    one = len(code) == 3  # a strip of one part carries the outline itself
    out, at = [], x
    for i in range(0, len(code), 3):
        fill, ink = fills[code[i]]
        w, label = code[i + 1], code[i + 2]
        edge = " " + EDGE if one else ""
        out.append(f"<rect x='{f10(at)}' y='{f10(y)}' width='{f10(w)}' height='{f10(h)}' fill='{fill}'{edge}/>")
        if label:
            text = html.escape(labels[label - 1])
            out.append(f"<text x='{f10(at + w // 2)}' y='{f10(y + h // 2 + 32)}' fill='{ink}'>{text}</text>")
        at += w
    if not one:
        out.append(f"<rect x='{f10(x)}' y='{f10(y)}' width='{f10(at - x)}' height='{f10(h)}' fill='none' {EDGE}/>")
    return "".join(out)


def slot_place(grid: dict[str, Any], p: int) -> tuple[int, int, int]:
    """Part ``p`` of a figure (an entry) as its top left and its column: ``(x, y, column)``, tenths of
    a px. Parts from ``grid["first"]`` are every rank's entries in order: rank, column, entry."""
    entries = grid["entries"]
    r, rest = divmod(p - grid["first"], sum(entries))
    k = 0
    while rest >= entries[k]:
        rest -= entries[k]
        k += 1
    line, pos = divmod(rest, grid["per"][k])
    return grid["xs"][k][pos], grid["ys"][r] + line * grid["line"], k


def progressions(rows: list[tuple[int, ...]]) -> list[list[int]]:
    """Rows of numbers as runs of arithmetic progressions: ``[*row]`` alone, or ``[*first row, count,
    *step]`` for three or more rows each a step from the one before — a ring step's arrows (each rank to
    the next, with the next chunk) are one or two runs, not one row per rank."""
    out: list[list[int]] = []
    i = 0
    while i < len(rows):
        j = i
        if i + 2 < len(rows):
            step = [b - a for a, b in zip(rows[i], rows[i + 1])]
            while j + 1 < len(rows) and [b - a for a, b in zip(rows[j], rows[j + 1])] == step:
                j += 1
        if j - i >= 2:
            out.append([*rows[i], j - i + 1, *step])
            i = j + 1
        else:
            out.append(list(rows[i]))
            i += 1
    return out


def unfold(runs: list[list[int]], k: int) -> list[list[int]]:
    """The rows of ``k`` numbers :func:`progressions` wrote."""
    out: list[list[int]] = []
    for run in runs:
        count, first, step = (run[k], run[:k], run[k + 1 :]) if len(run) > k else (1, run, [0] * k)
        out.extend([a + m * d for a, d in zip(first, step)] for m in range(count))
    return out


def patch_runs(patch: dict[int, Any]) -> list[Any]:
    """A frame's changed parts as the player sends them: each run of consecutive parts as its first
    part's number and the list of their new values (``{5: a, 6: b, 9: c}`` → ``[5, [a, b], 9, [c]]``)."""
    out: list[Any] = []
    for p in sorted(patch):
        if out and p == out[-2] + len(out[-1]):
            out[-1].append(patch[p])
        else:
            out += [p, [patch[p]]]
    return out


def patch_parts(sent: list[Any]) -> dict[int, Any]:
    """The changed parts :func:`patch_runs` wrote."""
    return {p + i: v for p, values in zip(sent[::2], sent[1::2]) for i, v in enumerate(values)}


def box_svg(x: int, y: int, w: int, h: int, sw: float) -> str:
    """An outline (tenths of a px; ``sw`` the stroke width in px)."""
    return (
        f"<rect x='{f10(x)}' y='{f10(y)}' width='{f10(w)}' height='{f10(h)}' fill='none' "
        f"stroke='#000000' stroke-width='{sw:g}'/>"
    )


def marks_svg(overlay: dict[str, Any], marks: dict[str, list[Any]]) -> str:
    """A frame's arrows in the left gutter (``marks["arrows"]``: rows of sender, receiver, what — an index
    into ``overlay["whats"]`` — as :func:`progressions`) and its outlines: of list entries (``"entry"``)
    and whole tensors (``"tensor"``) by part (rows of one number, as :func:`progressions`), and any other
    box (``"boxes"``: x, y, w, h in tenths, stroke width)."""
    left, mid, colors, whats, grid = (
        overlay["left"],
        overlay["mid"],
        overlay["colors"],
        overlay["whats"],
        overlay["grid"],
    )
    out = []
    for i, (a, b, w) in enumerate(unfold(marks.get("arrows", []), 3)):
        ya, yb, gx, what = mid[a], mid[b], left - 10 - (i % 8) * 10, whats[w]
        tip = html.escape(f"rank {a} → rank {b}: {what}")
        out.append(
            f"<path d='M {left - 6:.1f} {ya:.1f} C {gx - 24:.1f} {ya:.1f}, {gx - 24:.1f} {yb:.1f}, "
            f"{left - 8:.1f} {yb:.1f}' fill='none' stroke='{colors[a]}' stroke-width='2' "
            f"marker-end='url(#mgpu-arrow-{a % 20})'><title>{tip}</title></path>"
        )
    for kind, widths, sw in (("entry", grid["w"], 2.2), ("tensor", grid["tw"], 2.0)):
        for (p,) in unfold(marks.get(kind, []), 1):
            x, y, k = slot_place(grid, p)
            out.append(box_svg(x - 20, y - 20, widths[k] + 40, grid["h"] + 40, sw))
    for x, y, w, h, sw in marks.get("boxes", []):
        out.append(box_svg(x, y, w, h, sw))
    return "".join(out)
