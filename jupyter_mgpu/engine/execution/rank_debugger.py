"""pdb on this rank with the notebook's input box as its terminal: ``breakpoint()``, ``pdb.set_trace()``
and post-mortem (``%mgpu_debug``). The kernel half is ``session/rank_debugging.py``.

The rank's pdb writes into a buffer and reads its lines from a queue. When it wants a line it says
``debugging`` in ``where`` (through ``engine/state.py``, read by ``engine/watch/collective_watch.py``)
and in its telemetry at once; the kernel, waiting for the call, sees that, takes the prompt and what pdb
printed since the last one over the guard socket (``debug-take``), asks the person through the
notebook's input box (stdin, as IPython's ``%debug`` does) and hands the line back (``debug-line``).
Nothing new listens: the guard socket is the rank's private one, in the cluster's 0700 directory.
"""

from __future__ import annotations

import bdb
import code
import contextlib
import io
import json
import os
import pdb
import queue
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

from jupyter_mgpu.engine import rank_traceback
from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.execution import collector_frames, panel_breaks, streamed_output
from jupyter_mgpu.engine.shards import held_failure

# frames pdb never stops in when stepping: ours and the engine's machinery around the user's code
SKIP = ["jupyter_mgpu.*", "ipyparallel.*", "ipykernel.*", "IPython.*", "tornado.*", "zmq.*", "asyncio.*", "runpy"]
POLL_S = 0.2  # how often a wait for a line looks up from the queue (the stop button gets in between)
HIDDEN = {"In", "Out", "exit", "quit", "open", "get_ipython", "torch", "dist", "mgpu"}  # a cell's given names
MAX_REPR = 500
MAX_VARIABLES = 300


def _is_ours(filename: str) -> bool:
    return os.sep + "jupyter_mgpu" + os.sep in filename


class _Port:
    """The one prompt this rank waits at (if any) and the lines the kernel sends it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lines: queue.Queue[tuple[int, str]] = queue.Queue()
        self.pending: dict[str, Any] | None = None
        self.count = 0
        self.debugger: RankPdb | None = None  # the one at the prompt: its frames, for the debugger panel

    def take(self, body: str = "") -> dict[str, Any]:
        """The guard's ``debug-take``: the prompt waiting for a line, or ``{"prompt": None}``."""
        with self.lock:
            return dict(self.pending) if self.pending else {"prompt": None}

    def give(self, body: str) -> dict[str, Any]:
        """The guard's ``debug-line``: ``{"n": ..., "line": ..., "eof": ...}`` answers prompt ``n``."""
        msg = json.loads(body)
        with self.lock:
            if not self.pending or self.pending["n"] != msg["n"]:
                return {"ok": False}
            self.pending = None
        self.lines.put((int(msg["n"]), "" if msg.get("eof") else str(msg["line"]) + "\n"))
        return {"ok": True}

    def frames(self, body: str = "") -> dict[str, Any]:
        """The guard's ``debug-frames``: the user's frames of the rank at the prompt, innermost first."""
        with self.lock:
            dbg = self.debugger if self.pending else None
        if dbg is None:
            return {"frames": []}
        out = []
        for i in range(len(dbg.stack) - 1, -1, -1):
            frame, line = dbg.stack[i]
            if dbg.is_skipped_module(frame.f_globals.get("__name__", "")) or _is_ours(frame.f_code.co_filename):
                continue
            out.append({"index": i, "name": frame.f_code.co_name, "file": frame.f_code.co_filename, "line": line})
        return {"frames": out}

    def variables(self, body: str) -> dict[str, Any]:
        """The guard's ``debug-vars``: ``{"index": i}`` names frame ``i`` of the stack; its local names
        (a cell's or a script's module frame: the user's names, not modules or private ones)."""
        index = int(json.loads(body or "{}").get("index", -1))
        with self.lock:
            dbg = self.debugger if self.pending else None
        if dbg is None or not 0 <= index < len(dbg.stack):
            return {"variables": []}
        frame = dbg.stack[index][0]
        names = frame.f_locals if frame.f_code.co_name != "<module>" else frame.f_globals
        out = []
        for name, value in list(names.items()):
            if name.startswith("_") or isinstance(value, type(sys)) or name in HIDDEN:
                continue
            try:
                text = repr(value)
            except Exception as exc:  # a broken __repr__ is the user's: say so, do not fail the panel
                text = f"<repr failed: {type(exc).__name__}>"
            out.append({"name": name, "value": text[:MAX_REPR], "type": type(value).__name__})
            if len(out) >= MAX_VARIABLES:
                break
        return {"variables": out}

    def evaluate(self, body: str) -> dict[str, Any]:
        """The guard's ``debug-eval``: ``{"index": i, "expression": e}`` evaluated in frame ``i`` of the rank
        at the prompt (the debugger panel's console); a statement is run there. Its repr, or the error."""
        msg = json.loads(body or "{}")
        index, expression = int(msg.get("index", -1)), str(msg.get("expression", ""))
        with self.lock:
            dbg = self.debugger if self.pending else None
        if dbg is None or not 0 <= index < len(dbg.stack):
            return {"error": "the rank is not stopped at a prompt"}
        frame = dbg.stack[index][0]
        try:
            try:
                code = compile(expression, "<debug console>", "eval")
            except SyntaxError:
                exec(compile(expression, "<debug console>", "exec"), frame.f_globals, frame.f_locals)
                return {"result": ""}
            value = eval(code, frame.f_globals, frame.f_locals)
            return {"result": repr(value)[:MAX_REPR], "type": type(value).__name__}
        except Exception as exc:  # the user's expression: its error is the answer
            return {"error": f"{type(exc).__name__}: {exc}"}


