"""Run a function or a cell on this rank and report failures as data, not as raw tracebacks.

The controller turns these reports into one compact error for all ranks (see ``session/rank_errors.py``):
which ranks failed, the error, the user's own frame.
"""

from __future__ import annotations

import ast
import bdb
import linecache
import sys
import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine import rank_traceback
from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.execution import cell_value, namespace_transfer, rank_debugger, rank_namespace
from jupyter_mgpu.engine.group import user_process_group
from jupyter_mgpu.engine.shards import budget, held_failure

CELL_FILENAME = "<mgpu-cell-{n}>"
ENTRY_ATTRIBUTE = "_mgpu_entry"  # set on an exception by what ran the user's entry file (a script)
_cell_counter = 0


# what a collective's error says when it ran out of time, and when gloo closed its connection instead
# (a peer's process gone or its group torn down: seconds in, not a timeout)
TIMEOUT_WORDS = ("timed out", "timeout")
CLOSED_WORDS = ("connection closed by peer", "connection reset")


def says_timeout(message: str) -> bool:
    """Whether a collective's error says it timed out (not that gloo closed a connection, seconds in)."""
    lowered = message.lower()
    return any(s in lowered for s in TIMEOUT_WORDS)


def failure(exc: BaseException, tb: Any, entry: str | None = None) -> dict[str, Any]:
    """A picklable description of ``exc`` raised on this rank; ``entry``: the file of the cell, script
    or module the user ran (its frames count as theirs even in site-packages)."""
    st = rank_state.STATE
    message = str(exc)
    entry = entry or getattr(exc, ENTRY_ATTRIBUTE, None)
    info: dict[str, Any] = {
        "ok": False,
        "rank": st.rank if st else None,
        "ename": type(exc).__name__,
        "evalue": message,
        "frames": rank_traceback.user_frames(tb, entry),
        "oom": budget.is_oom(exc),
        "requested_bytes": budget.requested_bytes(message),
        "interrupted": isinstance(exc, KeyboardInterrupt),
        "debug_quit": isinstance(exc, bdb.BdbQuit),  # q at this rank's pdb prompt
        "op": st.current_op if st else None,
    }
    if says_timeout(message) or any(s in message.lower() for s in CLOSED_WORDS):
        info["collective_failure"] = True
        info["timeout_s"] = user_process_group.current_timeout()  # a script's own init_process_group(timeout=)
    # the stop button and a released collective are on the way back to a clean group: Python's quick text
    quick = info["interrupted"] or info.get("collective_failure")
    info["traceback"] = rank_traceback.format_traceback(exc, tb, quick=bool(quick))
    if not info["debug_quit"] and tb is not None:
        # kept for %mgpu_debug (not an OOM's frames); the memory they hold is said with the error
        info["held_bytes"] = rank_debugger.remember(tb, out_of_memory=bool(info["oom"]))
    return info


class _CallScope:
    """Marks this rank busy with ``label`` for the guard and telemetry, and counts its collectives."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.st = rank_state.STATE
        self.seq0: int | None = None
        self.unrun0 = 0
        self.started_ns = 0

    def __enter__(self) -> _CallScope:
        st = self.st
        if st is not None:
            self.previous = st.current_op
            st.current_op = self.label
            self.seq0 = rank_state.sequence_number()
            self.unrun0 = st.unrun_collectives
            if not st.call_depth:
                st.call_seq0 = self.seq0
                st.call_started = time.time()
                st.calls_begun += 1
                self.started_ns = time.time_ns()
                held_failure.settle()  # what a %px failure left in sys.last_* is not this call's memory
            st.call_depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        st = self.st
        if st is not None:
            st.current_op = self.previous
            st.call_depth -= 1
            if not st.call_depth:
                st.call_seq0 = None
                st.call_ended = time.time()
                if st.call_log is not None:  # mg.profile(): the calls this rank ran
                    st.call_log.append((self.label, self.started_ns, time.time_ns()))
                user_process_group.end_call()  # a timeout the call's init_process_group set ends with it
                held_failure.settle()  # the call's exception is gone: frames it let go give their memory back

    def report(self, result: dict[str, Any]) -> dict[str, Any]:
        """Add how many collectives this rank entered during the call (names ranks that skipped one) and
        what the user's own init/destroy_process_group did (said once by the controller)."""
        seq1 = rank_state.sequence_number() if self.seq0 is not None else None
        result["seq_delta"] = None if self.seq0 is None or seq1 is None else seq1 - self.seq0
        if self.st is not None and self.st.unrun_collectives > self.unrun0:  # its stale record: rebuild
            result["unrun"] = self.st.unrun_collectives - self.unrun0
        notes = user_process_group.take_notes()
        if notes:
            result["group_notes"] = notes
        return result


