"""A table of one row per rank, as a magic shows it: HTML in a notebook, aligned text elsewhere
(``%mgpu_status``'s ``StatusTable``, ``%mgpu_where``'s ``WhereTable``).

Past :data:`FOLD_AFTER` ranks it stays legible: one line above it counts the ranks by state (and hosts),
the HTML table scrolls inside a box with its header kept in view, and each host's ranks start under a
row naming the host.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

FOLD_AFTER = 16  # more ranks than this: a summary line, a scrolling box, host rows


def host_of(row: dict[str, Any]) -> str | None:
    """The host a row's rank runs on: its ``host``, or the host part of a device label ``node2:cuda:1``."""
    if row.get("host"):
        return str(row["host"])
    device = str(row.get("device") or "")
    return device.rsplit(":", 2)[0] if device.count(":") >= 2 else None


class RankTable:
    """Rows of ``_cells(row)`` under ``COLUMNS``; the HTML table carries ``CSS_CLASS``."""

    COLUMNS: tuple[str, ...] = ()
    CSS_CLASS = "mgpu-table"

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def _cells(self, row: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def summary(self) -> str:
        """``64 ranks on 8 hosts: 60 idle, 4 busy``."""
        hosts = {host_of(r) for r in self.rows} - {None}
        states = Counter(str(r.get("state", "?")) for r in self.rows)
        where = f" on {len(hosts)} hosts" if len(hosts) > 1 else ""
        counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"{len(self.rows)} ranks{where}: {counts}"

    def __repr__(self) -> str:
        table = [list(self.COLUMNS)] + [self._cells(r) for r in self.rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(self.COLUMNS))]
        text = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)
        return f"{self.summary()}\n{text}" if len(self.rows) > FOLD_AFTER else text

    def _repr_html_(self) -> str:
        many = len(self.rows) > FOLD_AFTER
        sticky = " style='position:sticky;top:0;background:var(--jp-layout-color1,#fff)'" if many else ""
        head = "".join(f"<th{sticky}>{c}</th>" for c in self.COLUMNS)
        hosts = [host_of(r) for r in self.rows]
        grouped = many and len(set(hosts) - {None}) > 1
        body = []
        for i, r in enumerate(self.rows):
            if grouped and (i == 0 or hosts[i] != hosts[i - 1]):
                ranks = [str(x["rank"]) for x, h in zip(self.rows, hosts) if h == hosts[i]]
                label = (
                    f"{hosts[i]} · ranks {ranks[0]}–{ranks[-1]}" if len(ranks) > 1 else f"{hosts[i]} · rank {ranks[0]}"
                )
                body.append(
                    f"<tr class='mgpu-host'><th colspan='{len(self.COLUMNS)}' style='text-align:left'>"
                    f"{html.escape(label)}</th></tr>"
                )
            body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>")
        table = f"<table class='{self.CSS_CLASS}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        if not many:
            return table
        return (
            f"<div class='mgpu-table-summary'>{html.escape(self.summary())}</div>"
            f"<div class='mgpu-table-box' style='max-height:420px;overflow-y:auto'>{table}</div>"
        )
