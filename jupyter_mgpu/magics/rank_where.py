"""``%mgpu_where``: what every rank does now, as a table (``mg.where`` gives the rows)."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_mgpu.magics.rank_table import RankTable
from jupyter_mgpu.session import lifecycle


class WhereTable(RankTable):
    """The ranks' states: an HTML table in notebooks, aligned text elsewhere."""

    COLUMNS = ("rank", "state", "for", "collective", "line")
    CSS_CLASS = "mgpu-where"

    def _cells(self, row: dict[str, Any]) -> list[str]:
        seconds = row.get("seconds")
        return [
            str(row["rank"]),
            row["state"],
            "" if seconds is None else f"{seconds:.0f} s",
            row.get("collective") or "",
            row.get("line") or "",
        ]


@magics_class
class WhereMagics(Magics):
    """``%mgpu_where``."""

    @line_magic
    def mgpu_where(self, line: str = "") -> Any:
        """Show what every rank does now: running (which line), waiting in a collective, or idle.
        ``--tree``: every rank's stack as one tree, ranks counted per frame. ``--dump DIR`` also writes
        every rank's flight-recorder dump there, for ``torchfrtrace DIR``."""
        import shlex

        words = shlex.split(line)
        tree = "--tree" in words
        rest = [w for w in words if w != "--tree"]
        dump = None
        if rest[:1] == ["--dump"] and len(rest) == 2:
            dump = rest[1]
        elif rest:
            raise UsageError(f"%mgpu_where takes --tree and --dump DIR, got {line.strip()!r}")
        found = lifecycle.current().where(dump=dump, merge=tree)
        if dump is not None:
            print(f"mgpu: every rank's flight recorder written to {dump}/rank_<r>: torchfrtrace {dump}")
        return found if tree else WhereTable(found)
