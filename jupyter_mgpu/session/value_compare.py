"""``mg.compare_values("x")``: one value across the ranks — how do they differ? — as the cross-process
comparison of HPC debuggers shows it: one row per distinct value with the ranks that hold it (the group
with the most ranks first), a tensor's shape, dtype and norm, and for a tensor of the same shape as the
first row's the first element where it differs, found from hashes of the ranks' chunks
(``engine/execution/value_digest.py``) so only two chunks ever travel.
"""

from __future__ import annotations

import html
from typing import Any

from jupyter_mgpu.engine.execution import value_digest
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session.stack_tree import rank_span


def _what(d: dict[str, Any]) -> str:
    if "error" in d:
        return str(d["error"])
    if d["kind"] == "tensor":
        return f"{d['dtype']}[{', '.join(map(str, d['shape']))}] on {d['device']}, norm {d['norm']:.6g}"
    return f"{d['type']}: {d['repr']}"


def _key(d: dict[str, Any]) -> tuple[Any, ...]:
    if "error" in d:
        return ("error", d["error"])
    return (d["kind"], d.get("dtype"), tuple(d.get("shape") or ()), d["hash"])


def _index(flat: int, shape: list[int]) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(flat % n if n else 0)
        flat //= n or 1
    return out[::-1]


class ValueComparison:
    """The rows of one comparison (``.rows``: ``ranks``, ``value``, ``note``); a table in a notebook."""

    def __init__(self, expr: str, rows: list[dict[str, Any]]) -> None:
        self.expr = expr
        self.rows = rows

    @property
    def same(self) -> bool:
        """Whether every rank holds the same value."""
        return len(self.rows) == 1

    def __repr__(self) -> str:
        head = f"{self.expr}: {'the same on every rank' if self.same else f'{len(self.rows)} different values'}"
        width = max(len(rank_span(r["ranks"])) for r in self.rows)
        body = [
            f"  {rank_span(r['ranks']):<{width}}  {r['value']}" + (f"  ({r['note']})" if r["note"] else "")
            for r in self.rows
        ]
        return "\n".join([head, *body])

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td style='text-align:left;white-space:nowrap'>{html.escape(rank_span(r['ranks']))}</td>"
            f"<td style='text-align:left'>{html.escape(r['value'])}</td>"
            f"<td style='text-align:left'>{html.escape(r['note'])}</td></tr>"
            for r in self.rows
        )
        return (
            f"<table class='mgpu-compare-values'><caption style='text-align:left'>{html.escape(repr(self).splitlines()[0])}"
            "</caption><thead><tr><th>ranks</th><th>value</th><th>where it differs</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
        )


def compare_values(s: Any, expr: str) -> ValueComparison:
    """``expr`` (a name, or any expression) evaluated on every rank of session ``s``, compared."""
    if not isinstance(expr, str) or not expr.strip():
        raise MgpuError(f"compare_values takes a name or an expression as a string, got {expr!r}")
    digests = dict(zip(range(s.world_size), s.run(value_digest.digest, expr, label="mg.compare_values")))
    groups: dict[tuple[Any, ...], list[int]] = {}
    for r, d in digests.items():
        groups.setdefault(_key(d), []).append(r)
    ordered = sorted(groups.values(), key=lambda ranks: (-len(ranks), ranks[0]))
    first = digests[ordered[0][0]]
    rows = []
    for ranks in ordered:
        d = digests[ranks[0]]
        note = "" if ranks is ordered[0] else _difference(s, expr, first, ordered[0][0], d, ranks[0])
        rows.append({"ranks": ranks, "value": _what(d), "note": note})
    return ValueComparison(expr, rows)


def _difference(s: Any, expr: str, ref: dict[str, Any], ref_rank: int, d: dict[str, Any], rank: int) -> str:
    """Where rank ``rank``'s tensor first differs from ``ref_rank``'s, or how the two differ otherwise."""
    if "error" in d or "error" in ref or d["kind"] != "tensor" or ref["kind"] != "tensor":
        return ""
    if d["shape"] != ref["shape"] or d["dtype"] != ref["dtype"]:
        return f"another shape or dtype than {rank_span([ref_rank])}'s"
    c = next((i for i, (a, b) in enumerate(zip(d["chunks"], ref["chunks"])) if a != b), None)
    if c is None:
        return ""
    start, stop = c * d["chunk"], (c + 1) * d["chunk"]
    theirs, mine = s.run(value_digest.elements, expr, start, stop, targets=[ref_rank, rank], label="mg.compare_values")
    at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b and not (a != a and b != b)), 0)
    where = _index(start + at, d["shape"])
    return f"first differs at {where}: {mine[at]!r} here, {theirs[at]!r} on rank {ref_rank}"
