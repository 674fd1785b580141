"""``with mg.trace() as t:`` — record what the ranks really do, then replay it.

Inside the block every traced op (scatter, gather, redistribute, every matmul strategy, every
collective) records its events on each rank (``engine/records/trace.py``). When the block ends the ranks'
events are merged into one timeline, ``t.events``: dicts with ``rank``, ``step``, ``action``
(hold, send, recv, compute, reduce, free), ``blocks`` (tensor, global index box), ``bytes``, ``time``
(and ``op``, ``label``, ``peer``). ``t.play()`` is the animated replay, ``t.save_html(path)`` a page
that plays without a kernel, ``t.final_placement()`` what the replay says each rank holds at the end.
``t.frames()`` are the player's steps (``tracing.replay.steps``: the (op, step)s that change
something); the repr, the player's badge and ``t.summary()`` count both the events and those steps.

Live mode: the ranks also append each op's events to ``<rundir>/trace/rank<r>.jsonl``; a player made
while the block is still running follows those files from a kernel thread (like the telemetry).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from typing import Any

from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.tracing import replay as tr

_ids = itertools.count(1)


class Trace:
    """The events of one ``mg.trace()`` block (filled in when the block ends)."""

    def __init__(self, session: Any, live: bool):
        self.session = session
        self.world_size = session.world_size
        self.trace_id = f"trace{session.id}.{next(_ids)}"
        self.live = live
        self.running = False
        self.events: list[dict[str, Any]] = []
        self.tensors: dict[str, dict[str, Any]] = {}
        self._players: list[Any] = []
        self._follower: threading.Thread | None = None
        self._stop = threading.Event()
        self.samples: list[dict[str, Any]] = []
        self._t0 = 0.0

    # -- the block ------------------------------------------------------------------------
    def __enter__(self) -> Trace:
        self.session.check_alive()
        if self.session.active_trace is not None:
            raise MgpuError("a trace is already recording in this session; end that `with mg.trace()` block first")
        if self.events or self._t0:
            raise MgpuError("this trace was already recorded; start a new one with `with mg.trace() as t:`")
        self.session.active_trace = self
        self.session.run(etrace.start, self.trace_id, self.live, label="trace start")
        self._t0 = time.time()
        self.running = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.running = False
        self.session.active_trace = None
        self._stop.set()
        if self._follower is not None:
            self._follower.join(timeout=2)
        try:
            if self.session.alive:
                parts = self.session.run(etrace.stop, label="trace stop")
                self._collect(parts)
                self.samples = self._telemetry()
        finally:
            for p in self._players:
                self._finish(p)

    def _collect(self, parts: list[dict[str, Any]]) -> None:
        for part in parts:
            self.tensors.update(part["tensors"])
        self.events = tr.merge(part["events"] for part in parts)

    def _telemetry(self) -> list[dict[str, Any]]:
        """The memory samples the ranks' samplers published while the block ran (none when telemetry is off)."""
        try:
            from jupyter_mgpu.monitoring.memory_monitor import memory_history

            minutes = min(10.0, (time.time() - self._t0) / 60 + 0.05)
            rows = memory_history(minutes, session=self.session)
        except Exception:
            return []
        return [
            {"rank": r["rank"], "time": r["time"], "bytes": r.get("allocated_bytes") or r.get("resident_bytes") or 0}
            for r in rows
            if r.get("time", 0) >= self._t0 - 0.5
        ]

    # -- facts ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        state = "recording" if self.running else self.summary()
        ops = sorted({e["label"] for e in self.events})
        return f"<Trace {self.trace_id} on {self.world_size} ranks: {state}{'; ' + ', '.join(ops) if ops else ''}>"

    def summary(self) -> str:
        """``52 events in 3 steps (0–2)``: what the replay shows, counted as its step counter counts."""
        n = len(self.frames())
        steps = f"{n} step{'s' if n != 1 else ''}" + (f" (0–{n - 1})" if n > 1 else "")
        return f"{len(self.events)} event{'s' if len(self.events) != 1 else ''} in {steps}"

    def frames(self) -> list[list[dict[str, Any]]]:
        """The events of each step the player shows (one per (op, step) that changes something; the events
        of those that change nothing are in the step they join, so every event is in one step)."""
        return tr.step_events(self.events, self.world_size)

    def states(self) -> list[list[set[tr.Key]]]:
        """What each rank holds after each frame."""
        return tr.replay(self.frames(), self.world_size)

    def final_placement(self) -> dict[str, list[list[tuple[tuple[int, int], ...]]]]:
        """``{tensor name: [boxes rank 0 holds, ...]}`` at the end of the replay."""
        return tr.final_placement(self.states(), self.world_size)

    def memory(self) -> list[list[int]]:
        """Bytes of traced blocks each rank holds after each frame."""
        return tr.memory(self.states(), self.tensors)

    def peak_memory(self) -> list[int]:
        """Per rank, the most bytes of traced blocks it held at once."""
        mem = self.memory()
        return [max((m[r] for m in mem), default=0) for r in range(self.world_size)]

    def bytes_moved(self) -> list[int]:
        """Per rank, the bytes it received (recv events)."""
        out = [0] * self.world_size
        for e in self.events:
            if e["action"] == "recv":
                out[e["rank"]] += e["bytes"]
        return out

    def _check_events(self, what: str) -> None:
        if self.running and not self.live:
            raise MgpuError(f"the trace is still recording; {what} after the `with mg.trace()` block ends")
        if not self.events and not self.running:
            raise MgpuError(
                f"this trace has no events to {what.split()[0]}: run a traced op (mg.matmul, scatter, "
                "gather, redistribute, mg.collective) inside the `with mg.trace()` block"
            )

    # -- pictures -------------------------------------------------------------------------
    def data(self) -> dict[str, Any]:
        """The compact data the player draws (see ``widgets.placement_data``)."""
        from jupyter_mgpu.widgets.placement_data import trace_data
        from jupyter_mgpu.widgets.rank_names import rank_names

        data = trace_data(self.events, self.tensors, self.world_size, self.samples)
        names = rank_names(self.world_size)
        if names and data:  # across hosts the player names each rank's host:kind:index
            data["rank_names"] = names
        return data

    def play(self, interval_ms: int = 600) -> Any:
        """The animated replay (a widget). Made inside the block, it follows the events as they arrive."""
        from jupyter_mgpu.widgets.placement import PlacementWidget

        self._check_events("play it")
        p = PlacementWidget(
            data=self.data() if self.events else {},
            mode="player",
            interval_ms=interval_ms,
            title=self._title(),
            badge=self._badge(),
            live=self.running,
        )
        if self.running:
            self._players.append(p)
            p.playing = True
            self._start_follower()
        return p

    def save_html(self, path: Any) -> str:
        """Write a standalone page (no kernel, no network) that plays this trace; returns the path."""
        from jupyter_mgpu.widgets.placement import save_html

        self._check_events("save it")
        return save_html(self.data(), path, title=self._title(), badge=self._badge())

    def _title(self) -> str:
        ops = ", ".join(dict.fromkeys(e["label"] for e in self.events))
        return f"trace of {ops}" if ops else "trace: waiting for the first events"

    def _badge(self) -> str:
        live = "live: following the ranks" if self.running else f"replay of real events: {self.summary()}"
        return f"{live}, {self.world_size} ranks"

    def _repr_html_(self) -> str:
        from jupyter_mgpu.widgets.placement_svg import frame_svg

        if not self.events:
            return f"<pre>{self!r}</pre>"
        return f"<div class='mgpu-placement-static'><pre>{self!r}</pre>{frame_svg(self.data(), -1)}</div>"

    # -- live -----------------------------------------------------------------------------
    def _start_follower(self) -> None:
        if self._follower is not None:
            return
        self._follower = threading.Thread(target=self._follow, name="mgpu-trace-follower", daemon=True)
        self._follower.start()

    def _follow(self) -> None:
        folder = os.path.join(self.session.runtime_dir, "trace")
        seen: dict[int, int] = {}
        events: list[dict[str, Any]] = []
        while not self._stop.wait(0.2):
            grew = False
            for r in range(self.world_size):
                path = os.path.join(folder, f"rank{r}.jsonl")
                try:
                    with open(path, encoding="utf-8") as f:
                        f.seek(seen.get(r, 0))
                        chunk = f.read()
                except OSError:
                    continue
                end = chunk.rfind("\n") + 1  # only whole lines
                seen[r] = seen.get(r, 0) + len(chunk[:end].encode("utf-8"))
                for line in chunk[:end].splitlines():
                    rec = json.loads(line)
                    if "trace" in rec:
                        if rec["trace"] != self.trace_id:
                            break
                        continue
                    self.tensors.update(rec.pop("tensors", {}))
                    events.append(rec)
                    grew = True
            if grew:
                self.events = tr.merge([events])
                for p in self._players:
                    self._refresh(p)

    def _refresh(self, player: Any) -> None:
        if self.events:
            with player.hold_sync():
                player.data = self.data()
                player.title = self._title()
                if player.follow and player.live:
                    player.index = player.n_frames - 1

    def _finish(self, player: Any) -> None:
        """The block ended: the player stops following and shows the full replay at its last step."""
        with player.hold_sync():
            player.live = False
            player.playing = False
            if self.events:
                player.data = self.data()
            player.title = self._title()
            player.badge = self._badge()
            player.index = max(0, player.n_frames - 1)


