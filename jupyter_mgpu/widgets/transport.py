"""The frame players' shared transport: the ES module controls (``static/transport.js``, prepended to
each player's module: two anywidget modules cannot import each other without a bundling step) and the
Python stepping rules (:class:`TransportWidget`)."""

from __future__ import annotations

import pathlib
from typing import Any

import anywidget
import traitlets

STATIC = pathlib.Path(__file__).parent / "static"


def module_source(name: str) -> str:
    """``static/transport.js`` followed by ``static/<name>``, as one ES module's source."""
    return (STATIC / "transport.js").read_text(encoding="utf-8") + "\n" + (STATIC / name).read_text(encoding="utf-8")


class TransportWidget(anywidget.AnyWidget):
    """The Python side of the shared transport: a frame ``index`` that ``step``/``play``/``pause`` move.

    Subclasses give their ES module (``_esm``) and how many frames they have (``n_frames``); keeping the
    stepping rules here means the three players stop, loop and restart the same way.
    """

    index = traitlets.Int(0).tag(sync=True)
    playing = traitlets.Bool(False).tag(sync=True)
    loop = traitlets.Bool(False).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    badge = traitlets.Unicode("").tag(sync=True)

    @property
    def n_frames(self) -> int:
        raise NotImplementedError

    @traitlets.validate("index")
    def _clamp(self, proposal: dict[str, Any]) -> int:
        return max(0, min(int(proposal["value"]), max(0, self.n_frames - 1)))

    def step(self, by: int = 1) -> int:
        """Move ``by`` frames (negative: back); stops at the ends. Returns the new index."""
        self.index = self.index + by
        if self.index >= self.n_frames - 1 and not self.loop:
            self.playing = False
        return self.index

    def play(self) -> None:
        """Start playing from the current frame (from the start when at the end)."""
        if self.index >= self.n_frames - 1:
            self.index = 0
        self.playing = True

    def pause(self) -> None:
        """Stop at the current frame."""
        self.playing = False
