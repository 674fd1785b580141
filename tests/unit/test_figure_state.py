"""A FigureWidget shown inside a box keeps its whole figure in the state its views are drawn from, whichever
way it was edited (a frontend model that loaded late has dropped the deltas)."""

from __future__ import annotations

import pytest

from jupyter_mgpu.widgets.figure_state import sync_figure_state, synced_figure

go = pytest.importorskip("plotly.graph_objects")


def test_edits_by_delta_reach_the_synced_state():
    fig = go.FigureWidget(data=[go.Scatter(x=[], y=[], name="rank 0")])
    fig.update_layout(title="loss")  # a relayout delta
    with fig.batch_update():  # a restyle delta
        fig.data[0].x, fig.data[0].y = [1, 2, 3], [0.5, 0.25, 0.125]
    sync_figure_state(fig)
    data, layout = synced_figure(fig)
    assert [(list(t["x"]), list(t["y"]), t["name"]) for t in data] == [([1, 2, 3], [0.5, 0.25, 0.125], "rank 0")]
    assert layout["title"]["text"] == "loss"


def test_traces_replaced_in_a_batch_reach_the_synced_state():
    """``mg.compare``'s live plot: every trace removed, the new ones added (deleteTraces, addTraces deltas)."""
    fig = go.FigureWidget(data=[go.Bar(x=["a"], y=[1], name="old")])
    with fig.batch_update():
        fig.data = []
        fig.add_traces([go.Bar(x=["a", "b"], y=[1, 2], name="params"), go.Scatter(x=[0], y=[3], name="step time")])
    sync_figure_state(fig)
    assert [t["name"] for t in synced_figure(fig)[0]] == ["params", "step time"]
