"""A generic step player: a sequence of pre-rendered frames (SVG/HTML) with play, pause and step.

Shared by every animation of the project (the collectives' logical schedule, the placement replay):
the Python side renders frames, the browser side (``static/player.js``, an anywidget ES module)
only shows frame ``index`` and moves it. State lives in synced traitlets, so the player is testable
without a browser: set ``index``, call :meth:`step`, :meth:`play`, :meth:`pause`.
"""

from __future__ import annotations

import html
from typing import Any

import traitlets

from jupyter_mgpu.widgets.transport import TransportWidget, module_source


class FramePlayer(TransportWidget):
    """Shows ``frames[index]`` with « ‹ ▶/|| › » controls and a slider; ``badge`` labels what it is.

    ``captions[i]`` is shown above frame i unless ``show_captions`` is off (frames that draw their own).
    """

    _esm = module_source("player.js")  # the shared transport controls, then the frame player
    frames = traitlets.List(traitlets.Unicode(), default_value=[]).tag(sync=True)
    captions = traitlets.List(traitlets.Unicode(), default_value=[]).tag(sync=True)
    interval_ms = traitlets.Int(900).tag(sync=True)
    show_captions = traitlets.Bool(True).tag(sync=True)

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
        if not frames:
            raise ValueError("a player needs at least one frame")
        captions = list(captions) if captions is not None else [""] * len(frames)
        if len(captions) != len(frames):
            raise ValueError(f"{len(frames)} frames but {len(captions)} captions")
        super().__init__(
            frames=list(frames), captions=captions, title=title, badge=badge, interval_ms=int(interval_ms), **kwargs
        )

    @property
    def n_frames(self) -> int:
        return len(self.frames)

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
