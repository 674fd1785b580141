"""Entry point of a cluster's ipyparallel controller: the stock controller plus a kernel watchdog, its
heartbeat paced by ``engine/startup/heart_pace.py``.

Run as ``python -m jupyter_mgpu.engine.startup.controller KERNEL_PID KERNEL_CREATE_TIME [ipcontroller args]``.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    kernel_pid, create_time = int(sys.argv[1]), float(sys.argv[2])
    from jupyter_mgpu.engine.records.startup_marks import CONTROLLER_LISTENING, mark

    rundir = None
    for arg in sys.argv[3:]:
        if arg.startswith("--profile-dir="):  # <rundir>/profile
            rundir = os.path.dirname(arg.split("=", 1)[1])
            mark(rundir, "controller.main")
    from jupyter_mgpu.engine.startup import watchdog

    # the controller forks helper processes (schedulers) that do not inherit this thread: end the
    # whole process group (this process started its own session) when the kernel is gone
    def end_group() -> None:
        os.killpg(os.getpgrp(), signal.SIGKILL)

    watchdog.start(kernel_pid, create_time, on_gone=end_group)
    # and a forked helper watches the kernel itself, should this process be killed first
    os.register_at_fork(after_in_child=lambda: watchdog.start(kernel_pid, create_time, on_gone=end_group))
    from ipyparallel.controller.app import IPController

    from jupyter_mgpu.engine.startup import heart_pace, held_ports

    heart_pace.use_in_controller()  # quick beats while engines register, slower ones at rest
    held_ports.hold_chosen_ports()  # no other process takes a port between its choice and its bind
    app = IPController.instance()
    app.initialize(sys.argv[3:])
    if rundir is not None:  # its loop runs: a client's connection request is answered now
        app.loop.add_callback(mark, rundir, CONTROLLER_LISTENING)
    app.start()


if __name__ == "__main__":
    main()
