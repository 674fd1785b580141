"""A starting cluster's timeline: every process appends ``<name> <epoch seconds>`` lines to one file.

The kernel, the controller, the supervisor and each engine mark the moments of the start that they
see (``controller.main``, ``torch.imported``, ``pg.joined.2`` ...) into ``<rundir>/startup.log``; one
``O_APPEND`` write of a short line each, so lines of different processes never interleave. The
benchmark (``benchmarks/startup.py``) turns them into phases, so a slower start names its phase.
Marking costs one small write and never fails the start.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FILE = "startup.log"
CONTROLLER_LISTENING = "controller.listening"  # the controller's loop runs: the kernel's client connects now


def mark(rundir: str | os.PathLike[str], name: str, when: float | None = None) -> None:
    """Record that ``name`` happened now (or at epoch ``when``)."""
    try:
        fd = os.open(os.path.join(rundir, FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{name} {time.time() if when is None else when:.6f}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def read(rundir: str | os.PathLike[str]) -> dict[str, float]:
    """Every mark so far: name -> epoch seconds (the first time a name was marked)."""
    out: dict[str, float] = {}
    try:
        text = (Path(rundir) / FILE).read_text()
    except OSError:
        return out
    for line in text.splitlines():
        name, _, stamp = line.rpartition(" ")
        try:
            out.setdefault(name, float(stamp))
        except ValueError:
            continue
    return out