def trace(session: Any = None, live: bool = True) -> Trace:
    """Record the real events of the ops run inside ``with mg.trace() as t:`` (see :class:`Trace`)."""
    s = session or sessmod.current()
    s.check_alive()
    return Trace(s, live)


def show(tensor: Any, dims: Any = None, text: bool = False) -> Any:
    """The placement view of a DistTensor, a DTensor handle (``mg.from_dtensor``) or a DTensor layout
    (``mgpu.show(dt)`` in a cell): blocks coloured by the ranks that hold them, replicas as one block
    held by several ranks, Partial pieces hatched; ``dims``: the two dims to draw. ``text=True`` gives
    the plain-text picture that torch's ``visualize_sharding`` prints (no rich or tabulate needed)."""
    from jupyter_mgpu.layout.dtensor_layout import DTensorLayout
    from jupyter_mgpu.tensors.dist_tensor import DistTensor
    from jupyter_mgpu.tensors.dtensor_handle import DTensorHandle
    from jupyter_mgpu.widgets.placement import layout_view, placement_view

    if isinstance(tensor, DTensorHandle):
        layout, world, summary = tensor.layout, tensor.world_size, repr(tensor)
    elif isinstance(tensor, DTensorLayout):
        layout, world, summary = tensor, max(tensor.mesh.ranks) + 1, tensor.label
    elif isinstance(tensor, DistTensor):
        if text:
            tensor.check()
            return TextPicture(repr(tensor) + "\n" + text_of_table(tensor))
        return placement_view(tensor, dims)
    else:
        raise MgpuError(
            f"mg.show needs a DistTensor or a DTensor handle (mg.from_dtensor('name')), got {type(tensor).__name__}"
        )
    if text:
        return TextPicture(summary + "\n" + layout.text())
    return layout_view(layout, world, summary, dims)


class TextPicture(str):
    """A plain-text picture that shows as itself (no quotes) as a cell's value or in a terminal."""

    def __repr__(self) -> str:
        return str(self)


def text_of_table(tensor: Any) -> str:
    """The text picture of a DistTensor's own split (``numpy.array_split`` pieces, drawn as torch would)."""
    from jupyter_mgpu.layout import mesh_text

    rows = [(s.rank, s.ranges) for s in tensor.table]
    return mesh_text.render_pieces(tensor.shape, rows, f"tensor {tensor.shape}: {tensor.placement.label}")
