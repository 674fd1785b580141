"""A live figure sends its whole figure on each redraw, as plotly's mime output in an Output
widget's state: a view drawn at any time shows every edit, however the figure was edited."""

from __future__ import annotations

import pytest

from jupyter_mgpu.widgets.live_figure import MIME, LiveFigure

go = pytest.importorskip("plotly.graph_objects")


def _shown(view: LiveFigure) -> dict:
    (output,) = view.outputs
    assert output["output_type"] == "display_data"
    return output["data"][MIME]


def test_each_redraw_sends_the_whole_edited_figure():
    fig = go.Figure(data=[go.Scatter(x=[], y=[], name="rank 0")], layout={"title": "loss", "height": 300})
    view = LiveFigure(fig, label="live plot of loss")
    assert (view.layout.height, view.layout.overflow) == ("300px", "hidden")  # held while a redraw is drawn
    assert _shown(view)["data"][0]["x"] == [] and _shown(view)["layout"]["title"]["text"] == "loss"
    fig.data[0].x, fig.data[0].y = [1, 2, 3], [0.5, 0.25, 0.125]
    fig.update_layout(yaxis_title="loss")
    view.redraw()
    spec = _shown(view)
    assert [(t["x"], t["y"], t["name"]) for t in spec["data"]] == [([1, 2, 3], [0.5, 0.25, 0.125], "rank 0")]
    assert spec["layout"]["yaxis"]["title"]["text"] == "loss" and spec["config"] == {"displaylogo": False}
    assert view.outputs[0]["data"]["text/plain"] == "<live plot of loss>"


def test_traces_replaced_in_a_subplot_figure_are_drawn():
    """``mg.compare``'s live plot: every trace removed, the new ones added to their rows."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1)
    fig.add_trace(go.Bar(x=["a"], y=[1], name="old"), row=1, col=1)
    view = LiveFigure(fig)
    fig.data = []
    fig.add_traces(
        [go.Bar(x=["a", "b"], y=[1, 2], name="params"), go.Scatter(x=[0], y=[3], name="t")], rows=[1, 2], cols=[1, 1]
    )
    view.redraw()
    assert [(t["name"], t.get("yaxis", "y")) for t in _shown(view)["data"]] == [("params", "y"), ("t", "y2")]
