"""A ``%%mgpu`` cell's value in the notebook: the list of each rank's last value, shown the way the
notebook shows a value, labelled by rank.

A value that travelled (see ``engine/execution/cell_value.py``) is itself in the list and shown by the
notebook's own display machinery, so a DataFrame, an image or a plotly figure renders as it would in
a plain cell; one that could not (a widget, a value too big to copy) is shown from the rank's mime
bundle and is its repr in the list. When every shown rank's output is the same it is shown once
("ranks 0–3"). Plain-text values keep the compact ``Out[rank 1]: 100`` line.
"""

from __future__ import annotations

import html
import pickle
from typing import Any

_NOTHING = object()


def rank_label(ranks: list[int]) -> str:
    """``rank 2``, ``ranks 0–3`` (contiguous) or ``ranks 0, 2``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}–{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _arrived(report: dict[str, Any] | None) -> Any:
    """The rank's value in the notebook: itself when it travelled and loads here, else its repr."""
    if report is None:
        return None
    blob = report.get("pickled")
    if blob is not None:
        try:
            return pickle.loads(blob)
        except Exception:  # e.g. a class only the ranks can import
            pass
    return report["repr"]


class RankValues(list[Any]):
    """The per-rank values of a ``%%mgpu`` cell (``_`` after the cell), shown labelled by rank."""

    def __init__(self, ranks: list[int], reports: list[dict[str, Any] | None], show: list[int] | None = None):
        super().__init__(_arrived(r) for r in reports)
        self.ranks = list(ranks)
        self.reports = list(reports)
        self.show = None if show is None else list(show)

    def groups(self) -> list[tuple[list[int], int]]:
        """(ranks, index) pairs to show: one for all shown ranks when their outputs agree, else one each."""
        shown = [
            i for i, r in enumerate(self.ranks) if self.reports[i] is not None and (self.show is None or r in self.show)
        ]
        if not shown:
            return []
        first = self.reports[shown[0]]
        assert first is not None
        same = len(shown) > 1 and all(self._same(first, self.reports[i]) for i in shown[1:])
        if same:
            return [([self.ranks[i] for i in shown], shown[0])]
        return [([self.ranks[i]], i) for i in shown]

    @staticmethod
    def _same(a: dict[str, Any], b: dict[str, Any] | None) -> bool:
        return b is not None and a["data"] == b["data"]  # the same output, whatever the bytes of its pickle

    def _text_only(self, i: int) -> bool:
        report = self.reports[i]
        return report is not None and set(report["data"]) == {"text/plain"}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        for ranks, i in self.groups():
            label = rank_label(ranks)
            report = self.reports[i]
            assert report is not None
            if self._text_only(i):
                print(f"Out[{label}]: {report['repr']}")
                continue
            display(
                {"text/plain": f"[{label}]", "text/html": f"<div class='mgpu-rank-label'>{html.escape(label)}</div>"},
                raw=True,
            )
            if report.get("pickled") is not None and self[i] is not report["repr"]:
                display(self[i])
            else:
                display(report["data"], raw=True, metadata=report.get("metadata") or {})

    def __repr__(self) -> str:
        return "\n".join(
            f"Out[{rank_label(ranks)}]: {self.reports[i]['repr']}"  # type: ignore[index]
            for ranks, i in self.groups()
        )