PORT = _Port()


class _Input:
    """pdb's stdin: each ``readline`` publishes the prompt and waits for the notebook's line."""

    def __init__(self, debugger: RankPdb) -> None:
        self.debugger = debugger

    def readline(self) -> str:
        return self.debugger.ask()


class RankPdb(pdb.Pdb):
    """pdb reading from the notebook's input box, its prompt naming the rank, the engine's frames skipped.
    The stop button at its prompt ends debugging and interrupts the call (plain pdb would swallow it)."""

    def __init__(self, panel: bool = False) -> None:
        collector_frames.watch()
        self.panel = panel  # stopped at a breakpoint of JupyterLab's debugger panel: it drives this rank
        self.buffer = io.StringIO()
        super().__init__(stdin=_Input(self), stdout=self.buffer, skip=SKIP)  # type: ignore[arg-type]
        self.use_rawinput = False
        st = rank_state.STATE
        self.rank = st.rank if st is not None else 0
        self.prompt = f"(Pdb rank {self.rank}) "

    def stop_here(self, frame: FrameType) -> bool:
        """pdb's rule, less what the garbage collector runs: weakref callbacks, finalizers and
        ``gc.callbacks`` run wherever an allocation happens to collect, not where the person steps (a
        library's gc callback caught ``step`` at random)."""
        return bool(super().stop_here(frame)) and not collector_frames.runs(frame)

    def _cmdloop(self) -> None:
        self.cmdloop()  # a KeyboardInterrupt ends the debugging and reaches the call

    def print_stack_trace(self, *args: Any, **kwargs: Any) -> None:
        """``where``/``bt``: the user's frames, from the first one in, without the engine's around them (as
        IPython hides its own); a library the user stepped into stays."""
        stack = self.stack
        first = next((i for i, (f, _) in enumerate(stack) if rank_traceback.is_users(f.f_code.co_filename)), 0)
        try:
            for entry in stack[first:]:
                if not _is_ours(entry[0].f_code.co_filename):
                    self.print_stack_entry(entry)
        except KeyboardInterrupt:
            pass

    def do_interact(self, arg: str) -> None:
        """``interact``: a Python console in the frame's names, its lines from the input box too
        (``exit()`` or an empty line at ``>>>`` ends it)."""
        frame = self.curframe
        if frame is None:
            return
        console = _Console({**frame.f_globals, **self.curframe_locals}, self)
        with contextlib.redirect_stdout(self.buffer):
            console.interact(banner="*interactive* (exit() or an empty line ends it)", exitmsg="")

    def ask(self, prompt: str | None = None) -> str:
        """Publish the prompt with what pdb printed since the last one; wait for the notebook's line."""
        prompt = prompt or self.prompt
        text = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        if text.endswith(prompt):
            text = text[: -len(prompt)]
        for stream in (sys.stdout, sys.stderr):  # the user's own output first, in order
            try:
                stream.flush()
            except Exception:
                pass
        streamed_output.flush_now()  # a direct-channel call's, caught and sent in batches
        st = rank_state.STATE
        frame = getattr(self, "curframe", None)
        line = _frame_line(frame) if frame is not None else None
        with PORT.lock:
            PORT.count += 1
            n = PORT.count
            PORT.pending = {
                "n": n,
                "rank": self.rank,
                "prompt": prompt,
                "output": text,
                "line": line,
                "panel": self.panel,
            }
            PORT.debugger = self
        if st is not None:
            st.debugging = {"since": time.time(), "line": line}
        _publish_now()
        try:
            while True:
                try:
                    got, reply = PORT.lines.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if got == n:
                    return reply
        finally:
            with PORT.lock:
                if PORT.pending and PORT.pending["n"] == n:
                    PORT.pending = None
            if st is not None:
                st.debugging = None
            _publish_now()


class _Console(code.InteractiveConsole):
    """pdb's ``interact`` on a rank: its lines from the input box, its output into pdb's buffer."""

    def __init__(self, names: dict[str, Any], debugger: RankPdb) -> None:
        super().__init__(names)
        self.debugger = debugger

    def raw_input(self, prompt: str = "") -> str:
        line = self.debugger.ask(f"(rank {self.debugger.rank}) {prompt}")
        if not line or (prompt.startswith(">>>") and line.strip() in ("", "exit()", "quit()", "exit", "quit")):
            raise EOFError
        return line.rstrip("\n")

    def write(self, data: str) -> None:
        self.debugger.buffer.write(data)


