"""Where an engine was when a fatal signal ended it: a segfault in a library, gloo's abort on a size mismatch.

A rank killed by SIGSEGV or SIGABRT used to be reported as that and nothing more. Each engine now
turns on Python's :mod:`faulthandler` as it starts, writing every thread's stack to its own file in the
cluster folder (``faults/<rank>.txt``) as the process dies; the supervisor reads that file when it reaps
the engine (``launcher.py``) and keeps one phrase in the exit record — the call the crashing thread was
in and the user's line that led there, or which thread it was — which the notebook's
``EngineDiedError`` adds to ``rank 1 died (segmentation fault, SIGSEGV)``.
"""

from __future__ import annotations

import faulthandler
import re
import threading
from pathlib import Path
from typing import IO, Any

FOLDER = "faults"
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_file: IO[str] | None = None  # kept open for the life of the engine: faulthandler writes to its descriptor


def path(rundir: str | Path, rank: int) -> Path:
    return Path(rundir) / FOLDER / f"{rank}.txt"


def enable(rundir: str | Path, rank: int) -> None:
    """Dump every thread's stack to this rank's file if a fatal signal ends the process (header: the
    main thread's id, so the reader can tell a background thread's crash from the main thread's)."""
    global _file
    target = path(rundir, rank)
    target.parent.mkdir(mode=0o700, exist_ok=True)
    f = open(target, "w")  # faulthandler holds its descriptor until the process ends
    f.write(f"main {threading.get_ident():#018x}\n")
    f.flush()
    faulthandler.enable(file=f, all_threads=True)
    _file = f


def forget(rundir: str | Path, rank: int) -> None:
    """Remove a dead rank's file before it is started again (a new engine must not inherit its end)."""
    path(rundir, rank).unlink(missing_ok=True)


def parse(text: str) -> dict[str, Any]:
    """``{"main": id, "current": id or None, "threads": {id: [(file, line, function), ...]}}`` (frames
    innermost first) from a faulthandler dump that :func:`enable` started."""
    main = current = None
    threads: dict[str, list[tuple[str, int, str]]] = {}
    frames: list[tuple[str, int, str]] | None = None
    for line in text.splitlines():
        if line.startswith("main "):
            main = line.split()[1]
        elif m := _THREAD.match(line):
            frames = threads.setdefault(m.group(2), [])
            if m.group(1) == "Current thread":
                current = m.group(2)
        elif frames is not None and (f := _FRAME.match(line)):
            frames.append((f.group(1), int(f.group(2)), f.group(3)))
    return {"main": main, "current": current, "threads": threads}


def _at(frames: list[tuple[str, int, str]]) -> str:
    """``in string_at() (ctypes/__init__.py:519), called from line 3 of the cell``, or ``at line 3 of the
    cell`` when the innermost frame is the user's own (as ``rank_traceback`` names a rank's failure)."""
    from jupyter_mgpu.engine import rank_traceback as rt

    users = [rt.place({"file": rt.display_path(f), "line": n, "name": fn}) for f, n, fn in frames if rt.is_users(f)]
    file, line, name = frames[0]
    if rt.is_users(file):
        return f"at {users[0]}"
    here = f"in {name}() ({rt.display_path(file)}:{line})"
    return f"{here}, called from {users[0]}" if users else here


def summary(text: str | None) -> str | None:
    """Where the dump says the process was when it died, as a phrase for ``rank 1 died (...) <phrase>``;
    None when there is no dump (SIGKILL leaves none) or it names no Python frame."""
    if not text:
        return None
    dump = parse(text)
    threads, current, main = dump["threads"], dump["current"], dump["main"]
    if current is not None and threads.get(current):
        where = _at(threads[current])
        return where if current == main or main is None else f"in a background thread, {where}"
    if current is None and main is not None and threads.get(main):
        return f"in a thread that runs no Python (a library's own); the main thread was {_at(threads[main])}"
    return None


def read_summary(rundir: str | Path, rank: int) -> str | None:
    """:func:`summary` of this rank's file, if it wrote one."""
    try:
        return summary(path(rundir, rank).read_text(errors="replace"))
    except OSError:
        return None
