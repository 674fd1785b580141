"""Where a pipeline stage's time went in one training step: computing, the bubble, or everything else.

Read off the times the ranks recorded (``strategies/pp.py``). Each box is one ``forward(mb)`` or
``backward(mb)`` of one stage: ``[stage, kind, mb, start, end, wait]`` (kind 0 forward, 1 backward;
seconds from the step's start; ``wait`` the seconds inside the box its thread was not running: waiting
for a core or the GIL; 0 on a GPU). A stage *computed* for ``end − start − wait`` of each box.

A box can run once the stage's previous box is done and its input exists: the activation of the same
micro-batch from the stage before (a forward), the gradient from the stage after (a backward). Chained
through these dependencies, the boxes' measured compute times give the step's *critical path*: the
longest run of work that had to happen one piece after another. No run of these boxes in each
stage's order could be shorter, even with instant messages and a core for every stage. So per stage:

* **busy** — its own compute;
* **bubble** = critical path − busy: time the stage must wait because the work it depends on (a
  stage before it filling the pipeline, a stage after it draining it) is still being computed. This is
  what (p−1)/(m+p−1) predicts, the share of ``busy + bubble``, when the stages are equally heavy;
* **other** = step wall time − critical path: what the step took beyond its dependent work, the same
  for every stage: sends and receives, the schedule's own Python, and waiting for a core (``wait``,
  and a woken rank whose core is busy). It delays every stage, since each waits on the others.

busy + bubble + other is the step's wall time, stage by stage. The ranks must share one clock (one host).
"""

from __future__ import annotations

from typing import Any


def _producer(box: list[Any], stages: int) -> tuple[int, int, int] | None:
    """The (stage, kind, mb) whose output this box needs, or None (the first stage's forwards)."""
    s, kind, mb = int(box[0]), int(box[1]), int(box[2])
    if kind == 0:
        return (s - 1, 0, mb) if s > 0 else None
    return (s + 1, 1, mb) if s < stages - 1 else (s, 0, mb)


def compute_time(box: list[Any]) -> float:
    """Seconds the box's stage computed: its wall time less the time its thread waited for a core."""
    dur = max(0.0, float(box[4]) - float(box[3]))
    return dur - min(dur, max(0.0, float(box[5]) if len(box) > 5 else 0.0))


def critical_path(boxes: list[list[Any]], stages: int) -> float:
    """Seconds of the longest chain of dependent boxes (each stage's order as it ran, and its inputs)."""
    by_key = {(int(b[0]), int(b[1]), int(b[2])): b for b in boxes}
    prev: dict[int, list[Any]] = {}
    last: dict[int, list[Any]] = {}
    order = sorted(boxes, key=lambda b: (float(b[3]), float(b[4])))
    for b in order:
        if int(b[0]) in last:
            prev[id(b)] = last[int(b[0])]
        last[int(b[0])] = b
    finish: dict[int, float] = {}
    for b in order:  # started in time order: what a box waited for started before it
        key = _producer(b, stages)
        deps = [d for d in (prev.get(id(b)), by_key.get(key) if key else None) if d is not None and d is not b]
        finish[id(b)] = max((finish.get(id(d), 0.0) for d in deps), default=0.0) + compute_time(b)
    return max(finish.values(), default=0.0)


def split_step(boxes: list[list[Any]], stages: int) -> dict[str, Any]:
    """One step, per stage in seconds: ``busy``, ``bubble``, ``other`` (adding up to ``span``), and ``critical``."""
    span = max((float(b[4]) for b in boxes), default=0.0)
    busy = [0.0] * stages
    for b in boxes:
        if 0 <= int(b[0]) < stages:
            busy[int(b[0])] += compute_time(b)
    critical = min(span, max([critical_path(boxes, stages), *busy]))
    return {
        "span": span,
        "critical": critical,
        "busy": busy,
        "bubble": [critical - x for x in busy],
        "other": [span - critical] * stages,
    }
