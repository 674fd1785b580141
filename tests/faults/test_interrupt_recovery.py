"""The clean-group guarantee when the stop button lands in awkward places (issue 19, bad input):
during the rebuild itself, and on a rank busy in a long C++ operation that SIGINT cannot stop."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from jupyter_mgpu.engine.startup import runtime

pytestmark = pytest.mark.cluster

STUCK = "x = torch.ones(3)\nif rank == 0:\n    dist.all_reduce(x)"
CHECK = "x = torch.ones(2) * (rank + 1)\ndist.all_reduce(x)\nx.tolist()"


def _press_stop(after: float) -> None:
    threading.Timer(after, lambda: os.kill(os.getpid(), signal.SIGINT)).start()


def test_a_second_press_during_the_rebuild_leaves_it_for_the_next_call(own_session, capsys):
    with own_session(2, timeout=60) as s:
        original = s.recovery.rebuild
        pressed = []

        def rebuild_then_press_again() -> bool:
            if not pressed:
                pressed.append(True)  # the ranks start rebuilding ...
                s.recovery.generation += 1
                s._view([0, 1]).apply_async(runtime.rebuild_process_group, s.recovery.generation)
                raise KeyboardInterrupt  # ... and the stop button is pressed again before it is done
            return original()

        s.recovery.rebuild = rebuild_then_press_again
        _press_stop(1.0)
        with pytest.raises(KeyboardInterrupt):
            s.run_cell(STUCK)
        assert s.recovery.dirty == "the interrupt"
        assert s.run_cell(CHECK) == ["[3.0, 3.0]", "[3.0, 3.0]"]
        assert "after the interrupt, the process group was rebuilt" in capsys.readouterr().err
        assert s.recovery.dirty is None


def _press_stop_once_multiplying(s, rank: int, grown: int, timeout: float = 30.0) -> None:
    """Press stop 0.3 s after ``rank``'s memory has grown by ``grown`` bytes (its operands exist, so
    it is inside the multiplication), however long a loaded machine took to get there."""
    import time

    def watch() -> None:
        base = s.memory()[rank].get("resident_bytes") or 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (s.memory()[rank].get("resident_bytes") or 0) - base > grown:
                break
            time.sleep(0.02)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, daemon=True).start()


@pytest.mark.slow
def test_a_rank_in_a_long_cpp_op_is_rebuilt_around_before_the_next_call(own_session, capsys):
    with own_session(2, timeout=60) as s:
        # rank 1 multiplies in one C++ call for several seconds (SIGINT waits for it); rank 0 waits in a collective
        long_op = (
            "if rank == 1:\n    a = torch.randn(8000, 8000)\n    b = torch.randn(8000, 8000)\n"
            "    a = a @ b\ndist.all_reduce(torch.ones(1))"
        )
        _press_stop_once_multiplying(s, 1, grown=400 * 2**20)  # a and b: 2 × 244 MiB
        with pytest.raises(KeyboardInterrupt) as info:
            s.run_cell(long_op)
        assert (
            "rank 1 still busy (a long C++ operation?): the process group will be rebuilt before the next "
            "call" in str(info.value)
        )
        assert s.recovery.dirty == "the interrupt"
        assert s.run_cell(CHECK) == ["[3.0, 3.0]", "[3.0, 3.0]"]
        assert "after the interrupt, the process group was rebuilt" in capsys.readouterr().err
