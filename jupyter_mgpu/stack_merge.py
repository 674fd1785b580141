"""Every rank's stack merged into one tree, pure: what ``mg.where(merge=True)`` (``session/stack_tree.py``) and
the sidebar's stack view (the server's ``clusters/<id>/where``) both draw, from ``mg.where()``'s rows.

A node is one frame of the user's code, reached by the same frames above it; ranks whose innermost frame is
that node end there with what they do (``waiting in all_reduce #8``, ``running``, ``at a pdb prompt``). Ranks
with no frame of the user's (idle, done, dead) end at the root. Ranks are named as ranges (``ranks 0–59, 62``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def rank_span(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 0–59, 62 (61)``: consecutive ranks as one range, the count after three."""
    ranks = sorted(set(ranks))
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts, start = [], ranks[0]
    for a, b in zip(ranks, [*ranks[1:], None]):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}{'–' if a > start + 1 else ', '}{a}")
            start = b if b is not None else start
    return "ranks " + ", ".join(parts) + (f" ({len(ranks)})" if len(ranks) > 2 else "")


def doing(row: dict[str, Any]) -> str:
    """What a rank does, in the tree's words: ``waiting in all_reduce #8``, ``running``, ``idle``."""
    state = row.get("state") or "unknown"
    if state == "collective":
        return f"waiting in {row.get('collective') or 'a collective'}"
    if state == "debugging":
        return "at a pdb prompt"
    return str(state)


@dataclass
class StackNode:
    """One frame of the user's code and the ranks whose stacks pass through it."""

    frame: str
    ranks: list[int] = field(default_factory=list)
    children: dict[str, StackNode] = field(default_factory=dict)
    ending: dict[str, list[int]] = field(default_factory=dict)  # what they do -> ranks whose stack ends here


def merge(rows: list[dict[str, Any]]) -> StackNode:
    """The tree of ``mg.where()``'s rows: each rank's ``stack`` (outermost first) as a path from the root."""
    root = StackNode("")
    for row in rows:
        r = int(row["rank"])
        node = root
        node.ranks.append(r)
        for frame in row.get("stack") or ([row["line"]] if row.get("line") else []):
            node = node.children.setdefault(str(frame), StackNode(str(frame)))
            node.ranks.append(r)
        node.ending.setdefault(doing(row), []).append(r)
    return root


def lines(root: StackNode) -> list[tuple[int, str, str]]:
    """The tree, depth first: (depth, frame or what the ranks do, the ranks)."""
    out: list[tuple[int, str, str]] = []

    def walk(node: StackNode, depth: int) -> None:
        for what, ranks in sorted(node.ending.items(), key=lambda kv: min(kv[1])):
            if node.frame and not node.children and len(node.ending) == 1:
                break  # said on the frame's own line
            out.append((depth, what, rank_span(ranks)))
        for child in sorted(node.children.values(), key=lambda c: min(c.ranks)):
            label = child.frame
            if not child.children and len(child.ending) == 1:
                label += f"  ·  {next(iter(child.ending))}"
            out.append((depth, label, rank_span(child.ranks)))
            walk(child, depth + 1)

    walk(root, 0)
    return out
