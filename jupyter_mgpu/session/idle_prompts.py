"""A ``--noblock`` call's pdb prompts while the notebook is idle (``%%mgpu --noblock``, ``Session.run(...,
block=False)``): nothing waits for the call, so nothing would serve a rank that stops at ``breakpoint()``.

- **Said**: a watcher thread per pending call (started in the cell that made it, so its line shows under
  that cell) looks at the ranks' telemetry every ``POLL_S``; while ranks of the call sit at a prompt it keeps
  one line there — ``mgpu: rank 2 waits at a pdb prompt at line 6 of the cell: run any cell to answer
  it`` — which goes once they are served or the call ends.
- **Served**: before any cell runs (IPython's ``pre_run_cell`` event, :func:`install`), the prompts of every
  pending call are served through the input box as a blocking call's are (``session/rank_debugging.py``:
  casts, ``:where``), then the cell's own code runs. A cell that only looks at the ranks (``%mgpu_where``,
  ``%mgpu_status``, ``mg.where``) runs first, so the ranks can be seen while one waits at its prompt.
"""

from __future__ import annotations

import contextvars
import re
import threading
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.session.stack_tree import rank_words
from jupyter_mgpu.wait_line import WaitLine, in_kernel

if TYPE_CHECKING:
    from jupyter_mgpu.session.pending import PendingResult

POLL_S = 0.5
# the lines of a cell that only looks at the ranks: not served before it
LOOKS = (
    re.compile(r"%mgpu_(where|status)\b"),
    re.compile(r".*\b(_?mg|jupyter_mgpu|\w*session|s\d*)\.where\("),
    re.compile(r"import [\w.]+( as \w+)?(\s*,\s*[\w.]+( as \w+)?)*\s*(#.*)?$"),
    re.compile(r"\w+\s*=\s*\w+\s*(#.*)?$"),
    re.compile(r"(time\.)?sleep\([\d.]+\)\s*(#.*)?$"),  # a wait for the ranks to get somewhere
)
_watches: list[IdleWatch] = []
_lock = threading.Lock()


def at_prompt(p: PendingResult) -> dict[int, str]:
    """The ranks of ``p`` still at work that sit at a pdb prompt now, with their line."""
    from jupyter_mgpu.session.call_wait import read_where

    if p.ready() or not p.session.alive:
        return {}
    ranks = p.running()
    where = read_where(p.session)
    return {r: str(where[r].get("line") or "") for r in ranks if (where.get(r) or {}).get("state") == "debugging"}


def status_text(waiting: dict[int, str]) -> str:
    """``mgpu: rank 2 waits at a pdb prompt at line 6 of the cell: run any cell to answer it``."""
    if not waiting:
        return ""
    ranks = sorted(waiting)
    lines = {waiting[r] for r in ranks}
    at = f" at {lines.pop()}" if len(lines) == 1 and "" not in lines else ""
    verb = "waits" if len(ranks) == 1 else "wait"
    return f"mgpu: {rank_words(ranks)} {verb} at a pdb prompt{at}: run any cell to answer {'it' if len(ranks) == 1 else 'them'}"


class IdleWatch:
    """One pending call's watcher: the status line under its cell while its ranks wait at a prompt."""

    def __init__(self, p: PendingResult) -> None:
        self.pending = p
        self.line = WaitLine("", after=0, live=True)
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self._loop,), name="mgpu-idle-prompts", daemon=True
        )

    def _loop(self) -> None:
        try:
            while not self.stopped.is_set() and not self.pending.ready() and self.pending.session.alive:
                text = status_text(at_prompt(self.pending))
                if text:
                    self.line.show(text)
                else:
                    self.line.close()
                self.stopped.wait(POLL_S)
        except Exception:  # the session went away under the watcher: it has nothing more to say
            pass
        finally:
            self.line.close()


def watch(p: PendingResult) -> None:
    """Watch a call started with ``block=False`` in a kernel: its ranks' prompts said and served when idle."""
    if not in_kernel():
        return
    w = IdleWatch(p)
    with _lock:
        _watches[:] = [x for x in _watches if x.thread.is_alive()]
        _watches.append(w)
    w.thread.start()


def looks_only(code: str) -> bool:
    """Whether a cell only looks at the ranks (``%mgpu_where``, ``%mgpu_status``, ``mg.where(...)``, a
    session's ``.where(...)``, a name bound to another, an import, a ``time.sleep`` that lets the ranks get
    to their prompt): run before any prompt. ``torch.where(...)`` or any other statement makes it a cell of
    work, served after the prompts."""
    lines = [part.strip() for ln in code.splitlines() for part in ln.split(";")]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    return bool(lines) and all(any(look.match(ln) for look in LOOKS) for ln in lines)


def serve_pending(code: str = "") -> int:
    """Serve every pending call's prompts now, through the input box (before the cell ``code`` runs); the
    number of calls served."""
    if looks_only(code):
        return 0
    with _lock:
        watches = [w for w in _watches if w.thread.is_alive()]
    served = 0
    for w in watches:
        p = w.pending
        waiting = at_prompt(p)
        if not waiting:
            continue
        ranks = sorted(waiting)
        what = "the --noblock cell" if p.label == "%%mgpu cell" else f"{p.label} (block=False)"
        verb = "waits" if len(ranks) == 1 else "wait"
        print(f"mgpu: {rank_words(ranks)} of {what} {verb} at a pdb prompt: answered here, before this cell runs")
        p.session.debug_desk.serve_now(p.running(), p.relay)
        served += 1  # the watcher, in the call's own cell, takes its line away
    return served


def _before_cell(info: Any) -> None:
    serve_pending(str(getattr(info, "raw_cell", "") or ""))


def install(ipython: Any) -> None:
    """Serve pending calls' prompts before each cell (IPython's ``pre_run_cell`` event); once per shell."""
    if _before_cell not in ipython.events.callbacks.get("pre_run_cell", []):
        ipython.events.register("pre_run_cell", _before_cell)
