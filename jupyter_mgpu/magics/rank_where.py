"""``%mgpu_where``: what every rank does now, as a table (``mg.where`` gives the rows)."""

from __future__ import annotations

import html
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_mgpu.session import lifecycle


class WhereTable:
    """The ranks' states: an HTML table in notebooks, aligned text elsewhere."""

    COLUMNS = ("rank", "state", "for", "collective", "line")

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def _cells(self, row: dict[str, Any]) -> list[str]:
        seconds = row.get("seconds")
        return [
            str(row["rank"]),
            row["state"],
            "" if seconds is None else f"{seconds:.0f} s",
            row.get("collective") or "",
            row.get("line") or "",
        ]

    def __repr__(self) -> str:
        table = [list(self.COLUMNS)] + [self._cells(r) for r in self.rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(self.COLUMNS))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{c}</th>" for c in self.COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>" for r in self.rows
        )
        return f"<table class='mgpu-where'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@magics_class
class WhereMagics(Magics):
    """``%mgpu_where``."""

    @line_magic
    def mgpu_where(self, line: str = "") -> WhereTable:
        """Show what every rank does now: running (which line), waiting in a collective, or idle."""
        if line.strip():
            raise UsageError(f"%mgpu_where takes no arguments, got {line.strip()!r}")
        return WhereTable(lifecycle.current().where())
