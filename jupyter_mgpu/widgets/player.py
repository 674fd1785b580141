"""A generic step player: a sequence of frames (SVG/HTML) with play, pause and step.

Shared by every animation of the project (the collectives' logical schedule, the placement replay):
the Python side renders frames, the browser side (``static/player.js``, an anywidget ES module)
only shows frame ``index`` and moves it. State lives in synced traitlets, so the player is testable
without a browser: set ``index``, call :meth:`step`, :meth:`play`, :meth:`pause`.

Two kinds: :class:`FramePlayer` sends every frame whole (a few small frames); :class:`DiffFramePlayer`
sends the first frame in parts and, for each later frame, only the parts it changes, plus its arrows
and outlines as numbers the browser draws — frames of a schedule on 64 ranks would otherwise be
hundreds of MB of SVG that differ in a few entries each. A part may be a number: a short code of an
entry, drawn by the browser where the entry goes (``widgets/slot_codes.py``), each distinct drawing
sent once.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Protocol

import traitlets

from jupyter_mgpu.widgets.slot_codes import patch_runs
from jupyter_mgpu.widgets.transport import TransportWidget, module_source


class _StepPlayer(TransportWidget):
    """What both players share: captions, the interval, the static pictures for exported notebooks."""

    _esm = module_source("player.js")  # the shared transport controls, then the frame player
    captions = traitlets.List(traitlets.Unicode(), default_value=[]).tag(sync=True)
    interval_ms = traitlets.Int(900).tag(sync=True)
    show_captions = traitlets.Bool(True).tag(sync=True)

    @property
    def frames(self) -> Sequence[str]:
        raise NotImplementedError

    @property
    def frame(self) -> str:
        """The frame shown now."""
        return self.frames[self.index]

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The live widget, plus an HTML fallback (every step's caption and the last frame) for exports."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):
            data["text/html"] = self.summary_html()
        return bundle

    def summary_html(self) -> str:
        """Every step's caption as a list, then the last frame (what an exported notebook shows)."""
        steps = "".join(f"<li>{html.escape(c)}</li>" for c in self.captions if c)
        head = f"<div style='font:12px sans-serif;color:#555'>{html.escape(self.badge)}</div>" if self.badge else ""
        listing = f"<ol start='0' style='font:12px sans-serif'>{steps}</ol>" if steps else ""
        return f"<div class='mgpu-player-static'>{head}{listing}{self.frames[-1]}</div>"

    def static_html(self, index: int | None = None) -> str:
        """One frame as plain HTML (for exported notebooks, where widgets do not run)."""
        i = self.index if index is None else index
        head = (
            f"<div style='font:12px sans-serif;color:#555'>{html.escape(self.badge)}"
            f"{' — ' if self.badge and self.captions[i] else ''}{html.escape(self.captions[i])}</div>"
        )
        return f"<div class='mgpu-player-static'>{head}{self.frames[i]}</div>"


def _checked_captions(n: int, captions: list[str] | None) -> list[str]:
    if not n:
        raise ValueError("a player needs at least one frame")
    captions = list(captions) if captions is not None else [""] * n
    if len(captions) != n:
        raise ValueError(f"{n} frames but {len(captions)} captions")
    return captions


class FramePlayer(_StepPlayer):
    """Shows ``frames[index]`` with « ‹ ▶/|| › » controls and a slider; ``badge`` labels what it is.

    ``captions[i]`` is shown above frame i unless ``show_captions`` is off (frames that draw their own).
    """

    frames = traitlets.List(traitlets.Unicode(), default_value=[]).tag(sync=True)

    def __init__(
        self,
        frames: list[str],
        captions: list[str] | None = None,
        *,
        title: str = "",
        badge: str = "",
        interval_ms: int = 900,
        **kwargs: Any,
    ):
        captions = _checked_captions(len(frames), captions)
        super().__init__(
            frames=list(frames), captions=captions, title=title, badge=badge, interval_ms=int(interval_ms), **kwargs
        )

    @property
    def n_frames(self) -> int:
        return len(self.frames)


class FrameSeries(Protocol):
    """Frames as parts and changes (``widgets/rank_grid.py``'s ``Series``)."""

    parts: list[Any]
    patches: list[dict[int, Any]]
    marks: list[dict[str, list[Any]]]
    overlay: dict[str, Any]

    def __len__(self) -> int: ...

    def frame(self, i: int) -> str: ...


class _Frames(Sequence[str]):
    """A series' frames, each put together when asked for."""

    def __init__(self, series: FrameSeries):
        self.series = series

    def __len__(self) -> int:
        return len(self.series)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(len(self))[i]]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"frame {i} of {n}")
        return self.series.frame(i % n)


class DiffFramePlayer(_StepPlayer):
    """A player of a series whose frames carry only differences: ``parts`` (the first frame's SVG in
    pieces), ``patches[i]`` (the pieces frame i changes from frame i-1, as runs of consecutive pieces:
    ``widgets/slot_codes.py``'s ``patch_runs``), ``marks[i]`` (its arrows and
    outlines) drawn over ``parts[overlay["at"]]``; a piece that is a list is a code, a number the code
    ``overlay["codes"][number]``. ``frames`` puts any frame together in Python."""

    parts = traitlets.List(traitlets.Any(), default_value=[]).tag(sync=True)  # markup, or a code or its number
    patches = traitlets.List(traitlets.List(), default_value=[]).tag(sync=True)
    marks = traitlets.List(traitlets.Dict(), default_value=[]).tag(sync=True)
    overlay = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        series: FrameSeries,
        captions: list[str] | None = None,
        *,
        title: str = "",
        badge: str = "",
        interval_ms: int = 900,
        **kwargs: Any,
    ):
        captions = _checked_captions(len(series), captions)
        self._series = series
        super().__init__(
            parts=list(series.parts),
            patches=[patch_runs(p) for p in series.patches],
            marks=list(series.marks),
            overlay=dict(series.overlay),
            captions=captions,
            title=title,
            badge=badge,
            interval_ms=int(interval_ms),
            **kwargs,
        )

    @property
    def n_frames(self) -> int:
        return len(self.patches)

    @property
    def frames(self) -> Sequence[str]:
        return _Frames(self._series)
