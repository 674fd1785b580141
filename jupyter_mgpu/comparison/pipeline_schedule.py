"""A pipeline schedule as the ranks really ran it: ``r.schedule("pp")`` of an ``mg.compare`` result.

The pipeline ranks record every ``forward(mb)`` and ``backward(mb)`` (with start and end times) and
every activation/gradient ``send`` and ``recv`` in the trace format of ``engine/records/trace.py``; this
module groups those events by training step into the stages × time grid of the GPipe/1F1B diagrams,
splits each stage's time into computing, the bubble and the rest (``pipeline_idle.py``) and replays
it: ``.play()`` is the player
(``widgets/pipeline_schedule.py``), ``.save_html(path)`` a page that plays without a kernel. A schedule made
while the pipeline trains follows the ranks' live trace files from a kernel thread, like ``mg.trace``.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from jupyter_mgpu.comparison.pipeline_idle import split_step
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.tracing import replay as tr

KINDS = {"forward": 0, "backward": 1}
# seconds between looks at the ranks' live files: a small model's pipeline trains 8 steps in ~0.4 s
# on two cores, and the ranks publish after every step (four files stat'ed and read: cheap)
FOLLOW_PERIOD = 0.05


def steps_of(events: list[dict[str, Any]], world_size: int) -> list[dict[str, Any]]:
    """The events per training step: boxes ``[stage, kind, mb, start, end, wait]`` and arrows, times from the step's start.

    A step's span runs from its first compute start to its last compute end over all stages. Per
    stage, ``busy``, ``bubble`` and ``other`` are seconds adding up to the span (see
    ``pipeline_idle.split_step``), ``idle`` the share of the span not computing. Arrows pair each send
    with the receive of the same micro-batch and kind on the peer: ``[from, to, kind, mb, t_send, t_recv, bytes]``.
    """
    by_step: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        by_step.setdefault(int(e["step"]), []).append(e)
    out = []
    for k in sorted(by_step):
        evs = by_step[k]
        comp = [e for e in evs if e["action"] == "compute" and "start" in e]
        if not comp:
            continue
        t0 = min(e["start"] for e in comp)
        t1 = max(e["end"] for e in comp)
        boxes = sorted(
            [
                [
                    e["rank"],
                    KINDS.get(e.get("kind", ""), 0),
                    int(e.get("mb", 0)),
                    e["start"] - t0,
                    e["end"] - t0,
                    float(e.get("wait", 0.0)),
                ]
                for e in comp
            ],
            key=lambda b: (b[3], b[0]),
        )
        recvs = {(e["rank"], e.get("peer"), e.get("kind"), e.get("mb")): e for e in evs if e["action"] == "recv"}
        arrows = []
        for e in evs:
            if e["action"] != "send" or e.get("peer") is None:
                continue
            got = recvs.get((e["peer"], e["rank"], e.get("kind"), e.get("mb")))
            if got is not None:
                arrows.append(
                    [
                        e["rank"],
                        e["peer"],
                        0 if e.get("kind") == "activation" else 1,
                        int(e.get("mb", 0)),
                        e["time"] - t0,
                        got["time"] - t0,
                        int(e.get("bytes", 0)),
                    ]
                )
        split = split_step(boxes, world_size)
        span = max(t1 - t0, 1e-9)
        out.append(
            {
                "step": k,
                "t0": t0,
                "span": span,
                "boxes": boxes,
                "arrows": arrows,
                "busy": split["busy"],
                "bubble": split["bubble"],
                "other": split["other"],
                "critical": split["critical"],
                "idle": [max(0.0, 1 - x / span) for x in split["busy"]],
            }
        )
    return out


class ScheduleTrace:
    """The recorded schedule of one pipeline strategy of a comparison (see the module docstring)."""

    def __init__(
        self,
        strategy: str,
        world_size: int,
        microbatches: int,
        schedule: str,
        timed_from: int,
        trace_id: str = "",
        expected_bubble: float | None = None,
    ):
        self.strategy, self.world_size, self.microbatches = strategy, world_size, microbatches
        self.schedule_name, self.timed_from, self.trace_id = schedule, timed_from, trace_id
        self.expected_bubble = expected_bubble
        self.events: list[dict[str, Any]] = []
        self.running = False
        self._players: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        state = "recording" if self.running else f"{len(self.steps())} steps"
        return (
            f"<ScheduleTrace {self.strategy} ({self.schedule_name}, {self.world_size} stages, "
            f"{self.microbatches} micro-batches): {state}>"
        )

    def steps(self) -> list[dict[str, Any]]:
        """Every recorded training step (see :func:`steps_of`)."""
        return steps_of(self.events, self.world_size)

    def _timed(self) -> list[dict[str, Any]]:
        """The timed steps (the ones run without the trackers), or every step when there are none."""
        return [s for s in self.steps() if s["step"] >= self.timed_from] or self.steps()

    def split(self) -> list[dict[str, float] | None]:
        """Per stage, shares of the timed steps' wall time: ``busy`` (computing), ``bubble`` (waiting for
        work it depends on that was still being computed) and ``other`` (messages, overhead, waiting for a
        core); they add up to 1. See ``comparison/pipeline_idle.py``."""
        timed = self._timed()
        wall = sum(s["span"] for s in timed)
        if not timed or wall <= 0:
            return [None] * self.world_size
        return [
            {k: sum(s[k][r] for s in timed) / wall for k in ("busy", "bubble", "other")} for r in range(self.world_size)
        ]

    def bubble(self) -> list[float | None]:
        """Per stage, the bubble as (p−1)/(m+p−1) counts it: its share of the stage's computing + bubble
        time (the waits for messages and cores left out), over the timed steps."""
        return [None if x is None else x["bubble"] / max(x["busy"] + x["bubble"], 1e-12) for x in self.split()]

    def idle(self) -> list[float | None]:
        """Per stage, the share of the timed steps' wall time it was not computing (bubble + other)."""
        return [None if x is None else x["bubble"] + x["other"] for x in self.split()]

    def data(self) -> dict[str, Any]:
        """What the player draws (``widgets/pipeline_schedule.py``)."""
        from jupyter_mgpu.widgets.pipeline_schedule import schedule_data

        return schedule_data(self)

    def _check(self, what: str) -> None:
        if not self.events and not self.running:
            raise MgpuError(f"this pipeline schedule has no events to {what}: its strategy did not train")

    def play(self, interval_ms: int = 250) -> Any:
        """The stages × time player; made while the pipeline trains, it follows the events as they come."""
        from jupyter_mgpu.widgets.pipeline_schedule import ScheduleWidget

        self._check("play")
        w = ScheduleWidget(
            data=self.data(), interval_ms=interval_ms, title=self.title(), badge=self.badge(), live=self.running
        )
        if self.running:
            self._players.append(w)
            w.playing = True
        return w

    def save_html(self, path: Any) -> str:
        """Write a standalone page (no kernel, no network) that plays this schedule; returns the path."""
        from jupyter_mgpu.widgets.pipeline_schedule import save_html

        self._check("save")
        return save_html(self.data(), path, title=self.title(), badge=self.badge())

    def title(self) -> str:
        return (
            f"{self.strategy}: {self.schedule_name.upper()} schedule, {self.world_size} stages × "
            f"{self.microbatches} micro-batches"
        )

    def badge(self) -> str:
        return "live: following the ranks" if self.running else "replay of the ranks' real events"

    def _repr_html_(self) -> str:
        from jupyter_mgpu.widgets.pipeline_schedule import static_svg

        if not self.events:
            return f"<pre>{self!r}</pre>"
        return f"<div class='mgpu-schedule-static'><pre>{self!r}</pre>{static_svg(self.data())}</div>"

    # -- live -------------------------------------------------------------------------------
    def follow(self, rundir: str) -> None:
        """Follow the ranks' live trace files (``<rundir>/trace/rank<r>.jsonl``) until :meth:`finish`."""
        self.running = True
        self._thread = threading.Thread(target=self._follow, args=(rundir,), name="mgpu-schedule-follower", daemon=True)
        self._thread.start()

    def _follow(self, rundir: str) -> None:
        folder = os.path.join(rundir, "trace")
        seen: dict[int, int] = {}
        mine: dict[int, bool] = {}
        got: list[dict[str, Any]] = []
        while not self._stop.wait(FOLLOW_PERIOD):
            grew = False
            for r in range(self.world_size):
                path = os.path.join(folder, f"rank{r}.jsonl")
                try:
                    if os.path.getsize(path) < seen.get(r, 0):  # started again by a new trace
                        seen[r] = 0
                    with open(path, "rb") as f:
                        f.seek(seen.get(r, 0))
                        chunk = f.read()
                except OSError:
                    continue
                end = chunk.rfind(b"\n") + 1
                seen[r] = seen.get(r, 0) + end
                for line in chunk[:end].splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:  # a damaged line: skip it, keep following (the final events fix it)
                        continue
                    if "trace" in rec:  # the first line names the trace the file belongs to
                        mine[r] = rec["trace"] == self.trace_id
                    elif mine.get(r):
                        rec.pop("tensors", None)
                        got.append(rec)
                        grew = True
            if grew:
                self.events = tr.merge([got])
                self._refresh()

    def finish(self, events: list[dict[str, Any]] | None) -> None:
        """Stop following; keep the ranks' complete ``events`` (when they came back)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if events is not None:
            self.events = tr.merge([events])
        self.running = False
        self._refresh()

    def _refresh(self) -> None:
        for p in list(self._players):
            try:
                with p.hold_sync():
                    p.data = self.data()
                    p.live = self.running
                    p.badge = self.badge()
                    if p.follow and self.running:
                        p.index = max(0, p.n_frames - 1)
            except Exception:  # a closed comm: keep following for the others
                pass
