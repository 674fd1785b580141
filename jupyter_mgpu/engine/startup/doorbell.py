"""The supervisor's doorbell: a FIFO in the cluster directory, so that an idle supervisor sleeps rather
than polls. The kernel rings it after writing ``launch.json`` (a spare taken over) or a restart request;
an engine's end rings it too (SIGCHLD, through ``signal.set_wakeup_fd``). Polling cost a spare waiting for
its start 4.5% of a core (every 5 ms) and a supervisor of idle engines 1.2% (every 20 ms), measured with
psutil on this kind of machine; a kernel left with a spare, or a cluster left idle, costs nothing now.

The supervisor opens the FIFO before it looks at the files it waits for, and looks again after every
wake: a ring before it opened the FIFO finds nobody (the kernel ignores that) but its file is seen at the
first look; a lost ring costs at most :data:`SAFETY_S`. The FIFO is opened read-write, so it never reads
as ended when a ringer closes its end.
"""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

FIFO_NAME = "supervisor.wake"
SAFETY_S = 1.0  # the longest a supervisor sleeps without looking


class Doorbell:
    """The supervisor's end of the FIFO in ``rundir`` (made if missing)."""

    def __init__(self, rundir: Path) -> None:
        path = Path(rundir) / FIFO_NAME
        try:
            os.mkfifo(path, 0o600)
        except FileExistsError:
            pass
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)

    def wait(self, timeout: float = SAFETY_S) -> None:
        """Sleep until a ring (or ``timeout``), then take every ring waiting."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                while os.read(self.fd, 4096):
                    pass
            except BlockingIOError:
                pass

    def ring_when_a_child_ends(self) -> None:
        """SIGCHLD rings the bell (the handler itself does nothing: the loop reaps)."""
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.fd, warn_on_full_buffer=False)

    def leave(self) -> None:
        """In a forked engine: neither the bell nor SIGCHLD's ringing are its own."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(self.fd)


def ring(rundir: Path) -> None:
    """Wake the supervisor of the cluster in ``rundir``; nothing when it has no bell open (yet)."""
    try:
        fd = os.open(Path(rundir) / FIFO_NAME, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no FIFO yet, or nobody holds it open: the supervisor looks at its files first
        return
    try:
        os.write(fd, b"!")
    except OSError:  # full: rings are waiting already
        pass
    finally:
        os.close(fd)