def _frame_line(frame: FrameType) -> str | None:
    """``line 3 of the cell`` for the frame pdb shows."""
    f = {
        "file": rank_traceback.display_path(frame.f_code.co_filename),
        "line": frame.f_lineno,
        "name": frame.f_code.co_name,
    }
    return str(rank_traceback.place(f))


def _publish_now() -> None:
    """Write a telemetry sample now, so the kernel sees the prompt (or its end) at once."""
    try:
        from jupyter_mgpu.engine.records import memory_sampler

        memory_sampler.publish_now()
    except Exception:
        pass


def set_trace(frame: FrameType | None = None, *, header: str | None = None) -> None:
    """``pdb.set_trace()`` on this rank: stop in the caller's frame, prompt in the notebook."""
    debugger = RankPdb()
    if header is not None:
        debugger.message(header)
    debugger.set_trace(frame or sys._getframe().f_back)


def breakpointhook(*args: Any, **kwargs: Any) -> Any:
    """``sys.breakpointhook`` of the rank: honours ``PYTHONBREAKPOINT`` as Python's own hook does
    (``0`` skips, another callable is called), and stops in :class:`RankPdb` otherwise."""
    hook = os.environ.get("PYTHONBREAKPOINT", "")
    if hook == "0":
        return None
    if hook not in ("", "pdb.set_trace"):
        return sys.__breakpointhook__(*args, **kwargs)
    return set_trace(sys._getframe().f_back, **kwargs)


def post_mortem(tb: TracebackType | None = None) -> None:
    """pdb on the frames of this rank's last failure (``%mgpu_debug``)."""
    tb = tb or last_traceback()
    if tb is None:
        raise RuntimeError("no failure to debug on this rank")
    debugger = RankPdb()
    debugger.reset()
    try:
        debugger.interaction(None, tb)
    except bdb.BdbQuit:
        pass  # q ends a post-mortem, as in IPython's %debug


def remember(tb: TracebackType | None, out_of_memory: bool = False) -> int:
    """Keep the traceback of this rank's last failure for post-mortem, as IPython keeps
    ``sys.last_traceback``; an out-of-memory failure's frames are let go, since the memory they hold is
    what ran out (the next call would fail for it). Returns the bytes the kept frames hold
    (``engine/shards/held_failure.py``)."""
    return held_failure.keep(tb, out_of_memory)


def last_traceback() -> TracebackType | None:
    return held_failure.traceback()


def failure_state() -> str:
    """``kept`` (a failure to debug), ``none``, or why the last failure's frames were not kept."""
    return held_failure.state()


def release_failure() -> int:
    """Let this rank's kept failure go (``%mgpu_debug --release``); the bytes that gave back."""
    return held_failure.release()


@contextlib.contextmanager
def breakpoints(filename: str, breaks: Any) -> Iterator[None]:
    """Run the block with the breakpoints set in JupyterLab's debugger panel: ``breaks`` is the cell's lines
    (the editor's numbers) or ``{"cell": [...], "files": {path: [...]}}``, each breakpoint a line or
    ``[line, condition, hits]`` (a condition may name ``rank`` and ``world_size``, in any file; ``hits``: stop
    at that hit). The rank runs on until it reaches one, then stops for the panel."""
    places = panel_breaks.places(filename, breaks)
    if not places:
        yield
        return
    dbg = RankPdb(panel=True)
    for path, line, cond, hits in places:
        st = rank_state.STATE
        if cond and st is not None:  # a helper file's frame has no rank: pdb would stop wherever it fails
            cond = panel_breaks.with_rank(cond, st.rank, st.world_size)
        dbg.set_break(path, line, cond=cond)
        if hits and hits > 1:
            dbg.get_breaks(path, line)[-1].ignore = hits - 1
    dbg.reset()
    dbg.botframe = sys._getframe(2)  # the frame that runs the cell: above it, never stop
    dbg.set_continue()
    sys.settrace(dbg.trace_dispatch)
    try:
        yield
    finally:
        sys.settrace(None)
        dbg.clear_all_breaks()  # pdb keeps breakpoints process-wide: the next cell's would stop here too


def tidy(namespace: dict[str, Any]) -> None:
    """Drop the names pdb leaves in a module's namespace (``__return__``, ``__exception__``) once a
    cell that stopped in it ends: the cell's namespace is the rank's, and the next cell would show them."""
    namespace.pop("__return__", None)
    namespace.pop("__exception__", None)


def install() -> dict[str, Any]:
    """Make ``breakpoint()`` and ``pdb.set_trace()`` on this engine stop in :class:`RankPdb`; returns the
    guard requests that serve its prompts (``engine/startup/runtime.py`` registers them)."""
    sys.breakpointhook = breakpointhook
    pdb.set_trace = set_trace
    return {
        "debug-take": PORT.take,
        "debug-line": PORT.give,
        "debug-frames": PORT.frames,
        "debug-vars": PORT.variables,
        "debug-eval": PORT.evaluate,
        "held": _held_reply,
    }


def _held_reply(body: str) -> dict[str, int]:
    """The bytes this rank's kept failure holds, asked after an interrupt (whose reports never come)."""
    return {"held_bytes": held_failure.held_bytes()}
