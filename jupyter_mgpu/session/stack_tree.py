"""Every rank's stack as one tree (``mg.where(merge=True)``, ``%mgpu_where --tree``, a hang at many ranks):
the parallel stack view of HPC debuggers, where each node counts the ranks in it, so the first question of a
distributed bug — which ranks are somewhere else? — is answered at a glance, at 64 ranks as at 4.

A node is one frame of the user's code (``line 4 of train() in model.py``), reached by the same frames
above it; ranks whose innermost frame is that node end there with what they do (``waiting in all_reduce
#8``, ``running``, ``at a pdb prompt``). Ranks with no frame of the user's (idle, done, dead) end at the root.
Ranks are named as ranges (``ranks 0–59, 62``). The merging itself is pure and shared with the sidebar's
stack view (``stack_merge.py``); here, how a notebook and a terminal show it.
"""

from __future__ import annotations

import html
from typing import Any

from jupyter_mgpu.errors import rank_list
from jupyter_mgpu.stack_merge import StackNode as StackNode  # re-exported: the tree's node
from jupyter_mgpu.stack_merge import doing as doing
from jupyter_mgpu.stack_merge import lines, merge
from jupyter_mgpu.stack_merge import rank_span as rank_span  # re-exported: how the session's messages name ranks

INDENT = "  "


def rank_words(ranks: list[int], past: int = 4) -> str:
    """How a message names ranks: ``ranks 0, 2, 3`` (``rank_list``) up to ``past`` of them, ranges beyond."""
    return rank_list(ranks) if len(ranks) <= past else rank_span(ranks)


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
