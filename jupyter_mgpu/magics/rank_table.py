"""A table of one row per rank, as a magic shows it: HTML in a notebook, aligned text elsewhere
(``%mgpu_status``'s ``StatusTable``, ``%mgpu_where``'s ``WhereTable``)."""

from __future__ import annotations

import html
from typing import Any


class RankTable:
    """Rows of ``_cells(row)`` under ``COLUMNS``; the HTML table carries ``CSS_CLASS``."""

    COLUMNS: tuple[str, ...] = ()
    CSS_CLASS = "mgpu-table"

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def _cells(self, row: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def __repr__(self) -> str:
        table = [list(self.COLUMNS)] + [self._cells(r) for r in self.rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(self.COLUMNS))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{c}</th>" for c in self.COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>" for r in self.rows
        )
        return f"<table class='{self.CSS_CLASS}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
