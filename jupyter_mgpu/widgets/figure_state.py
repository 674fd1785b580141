"""Keep a plotly ``FigureWidget``'s whole figure in the widget state its views are drawn from.

plotly 6+ sends a FigureWidget's edits (``batch_update``, ``update_layout``, ``add_traces``) as deltas that its
frontend model applies to that state (``_widget_data``, ``_widget_layout``), and resends the whole state only when
the figure itself is displayed, never as a child of a box. So every figure this package puts in a box is synced
here after each edit: a view made later (another view, a reloaded page) is drawn whole.

Not mended here (notebook 06's DDP plot, drawn blank about 1 run in 4 under load): anywidget 0.11 holds a new
model's messages until its module has loaded, outside the chain that makes a view wait for its model's pending
state, so a view made in that time is drawn from the state the comm opened with; and it gives a model 2 s to
load (``AbortSignal.timeout(2000)`` in its ``Runtime``) while plotly's module is 5 MB, imported anew for each
figure: past that, "[anywidget] Failed to initialize model." and every later message to the model is dropped.
plotly 5's synced state is the figure's own ``_data``/``_layout``: nothing to do there.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any


def sync_figure_state(fig: Any) -> None:
    """Set ``fig``'s synced data and layout to the whole figure (sent only where they changed), as plotly's
    own display of a figure does, so that a view drawn later holds every edit even if a delta was lost."""
    if fig.has_trait("_widget_data"):
        fig._widget_layout = deepcopy(fig._layout_obj._props)
        fig._widget_data = deepcopy(fig._data)


def synced_figure(fig: Any) -> tuple[list[Any], dict[str, Any]]:
    """The traces and layout a view of ``fig`` is drawn from, as the front end is sent them."""
    names = ("_widget_data", "_widget_layout") if fig.has_trait("_widget_data") else ("_data", "_layout")
    state = fig.get_state(list(names))
    return state[names[0]], state[names[1]]
