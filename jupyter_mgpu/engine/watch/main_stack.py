"""The main thread's stack as plain facts for another thread: each frame's code, line and, inside an import,
the module being loaded, innermost first, with no frame object kept.

A thread that holds another thread's frame keeps the locals of a function that returns meanwhile alive
(CPython moves them into the frame object). The telemetry sampler reads the rank's stack ten times a second
and names its lines (the file system is asked, and a loaded machine can pause the thread anywhere); holding
the frames through that kept a buffer the rank's code had freed allocated a moment longer, and
``mg.matmul``'s measured peak counted it (CI: 320 KiB over the prediction). Here the frames are read in one
pass with nothing in it that waits, one at a time, and let go before anything slower runs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import NamedTuple


class StackLine(NamedTuple):
    """One frame, read: its code, where in it it is, and the module it imports if it is importlib's loader."""

    code: CodeType
    lasti: (
        int  # the offset of its current instruction (``frame.f_lasti``): cheap to read, turned into a line when asked
    )
    importing: str | None = None

    @property
    def line(self) -> int:
        """The line it is at (most lines of a stack are never named: worked out only for those that are)."""
        if self.lasti < 0:
            return self.code.co_firstlineno
        for start, end, line in self.code.co_lines():
            if start <= self.lasti < end:
                return line or 0
        return 0


def lines_of(frame: FrameType | None) -> Iterator[StackLine]:
    """``frame`` and its callers, innermost first, read as they are reached (for a thread's own stack)."""
    while frame is not None:
        code, name = frame.f_code, None
        if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib"):
            found = frame.f_locals.get("name")  # importlib's locals only: module names and specs
            name = found if isinstance(found, str) else None
        yield StackLine(code, frame.f_lasti, name)
        frame = frame.f_back


def main_stack() -> tuple[StackLine, ...]:
    """The main thread's stack now, innermost first (empty when it has none)."""
    ident = threading.main_thread().ident
    return tuple(lines_of(sys._current_frames().get(ident))) if ident is not None else ()  # one frame held at a time


def main_code() -> CodeType | None:
    """The code the main thread runs now (its innermost frame's), or None when it has none."""
    ident = threading.main_thread().ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    return None if frame is None else frame.f_code
