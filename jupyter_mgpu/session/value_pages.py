"""A cell's values that the front end draws itself (plotly figures, widgets), past what one cell's outputs
can hold: every different value kept, equal ones grouped under one label, shown a page at a time.

JupyterLab folds a cell's outputs past 50, and each such value takes two (its label and itself): at 32 or
64 ranks with a figure each, most would be hidden. :class:`ValuePages` is one output instead, an
ipywidgets box: a row to step through the pages (◀, a list naming each page's ranks, ▶) over an output
area holding :data:`PER_PAGE` labelled values. ``session/cell_values.py`` uses it.
"""

from __future__ import annotations

import html
import json
from typing import Any

PER_PAGE = 4  # labelled values on one page: a figure is ~450 px tall, four fill a screen and a half


def grouped(
    items: list[tuple[list[int], dict[str, Any], dict[str, Any]]],
) -> list[tuple[list[int], dict[str, Any], dict[str, Any]]]:
    """``(ranks, data, metadata)`` with equal outputs merged (compared as shown: a figure's HTML, which holds a
    random element id, left out when it also has a JSON form), in the order of their first rank."""
    out: dict[str, tuple[list[int], dict[str, Any], dict[str, Any]]] = {}
    for ranks, data, metadata in items:
        shown = {k: v for k, v in data.items() if not (k == "text/html" and any(m.endswith("json") for m in data))}
        key = json.dumps(shown, sort_keys=True, default=repr)
        if key in out:
            out[key][0].extend(ranks)
        else:
            out[key] = (list(ranks), data, metadata)
    return list(out.values())


class ValuePages:
    """Every group's value, :data:`PER_PAGE` to a page, in one ipywidgets output (``.widget``)."""

    def __init__(self, groups: list[tuple[list[int], dict[str, Any], dict[str, Any]]], label: Any) -> None:
        import ipywidgets as w

        self.groups = groups
        self.label = label  # ``rank_label(ranks)``: ``ranks 0–3``
        self.pages = [groups[i : i + PER_PAGE] for i in range(0, len(groups), PER_PAGE)]
        names = [", ".join(label(ranks) for ranks, _, _ in page) for page in self.pages]
        options = [(f"{n + 1}/{len(self.pages)}: {_short(name)}", n) for n, name in enumerate(names)]
        self.choice = w.Dropdown(options=options, value=0, layout=w.Layout(width="auto", max_width="70%"))
        self.back = w.Button(icon="chevron-left", tooltip="previous page", layout=w.Layout(width="32px"))
        self.forward = w.Button(icon="chevron-right", tooltip="next page", layout=w.Layout(width="32px"))
        ranks = sum(len(r) for r, _, _ in groups)
        said = w.HTML(f"{len(groups)} different values on {ranks} ranks, {PER_PAGE} a page")
        self.output = w.Output()
        self.back.on_click(lambda _: self.turn(-1))
        self.forward.on_click(lambda _: self.turn(1))
        self.choice.observe(lambda change: self.show(change["new"]), names="value")
        bar = w.HBox([self.back, self.choice, self.forward, said], layout=w.Layout(align_items="center"))
        self.widget = w.VBox([bar, self.output], layout=w.Layout(max_width="100%"))
        self.show(0)

    def turn(self, step: int) -> None:
        """The page ``step`` pages on (within the first and the last)."""
        self.choice.value = max(0, min(len(self.pages) - 1, self.choice.value + step))

    def show(self, n: int) -> None:
        """Fill the output area with page ``n``: each group's label, then its value as the rank sent it."""
        outputs: list[dict[str, Any]] = []
        for ranks, data, metadata in self.pages[n]:
            name = self.label(ranks)
            head = {"text/plain": f"[{name}]", "text/html": f"<div class='mgpu-rank-label'>{html.escape(name)}</div>"}
            outputs.append({"output_type": "display_data", "data": head, "metadata": {}})
            outputs.append({"output_type": "display_data", "data": data, "metadata": metadata})
        self.output.outputs = tuple(outputs)
        self.back.disabled = n == 0
        self.forward.disabled = n == len(self.pages) - 1
        if self.choice.value != n:
            self.choice.value = n


def _short(names: str, most: int = 60) -> str:
    return names if len(names) <= most else names[: most - 1] + "…"
