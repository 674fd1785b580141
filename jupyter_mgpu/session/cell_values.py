"""A ``%%mgpu`` cell's value in the notebook: the list of each rank's last value, shown the way the
notebook shows a value, labelled by rank.

A value that travelled (see ``engine/execution/cell_value.py``) is itself in the list and shown by the
notebook's own display machinery, so a DataFrame, an image or a plotly figure renders as it would in
a plain cell; one that could not (a widget, a value too big to copy) is shown from the rank's mime
bundle and is its repr in the list. A value that travelled is formatted here (the ranks do not format
it). When every shown rank's output is the same it is shown once ("ranks 0–3"): outputs are compared
as the notebook would show them, less the HTML of a value that also has a JSON form (a plotly figure's
HTML holds a random element id). Plain-text values keep the compact ``Out[rank 1]: 100`` line. Values
a browser shows as HTML (DataFrames, images) are one output however many ranks differ, each under its
rank label, so JupyterLab's limit of 50 outputs per cell never hides a rank; values it draws itself (figures,
widgets) are two outputs each, and past :data:`MAX_RICH_GROUPS` of them one paged output
(``session/value_pages.py``).
"""

from __future__ import annotations

import html
import pickle
import threading
from typing import Any

from jupyter_mgpu.engine.execution import cell_value

_NOTHING = object()
# groups whose value the front end draws itself (a plotly figure, a widget) each take two outputs; past
# this many, they are all shown in one paged output instead (JupyterLab folds a cell's outputs past 50)
MAX_RICH_GROUPS = 20
# what a browser shows as HTML in one block: values made only of these merge into one output
_MERGEABLE = {"text/plain", "text/html", "image/png", "image/jpeg", "image/gif", "image/svg+xml"}


def as_html(data: dict[str, Any]) -> str | None:
    """A value's mime bundle as one HTML block, or None when the front end must draw it itself."""
    if not set(data) <= _MERGEABLE or set(data) == {"text/plain"}:
        return None
    if "text/html" in data:
        return str(data["text/html"])
    if "image/svg+xml" in data:
        return str(data["image/svg+xml"])
    for mime in ("image/png", "image/jpeg", "image/gif"):
        if mime in data:
            return f"<img src='data:{mime};base64,{data[mime]}'/>"
    return None


def _show_merged(blocks: list[str], plain: list[str]) -> None:
    """One output for the labelled blocks gathered so far (every rank's DataFrame in one place)."""
    if not blocks:
        return
    from IPython.display import display

    scroll = " style='max-height:640px;overflow-y:auto'" if len(blocks) > 4 else ""  # many ranks: one box
    html_text = f"<div class='mgpu-rank-values'{scroll}>" + "".join(blocks) + "</div>"
    display({"text/plain": "\n".join(plain), "text/html": html_text}, raw=True)
    blocks.clear()
    plain.clear()


_warming: threading.Thread | None = None


def warm_first_use() -> threading.Thread | None:
    """Pay the notebook's first-use costs of what the ranks send back now, from a background thread, off
    any cell: ``import torch`` (the first tensor that arrives needs it: 1.7 s here) and plotly's renderers
    (they import nbformat, whose schema validation compiles grammars for seconds on a first use), so a
    cell's first tensor or figure from the ranks shows at once. Only what is installed is imported."""
    global _warming
    import importlib.util

    if _warming is not None:
        return _warming
    wanted = [m for m in ("torch", "plotly") if importlib.util.find_spec(m) is not None]
    if not wanted:
        return None

    def warm() -> None:
        for module in ("torch", "plotly.io._renderers"):
            if module.split(".")[0] in wanted:
                try:
                    importlib.import_module(module)
                except Exception:
                    pass

    _warming = threading.Thread(target=warm, name="mgpu-warm-first-use", daemon=True)
    _warming.start()
    return _warming


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
        self._bundles: dict[int, dict[str, Any]] = {}

    def groups(self) -> list[tuple[list[int], int]]:
        """(ranks, index) pairs to show: one for all shown ranks when their outputs agree, else one each."""
        shown = [
            i for i, r in enumerate(self.ranks) if self.reports[i] is not None and (self.show is None or r in self.show)
        ]
        if not shown:
            return []
        pickles = {(self.reports[i] or {}).get("pickled") for i in shown}
        if len(shown) > 1 and len(pickles) == 1 and None not in pickles:  # the same bytes: no need to format
            return [([self.ranks[i] for i in shown], shown[0])]
        first = self._key(shown[0])
        same = len(shown) > 1 and all(self._key(i) == first for i in shown[1:])
        if same:
            return [([self.ranks[i] for i in shown], shown[0])]
        return [([self.ranks[i]], i) for i in shown]

    def _travelled(self, i: int) -> bool:
        report = self.reports[i]
        return report is not None and report.get("pickled") is not None and self[i] is not report["repr"]

    def _data(self, i: int) -> dict[str, Any]:
        """What the notebook shows for rank ``i``'s value: formatted here when it travelled."""
        report = self.reports[i]
        assert report is not None
        if not self._travelled(i):
            return dict(report["data"])
        if i not in self._bundles:
            self._bundles[i] = cell_value.bundle(self[i])[0]
        return self._bundles[i]

    def _key(self, i: int) -> dict[str, Any]:
        """The output compared between ranks (the same output, whatever the bytes of its pickle)."""
        data = self._data(i)
        if any(mime.endswith("json") for mime in data):
            data = {k: v for k, v in data.items() if k != "text/html"}
        return data

    def _text_only(self, i: int) -> bool:
        return self.reports[i] is not None and set(self._data(i)) == {"text/plain"}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        merged: list[str] = []  # labelled HTML blocks of consecutive groups, shown as one output
        plain: list[str] = []
        groups = self.groups()
        rich = [(ranks, i) for ranks, i in groups if not self._text_only(i) and as_html(self._data(i)) is None]
        paged = len(rich) > MAX_RICH_GROUPS  # past the front end's output limit: one output, a page at a time
        for ranks, i in groups:
            label = rank_label(ranks)
            report = self.reports[i]
            assert report is not None
            if self._text_only(i):
                _show_merged(merged, plain)
                print(f"Out[{label}]: {report['repr']}")
                continue
            block = as_html(self._data(i))
            if block is not None:
                merged.append(f"<div class='mgpu-rank-label'>{html.escape(label)}</div>{block}")
                plain.append(f"[{label}]\n{self._data(i).get('text/plain', '')}")
                continue
            _show_merged(merged, plain)
            if paged:
                if (ranks, i) == rich[0]:
                    self._show_pages(rich)
                continue
            display(
                {"text/plain": f"[{label}]", "text/html": f"<div class='mgpu-rank-label'>{html.escape(label)}</div>"},
                raw=True,
            )
            if self._travelled(i):
                display(self[i])
            else:
                display(report["data"], raw=True, metadata=report.get("metadata") or {})
        _show_merged(merged, plain)

    def _show_pages(self, rich: list[tuple[list[int], int]]) -> None:
        """Every value the front end draws itself, equal ones grouped, in one paged output."""
        from IPython.display import display

        from jupyter_mgpu.session.value_pages import ValuePages, grouped

        items = [(ranks, self._data(i), dict((self.reports[i] or {}).get("metadata") or {})) for ranks, i in rich]
        display(ValuePages(grouped(items), rank_label).widget)

    def __repr__(self) -> str:
        return "\n".join(
            f"Out[{rank_label(ranks)}]: {self.reports[i]['repr']}"  # type: ignore[index]
            for ranks, i in self.groups()
        )
