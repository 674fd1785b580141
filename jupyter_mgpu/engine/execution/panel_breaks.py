"""The breakpoints JupyterLab's debugger panel sets, as a rank's pdb takes them: in the running ``%%mgpu``
cell and in any file the ranks run (a helper module the cell imports), each with its condition and the hit
at which it stops. Pure: ``engine/execution/rank_debugger.py`` sets them; ``magics/debug_panel.py`` sends them.
"""

from __future__ import annotations

import io
import tokenize
from typing import Any

Place = tuple[str, int, "str | None", "int | None"]  # file, line, condition, hits


def places(filename: str, breaks: Any) -> list[Place]:
    """Every breakpoint of ``breaks`` (the cell's lines, or ``{"cell": [...], "files": {path: [...]}}``, each a
    line or ``[line, condition, hits]``) as (file, line, condition, hits); the cell's are in ``filename``."""
    if not breaks:
        return []
    if isinstance(breaks, list):
        breaks = {"cell": breaks}
    out: list[Place] = []
    for path, marks in [(filename, breaks.get("cell") or []), *(breaks.get("files") or {}).items()]:
        for mark in marks:
            line, cond, hits = (mark, None, None) if isinstance(mark, int) else (*list(mark), None, None)[:3]
            out.append((str(path), int(line), str(cond) if cond else None, int(hits) if hits else None))
    return out


def with_rank(cond: str, rank: int, world_size: int) -> str:
    """``cond`` with the names ``rank`` and ``world_size`` replaced by this rank's numbers (not attributes
    of that name): a condition such as ``rank == 2`` then means the same in every file."""
    known = {"rank": str(rank), "world_size": str(world_size)}
    out: list[tuple[int, str]] = []
    previous = None
    for tok in tokenize.generate_tokens(io.StringIO(cond).readline):
        text = tok.string
        if tok.type == tokenize.NAME and text in known and previous != ".":
            text = known[text]
        out.append((tok.type, text))
        previous = tok.string
    return str(tokenize.untokenize(out)).strip()


def hit_count(condition: Any) -> int | None:
    """The hit a DAP ``hitCondition`` (``"3"``, ``"== 3"``, ``">= 3"``) stops at first, or None."""
    text = str(condition or "").strip().lstrip("=>").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None
