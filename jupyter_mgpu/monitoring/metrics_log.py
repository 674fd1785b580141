"""Metrics logged with ``mgpu.log`` on the ranks, read in the controller while cells still run.

Each rank appends JSON lines to ``<rundir>/metrics/rank<r>.jsonl`` (see ``engine/records/training.py``);
:class:`MetricsReader` follows those files incrementally (complete lines only), so a busy engine
never has to answer anything. ``mg.metrics()`` returns every record so far; ``mg.metrics_plot()``
is the live plot (``widgets/metrics_plot.py``).
"""

from __future__ import annotations

import glob
import json
import os
import threading
from typing import Any

from jupyter_mgpu.engine.records import training
from jupyter_mgpu.session import lifecycle as sessmod

RESERVED = ("rank", "step", "time")


class MetricRecords(list[dict[str, Any]]):
    """A list of ``{"rank", "step", "time", <metric>: value}`` dicts, oldest first; ``.df`` is a DataFrame."""

    @property
    def df(self) -> Any:
        """The records as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(list(self), columns=_columns(self))

    def names(self) -> list[str]:
        """The metric names logged with numbers, in first-seen order."""
        seen: dict[str, None] = {}
        for r in self:
            for k, v in r.items():
                if k not in RESERVED and isinstance(v, (int, float)) and not isinstance(v, bool):
                    seen.setdefault(k, None)
        return list(seen)

    def mean(self, name: str) -> list[tuple[int, float]]:
        """``(step, value averaged over the ranks that logged it at that step)``, by step."""
        sums: dict[int, list[float]] = {}
        for r in self:
            v = r.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                acc = sums.setdefault(int(r["step"]), [0.0, 0])
                acc[0] += float(v)
                acc[1] += 1
        return [(s, acc[0] / acc[1]) for s, acc in sorted(sums.items())]

    def _repr_html_(self) -> str | None:
        try:
            html: str | None = self.df.tail(20)._repr_html_()
            return html
        except ImportError:
            return None


def _columns(records: list[dict[str, Any]]) -> list[str]:
    cols = list(RESERVED)
    for r in records:
        for k in r:
            if k not in cols:
                cols.append(k)
    return cols


class MetricsReader:
    """Follows every rank's metrics file from where it last stopped; thread-safe."""

    def __init__(self, rundir: str):
        self.folder = os.path.join(rundir, training.METRICS_DIR)
        self._offsets: dict[str, int] = {}
        self._records: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def poll(self) -> int:
        """Read what the ranks appended since the last poll; returns the number of new records."""
        new = 0
        with self._lock:
            paths = set(glob.glob(os.path.join(self.folder, "rank*.jsonl")))
            for gone in set(self._offsets) - paths:  # reset by mg.clear_metrics()
                self._offsets.pop(gone, None)
                self._records.pop(gone, None)
            for path in sorted(paths):
                offset = self._offsets.get(path, 0)
                try:
                    size = os.path.getsize(path)
                    if size < offset:  # the file was started again
                        offset, self._records[path] = 0, []
                    if size == offset:
                        continue
                    with open(path, "rb") as f:
                        f.seek(offset)
                        chunk = f.read(size - offset)
                except FileNotFoundError:
                    continue
                end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next poll
                got = self._records.setdefault(path, [])
                for line in chunk[:end].splitlines():
                    try:
                        got.append(json.loads(line))
                        new += 1
                    except ValueError:
                        pass
                self._offsets[path] = offset + end
        return new

    def records(self) -> MetricRecords:
        """Every record read so far, ordered by time."""
        with self._lock:
            out = [r for recs in self._records.values() for r in recs]
        out.sort(key=lambda r: (r.get("time", 0), r.get("rank", 0)))
        return MetricRecords(out)


def metrics(session: Any = None) -> MetricRecords:
    """Every metric the ranks logged with ``mgpu.log`` (also while a cell is still running).

    A list of dicts with ``rank``, ``step``, ``time`` and the metrics, oldest first; ``.df`` gives a
    pandas DataFrame. ``mg.clear_metrics()`` starts a new record.
    """
    s = session or sessmod.current()
    reader = MetricsReader(s.runtime_dir)
    reader.poll()
    return reader.records()


def clear_metrics(session: Any = None) -> None:
    """Forget the logged metrics of every rank and restart their step counters."""
    s = session or sessmod.current()
    s.check_alive()
    s.run(training.reset_metrics, label="clear metrics")
