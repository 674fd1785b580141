"""Live training curves: one plotly figure per metric, a thin line per rank and a thick mean.

A background thread follows the ranks' metrics files (``monitoring.metrics_log.MetricsReader``) and redraws the
figures (``widgets/live_figure.py``) while a ``%%mgpu`` cell is still training — JupyterLab renders widget updates
from a kernel thread live. The thread stops with ``.stop()`` / ``.close()`` or when the session shuts down.
"""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets

from jupyter_mgpu.monitoring.metrics_log import MetricRecords, MetricsReader
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.live_figure import LiveFigure
from jupyter_mgpu.widgets.rank_names import rank_names, rank_title

MEAN_COLOR = "#000000"


def _figure(name: str, world_size: int) -> Any:
    import plotly.graph_objects as go

    names = rank_names(world_size)  # across hosts: "rank 2 · node2:cuda:1"
    traces = [
        go.Scatter(
            x=[],
            y=[],
            mode="lines",
            name=rank_title(r, names),
            legendgroup=f"rank {r}",
            line={"color": rank_color(r), "width": 1},
            opacity=0.7,
        )
        for r in range(world_size)
    ]
    traces.append(go.Scatter(x=[], y=[], mode="lines", name="mean over ranks", line={"color": MEAN_COLOR, "width": 3}))
    layout = go.Layout(
        title=name,
        xaxis_title="step",
        yaxis_title=name,
        height=300,
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
        template="plotly_white",
    )
    return go.Figure(data=traces, layout=layout)


class MetricsPlot(ipywidgets.VBox):
    """The live plot of ``mgpu.log`` metrics of one session (``mg.metrics_plot()``)."""

    def __init__(self, session: Any, names: Any = None, interval: float = 0.25):
        super().__init__()
        import plotly.graph_objects  # noqa: F401  (a one-time import of seconds: here, not mid-training)

        if isinstance(names, str):
            names = [names]
        self.session = session
        self.names = list(names) if names else None
        self.interval = float(interval)
        self.reader = MetricsReader(session.runtime_dir)
        self.figures: dict[str, Any] = {}  # name -> plotly go.Figure, what is drawn now
        self.views: dict[str, LiveFigure] = {}
        self._drawn: dict[str, list[tuple[list[Any], list[float]]]] = {}  # what each figure shows now
        self.status = ipywidgets.HTML("<i>waiting for mgpu.log(...) on the ranks</i>")
        self.children = (self.status,)
        self._stop = threading.Event()
        self._update_lock = threading.Lock()
        for name in self.names or []:
            self._add(name)
        self.refresh()
        session.shutdown_callbacks.append(self.stop)
        self._thread = threading.Thread(target=self._loop, name="mgpu-metrics-plot", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the background updater is still following the ranks."""
        return self._thread.is_alive()

    def _add(self, name: str) -> None:
        self.figures[name] = _figure(name, self.session.world_size)
        self.views[name] = LiveFigure(self.figures[name], label=f"live plot of {name}")
        self.children = (self.status, *self.views.values())

    def refresh(self) -> MetricRecords:
        """Read new records and redraw (the background thread calls this every ``interval`` s)."""
        with self._update_lock:
            self.reader.poll()
            records = self.reader.records()
            names = self.names or records.names()
            for name in names:
                if name not in self.figures:
                    self._add(name)
            for name in names:
                self._draw(name, records)
            self.status.value = self._status(records)
            return records

    def _status(self, records: MetricRecords) -> str:
        """The line above the figures: what they show now (never a count of records they no longer draw)."""
        if records:
            text = f"{len(records)} records, last step {max(r['step'] for r in records)}"
        else:
            text = "<i>no records: waiting for mgpu.log(...) on the ranks</i>"
        return text + ("; stopped following the ranks" if self._stop.is_set() else "")

    def _draw(self, name: str, records: MetricRecords) -> None:
        per_rank: dict[int, tuple[list[Any], list[float]]] = {r: ([], []) for r in range(self.session.world_size)}
        for rec in records:
            v = rec.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and rec.get("rank") in per_rank:
                xs, ys = per_rank[rec["rank"]]
                xs.append(rec["step"])
                ys.append(v)
        mean = records.mean(name)
        series = [*per_rank.values(), ([s for s, _ in mean], [v for _, v in mean])]
        if self._drawn.get(name) == series:  # nothing new: nothing sent, the figure not even serialised
            return
        for trace, (xs, ys) in zip(self.figures[name].data, series):
            trace.x, trace.y = xs, ys
        self.views[name].redraw()
        self._drawn[name] = series

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.session.alive:
                break
            try:
                self.refresh()
            except Exception:  # a half-written file or a closed comm: try again next tick
                pass

    def stop(self) -> None:
        """Stop following the ranks, after drawing everything they logged so far (the figures keep it);
        runs at session shutdown."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        try:
            self.refresh()  # the last records (a finished cell's all are in the files already)
        except Exception:  # files already gone or a closed comm: keep what is drawn
            pass
        try:
            self.session.shutdown_callbacks.remove(self.stop)
        except ValueError:
            pass

    def close(self) -> None:
        """Stop the updater and close the widget."""
        self.stop()
        super().close()
