"""A thread that ends this process when the notebook kernel that owns it is gone.

ipyparallel starts its processes in new sessions, so they outlive a killed kernel unless something
watches the kernel's pid. Every process of a cluster (supervisor, controller, engines) runs one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from jupyter_mgpu.rundir import process_alive


def start(
    kernel_pid: int, kernel_create_time: float | None, on_gone: Callable[[], None] | None = None, period: float = 0.5
) -> threading.Thread:
    """Poll ``kernel_pid`` every ``period`` seconds; call ``on_gone`` (default: exit at once) when it ends."""

    def watch() -> None:
        while True:
            time.sleep(period)
            if not process_alive(kernel_pid, kernel_create_time):
                try:
                    if on_gone is not None:
                        on_gone()
                finally:
                    os._exit(3)

    thread = threading.Thread(target=watch, name="mgpu-kernel-watchdog", daemon=True)
    thread.start()
    return thread
