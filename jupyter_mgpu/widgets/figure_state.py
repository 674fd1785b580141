"""Keep a plotly ``FigureWidget``'s whole figure in the widget state its views are drawn from.

plotly 6+ sends a FigureWidget's edits (``batch_update``, ``update_layout``, ``add_traces``) as deltas that its
frontend model applies to that state (``_widget_data``, ``_widget_layout``). anywidget loads the model's module
asynchronously, and the change events that reach a model before it has loaded are dropped: a figure edited
right after it was made could be drawn with its empty initial state (notebook 06's DDP plot, drawn blank under
load). plotly resends the whole state only when the figure itself is displayed, never as a child of a box, so
every figure this package puts in a box is synced here after each edit. plotly 5's synced state is the figure's
own ``_data`` and ``_layout`` and its model is loaded before any message: nothing to do there.
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
