"""A plotly figure inside a widget box that a kernel thread redraws: the live plots' one way to the page.

Each :meth:`LiveFigure.redraw` replaces an ``ipywidgets.Output``'s outputs with the whole figure as plotly's
mime output, which ipywidgets' own output model redraws on every change and JupyterLab's plotly mime renderer
draws. Not a plotly ``FigureWidget``: plotly 6+ makes that an anywidget whose view reads its state once, when
drawn, and whose edits are deltas; anywidget 0.11 holds a new model's messages until plotly's 5 MB module has
loaded (outside the chain that makes a view wait for its model's state) and drops them all if that takes over
2 s, so a live plot made on a loaded machine was drawn blank and never updated (notebook 06's DDP plot, about
1 run in 3). Here every message carries the whole figure: a view made at any time, or a message lost, costs
nothing the next redraw does not mend.
"""

from __future__ import annotations

import json
from typing import Any

import ipywidgets

MIME = "application/vnd.plotly.v1+json"


class LiveFigure(ipywidgets.Output):
    """Shows ``figure`` (a plotly ``go.Figure``) and redraws it whole on :meth:`redraw`; edit ``figure`` freely
    in between (callers skip a redraw when nothing changed). A figure with a height is held at it while a redraw
    is drawn (plotly's renderer draws a new view 15 px taller for a moment, then fits it): the page does not jump."""

    def __init__(self, figure: Any, label: str = "plotly figure"):
        height = figure.layout.height
        held = {"height": f"{height}px", "overflow": "hidden"} if height else {}
        super().__init__(layout=ipywidgets.Layout(max_width="100%", **held))
        self.figure = figure
        self.label = label
        self.redraw()

    def spec(self) -> dict[str, Any]:
        """The figure as plotly's mime renderer is sent it (JSON types only, as ``fig.show()`` sends it)."""
        spec: dict[str, Any] = json.loads(self.figure.to_json())
        spec["config"] = {"displaylogo": False}
        return spec

    def redraw(self) -> None:
        """Send the whole figure as it is now to every view."""
        self.outputs = (
            {
                "output_type": "display_data",
                "data": {MIME: self.spec(), "text/plain": f"<{self.label}>"},
                "metadata": {},
            },
        )