def call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], label: str | None = None
) -> dict[str, Any]:
    """Call ``fn(*args, **kwargs)`` on this rank; returns {"ok": True, "value": ...} or a failure."""
    name = label
    if not name:
        name = getattr(fn, "__name__", "function")
    with _CallScope(name) as scope:
        start = time.perf_counter()
        try:
            result = {"ok": True, "value": fn(*args, **kwargs)}
        except BaseException as exc:
            result = failure(exc, exc.__traceback__)
        result["seconds"] = time.perf_counter() - start  # time spent in the call itself, for dispatch overheads
        notes = rank_namespace.take_notes()
        if notes:  # names a notebook function found both in the notebook and here: the controller says so once
            result["shadowed"] = notes
        return scope.report(result)


_TRANSFORMED: dict[str, str] = {}  # the last cells' Python source, by their text (a cell run in a loop)


def _transformed(shell: Any, code: str) -> str:
    """``code`` as IPython turns it into Python (``%magic`` lines, ``!cmd``, …), each text once."""
    source = _TRANSFORMED.get(code)
    if source is None:
        source = shell.transform_cell(code)
        if len(_TRANSFORMED) >= 64:
            _TRANSFORMED.pop(next(iter(_TRANSFORMED)))
        _TRANSFORMED[code] = source
    return source


def run_cell(
    code: str,
    user_ns: dict[str, Any] | None = None,
    lent: dict[str, bytes] | None = None,
    rich: bool = False,
    breaks: Any = None,
    first_line: int = 1,
    number: int | None = None,
) -> dict[str, Any]:
    """Run ``%%mgpu`` cell source in this engine's user namespace, IPython syntax allowed.

    The value of a final expression is returned as its repr (like ``Out[]``), or with ``rich`` as
    :func:`cell_value.describe` says it; ``None`` when there is none. ``lent``: the notebook's values
    (pickled) of names the cell reads and this rank lacks, in the namespace while the cell runs.
    ``first_line``: the editor's number of the code's first line (2 under a ``%%mgpu`` line), so that every
    traceback, ``where``, status line and pdb prompt names the line the editor's gutter shows.
    ``breaks``: lines (the editor's numbers) with a breakpoint of JupyterLab's debugger panel.
    ``number``: the session's number of the cell, the same on every rank that runs it (a ``--targets`` cell
    skips the others), so that its frames read alike on every rank and equal answers group; else this rank's.
    """
    global _cell_counter
    _cell_counter = max(_cell_counter + 1, number or 0)
    filename = CELL_FILENAME.format(n=_cell_counter if number is None else number)
    shell = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        pass
    if user_ns is None:
        user_ns = shell.user_ns if shell is not None else sys.modules["__main__"].__dict__
    source = _transformed(shell, code) if shell is not None else code
    source = "\n" * (max(1, first_line) - 1) + source  # the magic line above: the editor's numbering
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    with _CallScope("%%mgpu cell") as scope:
        put: dict[str, Any] = {}
        try:
            namespace_transfer.lend(user_ns, lent or {}, put)
            return scope.report(_exec_cell(source, filename, user_ns, rich, breaks))
        except NameError as exc:  # a notebook value that could not be loaded here
            return scope.report(failure(exc, None))
        finally:
            namespace_transfer.take_back(user_ns, put)


def _exec_cell(
    source: str, filename: str, user_ns: dict[str, Any], rich: bool = False, breaks: Any = None
) -> dict[str, Any]:
    try:
        tree = ast.parse(source, filename=filename)
        last = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr):
            tree.body.pop()
            last = ast.Expression(tail.value)
        with rank_debugger.breakpoints(filename, breaks):
            exec(compile(tree, filename, "exec"), user_ns)
            result = eval(compile(last, filename, "eval"), user_ns) if last is not None else None
        value = None
        if result is not None:
            value = cell_value.describe(result) if rich else repr(result)
            user_ns["_"] = result
        rank_debugger.tidy(user_ns)
        return {"ok": True, "value": value}
    except BaseException as exc:
        info = failure(exc, exc.__traceback__, entry=filename)
        rank_debugger.tidy(user_ns)
        if isinstance(exc, SyntaxError):
            info["frames"] = [
                {
                    "file": filename,
                    "line": exc.lineno,
                    "name": "<cell>",
                    "code": (exc.text or "").strip(),
                    "entry": True,
                }
            ]
        for f in info["frames"]:
            if f["file"] == filename:
                f["file"] = "<cell>"
        return info
