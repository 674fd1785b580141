"""The line that says what a wait is for (``wait_line.py``): nothing for a short wait, then the words and
the seconds, redrawn in place once a second, and gone when the wait ends; nothing outside a kernel."""

from __future__ import annotations

from displays import recorded

from jupyter_mgpu.wait_line import SAID_AFTER, WaitLine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_says_what_it_waits_for_after_two_seconds_and_the_line_goes(monkeypatch):
    shown = recorded(monkeypatch)
    line = WaitLine("starting 4 engines", live=True)
    line.clock = clock = Clock()
    line.started = clock.now
    with line:
        line.tick("0 of 4 ready")
        clock.now += SAID_AFTER - 0.1
        line.tick("1 of 4 ready")
        assert shown == []  # a short wait says nothing
        clock.now += 0.2
        line.tick("2 of 4 ready")
        line.tick("2 of 4 ready")  # the same words: not sent again
        clock.now += 1.0
        line.tick("3 of 4 ready")
    assert shown == [
        "mgpu: starting 4 engines · 2 s · 2 of 4 ready",
        "mgpu: starting 4 engines · 3 s · 3 of 4 ready",
        "",  # gone when the wait ended
    ]


def test_outside_a_kernel_nothing_is_shown(monkeypatch):
    shown = recorded(monkeypatch)
    line = WaitLine("waiting for mg.profile")  # pytest runs no kernel
    line.clock = clock = Clock()
    line.started = clock.now - 10
    line.tick()
    line.close()
    assert shown == []
