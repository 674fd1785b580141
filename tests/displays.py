"""IPython's ``display`` recorded, for tests of what a live line or area shows without a front end: each
display and each update of a display appends the text it shows."""

from __future__ import annotations

from typing import Any

import IPython.display


def recorded(monkeypatch: Any) -> list[str]:
    """Make ``IPython.display.display`` record into the returned list (the ``text/plain`` of every display
    and update, in order), for the rest of the test."""
    shown: list[str] = []

    class Handle:
        def update(self, bundle: dict[str, Any], raw: bool = False) -> None:
            shown.append(bundle["text/plain"])

    def display(bundle: dict[str, Any], raw: bool = False, display_id: bool = False, **kw: Any) -> Handle:
        shown.append(bundle["text/plain"])
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    return shown
