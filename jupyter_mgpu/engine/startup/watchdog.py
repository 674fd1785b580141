"""A thread that ends this process when the notebook kernel that owns it is gone.

ipyparallel starts its processes in new sessions, so they outlive a killed kernel unless something
watches the kernel's pid. Every process of a cluster (supervisor, controller, engines) runs one.
Where Linux gives a pidfd (5.3 and later) the thread sleeps until the kernel ends, at no cost at rest
(64 engines polling twice a second each kept a few percent of a core busy); elsewhere it polls.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable

from jupyter_mgpu.rundir import process_alive


def start(
    kernel_pid: int, kernel_create_time: float | None, on_gone: Callable[[], None] | None = None, period: float = 0.5
) -> threading.Thread:
    """Call ``on_gone`` (default: nothing) and exit when ``kernel_pid`` ends; without a pidfd, look
    every ``period`` seconds."""

    def watch() -> None:
        pidfd = _open_pidfd(kernel_pid)
        if pidfd is not None:
            if process_alive(kernel_pid, kernel_create_time):  # the pidfd is that very process, not a reuse
                waiter = select.poll()  # not select(): a descriptor past 1023 is fine here
                waiter.register(pidfd, select.POLLIN)
                while not waiter.poll():  # readable once it has ended
                    pass
        else:
            while process_alive(kernel_pid, kernel_create_time):
                time.sleep(period)
        try:  # the process's last words, which a cluster that ends while starting quotes
            os.write(2, f"jupyter_mgpu: the kernel this process serves (pid {kernel_pid}) has ended\n".encode())
            if on_gone is not None:
                on_gone()
        finally:
            os._exit(3)

    thread = threading.Thread(target=watch, name="mgpu-kernel-watchdog", daemon=True)
    thread.start()
    return thread


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends, or None where the system has none."""
    with contextlib.suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None
