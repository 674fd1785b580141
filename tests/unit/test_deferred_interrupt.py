"""The stop button held back while a cluster starts or stops (``deferred_interrupt.py``): a SIGINT in the
block lets the block finish, then raises KeyboardInterrupt; the previous handler is always put back."""

from __future__ import annotations

import signal
import threading

import pytest

from jupyter_mgpu.deferred_interrupt import deferred_interrupt


@pytest.fixture(autouse=True)
def _python_sigint_handler():
    """Python's own SIGINT handler, as a kernel has it (a run started in the background may ignore SIGINT)."""
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, outer)


def _stop_button() -> None:
    signal.raise_signal(signal.SIGINT)


def test_a_stop_in_the_block_lets_it_finish_then_interrupts():
    before = signal.getsignal(signal.SIGINT)
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            steps.append("started")
            _stop_button()
            steps.append("finished")  # the work is not cut in half
    assert steps == ["started", "finished"]
    assert signal.getsignal(signal.SIGINT) is before


def test_several_stops_raise_once():
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            _stop_button()
            _stop_button()
    with deferred_interrupt():  # nothing is left over from the stops before
        pass


def test_a_block_without_a_stop_runs_as_it_is():
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupt():
        assert signal.getsignal(signal.SIGINT) is not before  # held while inside
        value = 42
    assert value == 42
    assert signal.getsignal(signal.SIGINT) is before


def test_the_handler_is_put_back_when_the_block_fails():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(ValueError, match="half started"):
        with deferred_interrupt():
            raise ValueError("half started")
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # and the put-back handler interrupts again, at once
        _stop_button()


def test_a_stop_after_the_block_interrupts_at_once():
    with deferred_interrupt():
        pass
    with pytest.raises(KeyboardInterrupt):
        _stop_button()


def test_outside_the_main_thread_the_block_runs_untouched():
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with deferred_interrupt():
                seen.append(signal.getsignal(signal.SIGINT))
        except BaseException as e:  # signal.signal from this thread would raise ValueError
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(10)
    assert errors == [] and seen == [before]
    assert signal.getsignal(signal.SIGINT) is before
