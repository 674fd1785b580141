"""Every rank's stack as one tree (``mg.where(merge=True)``, ``%mgpu_where --tree``, a hang at many ranks):
the parallel stack view of HPC debuggers, where each node counts the ranks in it, so the first question of a
distributed bug — which ranks are somewhere else? — is answered at a glance, at 64 ranks as at 4.

A node is one frame of the user's code (``line 4 of train() in model.py``), reached by the same frames
above it; ranks whose innermost frame is that node end there with what they do (``waiting in all_reduce
#8``, ``running``, ``at a pdb prompt``). Ranks with no frame of the user's (idle, done, dead) end at the root.
Ranks are named as ranges (``ranks 0–59, 62``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.errors import rank_list

INDENT = "  "


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


def rank_words(ranks: list[int], past: int = 4) -> str:
    """How a message names ranks: ``ranks 0, 2, 3`` (``rank_list``) up to ``past`` of them, ranges beyond."""
    return rank_list(ranks) if len(ranks) <= past else rank_span(ranks)


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


class StackTree:
    """Every rank's stack merged (``mg.where(merge=True)``): text in a terminal, a table in a notebook;
    ``.root`` is the tree, ``.rows`` the ranks' rows it was made of."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.root = merge(rows)

    def text(self) -> str:
        body = lines(self.root)
        width = max((len(INDENT * d + label) for d, label, _ in body), default=0)
        head = f"the user's frames of {rank_span(self.root.ranks)}"
        return "\n".join(
            [head] + [f"{INDENT * (d + 1)}{label:<{width - len(INDENT * d)}}  {span}" for d, label, span in body]
        )

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td style='padding-left:{1.2 * d + 0.3:.1f}em;text-align:left'>{html.escape(label)}</td>"
            f"<td style='text-align:left;white-space:nowrap'>{html.escape(span)}</td></tr>"
            for d, label, span in lines(self.root)
        )
        return (
            "<table class='mgpu-stack-tree'><thead><tr><th style='text-align:left'>where (the user's frames)</th>"
            f"<th style='text-align:left'>{html.escape(rank_span(self.root.ranks))}</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
        )
