"""Hold back the stop button while a cluster is being started or stopped, or a request to the ranks goes
out, so that work is never cut in half (half-started processes left running, a half-removed runtime
directory, a call sent that nobody then stops or waits for)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Run the block with SIGINT held; a stop pressed meanwhile raises KeyboardInterrupt after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
