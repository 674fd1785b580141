"""``%mgpu_status`` waits for a sample of every rank taken after it was asked (issue 44: notebook 12's 32 ranks
on two loaded cores were shown "starting" or "busy" from samples older than the question)."""

import time
from types import SimpleNamespace

from jupyter_mgpu.magics.session_magics import _wait_for_fresh_samples


class SlowSamplers:
    """A session whose ranks publish their first sample after ``late`` s (rank 1 never: it is dead)."""

    def __init__(self, late: float, state: str = "idle", period: float = 0.1) -> None:
        self.cluster = SimpleNamespace(spec=SimpleNamespace(telemetry_period=period))
        self.start, self.late, self.state = time.monotonic(), late, state

    def memory(self) -> list[dict]:
        new = time.monotonic() - self.start >= self.late
        return [
            {"rank": 0, "seq": 8 if new else 7, "state": self.state if new else "busy"},
            {"rank": 1, "seq": 3, "state": "dead"},
            {"rank": 2, "seq": 1 if new else None, "state": self.state if new else "starting"},
        ]


def test_status_waits_past_half_a_second_for_samplers_that_are_late():
    s = SlowSamplers(late=1.2)
    _wait_for_fresh_samples(s)
    assert [r["state"] for r in s.memory()] == ["idle", "dead", "idle"]
    assert time.monotonic() - s.start >= 1.2


def test_a_rank_busy_in_its_new_sample_is_shown_busy_after_the_settle():
    s = SlowSamplers(late=0.1, state="busy")
    t = time.monotonic()
    _wait_for_fresh_samples(s, settle=0.3, timeout=5)
    assert 0.3 <= time.monotonic() - t < 4  # the settle, not the 5 s timeout


def test_telemetry_off_does_not_wait():
    s = SlowSamplers(late=60, period=0)
    t = time.monotonic()
    _wait_for_fresh_samples(s)
    assert time.monotonic() - t < 5  # not the 10 s wait for a fresh sample
