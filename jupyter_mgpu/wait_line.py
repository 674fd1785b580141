"""A line under the running cell that says what a wait is for, once it has lasted :data:`SAID_AFTER` seconds,
and goes when the wait ends — like the live status line of a stuck cell, for every other wait: engines
starting, a library call on the ranks (the profiler's first start, collecting a profile, a first import).

Only in a front end that redraws output in place (a kernel); elsewhere it says nothing. Updated from the
wait loop itself (the main thread), at most once a second.
"""

from __future__ import annotations

import time
from typing import Any

SAID_AFTER = 2.0  # a wait shorter than this says nothing


def in_kernel() -> bool:
    """Whether this runs in a kernel whose front end redraws a displayed output in place."""
    try:
        from IPython import get_ipython

        return getattr(get_ipython(), "kernel", None) is not None
    except Exception:
        return False


class WaitLine:
    """``with WaitLine("starting 4 engines") as line: ... line.tick("2 of 4 ready")`` in a wait loop shows
    ``mgpu: starting 4 engines · 3 s · 2 of 4 ready`` once the wait passed :data:`SAID_AFTER` s."""

    def __init__(self, what: str, after: float = SAID_AFTER, live: bool | None = None) -> None:
        self.what = what
        self.after = after
        self.live = in_kernel() if live is None else live
        self.clock = time.monotonic
        self.started = self.clock()
        self._handle: Any = None
        self._shown = ""

    def text(self, detail: str = "") -> str:
        """The line as it reads now."""
        seconds = self.clock() - self.started
        return f"mgpu: {self.what} · {seconds:.0f} s" + (f" · {detail}" if detail else "")

    def tick(self, detail: str = "") -> None:
        """Show or update the line if the wait has lasted long enough (cheap to call on every loop)."""
        if self.live and self.clock() - self.started >= self.after:
            self.show(self.text(detail))

    def show(self, text: str) -> None:
        """Show ``text`` as the line now (in place of what it said)."""
        if not self.live or text == self._shown:  # the seconds change once a second: so does the line
            return
        self._shown = text
        from IPython.display import display

        bundle = {"text/plain": text}
        try:
            if self._handle is None:
                self._handle = display(bundle, raw=True, display_id=True)
            else:
                self._handle.update(bundle, raw=True)
        except Exception:  # a closed front end: the wait goes on without its line
            self.live = False

    def close(self) -> None:
        """The wait is over: the line goes (an empty output leaves no gap)."""
        if self._handle is not None:
            try:
                self._handle.update({"text/plain": ""}, raw=True)
            except Exception:
                pass
            self._handle, self._shown = None, ""

    def __enter__(self) -> WaitLine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
