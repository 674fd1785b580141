"""Pictures of an ``mg.compare`` result: the grouped-bar plot and the live panel shown while it runs.

:func:`figure` (``r.plot()``) has three rows: memory by category per strategy and rank (stacked,
with the formulas' total as a marker), the step time of each strategy (slowest rank, median of the
timed steps) and the bytes each rank hands to collectives per step (stacked by collective, with the
formulas' figure as a marker); a rank that ran out of memory is marked "OOM". :class:`CompareLive`
is what a notebook shows during ``mg.compare``: which strategy runs, the memory dashboard (each rank's
row names the strategy it is running), the plot filling in strategy by strategy, and the pipeline's
schedule player following the ranks while the pipeline trains.
"""

from __future__ import annotations

from typing import Any

import ipywidgets

from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.live_figure import LiveFigure

CATEGORY_COLORS = {
    "params": "#1f77b4",
    "grads": "#ff7f0e",
    "optimizer": "#2ca02c",
    "activations": "#d62728",
    "comm_buffers": "#9467bd",
    "temporaries": "#8c564b",
}
COLLECTIVE_COLORS = {
    "all_reduce": "#1f77b4",
    "all_gather": "#2ca02c",
    "reduce_scatter": "#d62728",
    "send": "#ff7f0e",
    "recv": "#9467bd",
    "broadcast": "#8c564b",
}
MIB = 2**20


def figure(result: Any) -> Any:
    """The comparison as a plotly figure."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=3,
        cols=1,
        vertical_spacing=0.15,
        subplot_titles=(
            "peak memory by category per rank (MiB; ◆ the formulas' total)",
            "step time (slowest rank, median of timed steps)",
            "bytes per step handed to collectives (MiB; ◆ the formulas')",
        ),
    )
    for trace in traces(result):
        fig.add_trace(trace["trace"], row=trace["row"], col=1)
    fig.update_layout(
        barmode="stack",
        height=760,
        template="plotly_white",
        legend={"orientation": "h", "y": -0.08},
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        autosize=True,
    )
    fig.update_xaxes(tickangle=-45, tickfont={"size": 10})
    fig.update_yaxes(title_text="MiB", row=1, col=1)
    fig.update_yaxes(title_text="seconds", row=2, col=1)
    fig.update_yaxes(title_text="MiB", row=3, col=1)
    return fig


def traces(result: Any) -> list[dict[str, Any]]:
    """Every trace of :func:`figure` with its row (1 memory, 2 time, 3 bytes)."""
    import plotly.graph_objects as go

    table = result.table
    expected = {(e["strategy"], e["rank"]): e for e in result.expected}
    labels = [f"{r['strategy']}·{r['rank']}" for r in table]
    ok = [r["status"] == "ok" for r in table]
    out: list[dict[str, Any]] = []
    for c, color in CATEGORY_COLORS.items():
        out.append(
            {
                "row": 1,
                "trace": go.Bar(
                    x=labels,
                    y=[(r.get(c) or 0) / MIB if good else None for r, good in zip(table, ok)],
                    name=c.replace("_", " "),
                    marker_color=color,
                    legendgroup="memory",
                ),
            }
        )
    totals = [
        sum(
            expected[(r["strategy"], r["rank"])][c]
            for c in ("params", "grads", "optimizer", "activations", "comm_buffers")
        )
        / MIB
        if (r["strategy"], r["rank"]) in expected
        else None
        for r in table
    ]
    out.append(
        {
            "row": 1,
            "trace": go.Scatter(
                x=labels,
                y=totals,
                mode="markers",
                name="formulas' total",
                marker={"symbol": "diamond", "color": "#000", "size": 9},
            ),
        }
    )
    oom = [(lab, r) for lab, r in zip(labels, table) if r["status"] != "ok"]
    if oom:
        out.append(
            {
                "row": 1,
                "trace": go.Scatter(
                    x=[lab for lab, _ in oom],
                    y=[0] * len(oom),
                    mode="text",
                    text=["OOM" if r["status"] == "oom" else r["status"] for _, r in oom],
                    textposition="top center",
                    name="failed",
                    showlegend=False,
                ),
            }
        )
    strategies = list(dict.fromkeys(r["strategy"] for r in table))
    times = {r["strategy"]: r.get("step_time") for r in table if r["status"] == "ok"}
    out.append(
        {
            "row": 2,
            "trace": go.Bar(
                x=strategies,
                y=[times.get(s) for s in strategies],
                name="step time",
                marker_color=[rank_color(i) for i in range(len(strategies))],
                showlegend=False,
            ),
        }
    )
    names = list(dict.fromkeys(c for r in table for c in (r.get("bytes_by") or {})))
    for c in names:
        out.append(
            {
                "row": 3,
                "trace": go.Bar(
                    x=labels,
                    y=[(r.get("bytes_by") or {}).get(c, 0) / MIB for r in table],
                    name=c,
                    marker_color=COLLECTIVE_COLORS.get(c, "#7f7f7f"),
                    legendgroup="bytes",
                ),
            }
        )
    out.append(
        {
            "row": 3,
            "trace": go.Scatter(
                x=labels,
                y=[
                    expected[(r["strategy"], r["rank"])]["bytes"] / MIB
                    if (r["strategy"], r["rank"]) in expected
                    else None
                    for r in table
                ],
                mode="markers",
                name="formulas' bytes",
                showlegend=False,
                marker={"symbol": "diamond", "color": "#000", "size": 9},
            ),
        }
    )
    return out


class CompareLive(ipywidgets.VBox):
    """The live view of a running ``mg.compare`` (see the module docstring)."""

    def __init__(self, result: Any, session: Any):
        super().__init__(layout=ipywidgets.Layout(max_width="100%", overflow_x="hidden"))
        self.result, self.session = result, session
        self.status = ipywidgets.HTML(
            f"<b>mg.compare</b>: {', '.join(result.plan.strategies)} on {session.world_size} ranks — starting"
        )
        fig = figure(result)
        fig.layout.height = 560
        self.plot = LiveFigure(fig, label="mg.compare's plot")
        board = []
        try:
            from jupyter_mgpu.widgets.memory_dashboard import dashboard

            board = [dashboard(session)]
        except Exception:  # a session without telemetry still compares
            pass
        self.player_box = ipywidgets.VBox()
        self.children = (self.status, *board, self.player_box, self.plot)

    def show(self) -> None:
        from IPython.display import display

        display(self)

    def started(self, strategy: str, schedule: Any) -> None:
        """``strategy`` starts on the ranks; a pipeline shows its schedule player while it trains."""
        done = [s for s in self.result.plan.strategies if s in self.result.rows]
        self.status.value = (
            f"<b>mg.compare</b>: running <b>{strategy}</b> ({len(done) + 1} of "
            f"{len(self.result.plan.strategies)}) on {self.session.world_size} ranks"
        )
        if schedule is not None:
            self.player_box.children = (schedule.play(interval_ms=120),)

    def finished(self, strategy: str) -> None:
        """Redraw the plot with ``strategy``'s rows."""
        new = traces(self.result)
        fig = self.plot.figure
        fig.data = []
        fig.add_traces([t["trace"] for t in new], rows=[t["row"] for t in new], cols=[1] * len(new))
        self.plot.redraw()

    def done(self) -> None:
        ran = ", ".join(f"{s} {'ok' if self.result.ok(s) else 'failed'}" for s in self.result.rows)
        self.status.value = f"<b>mg.compare</b> finished: {ran}"
