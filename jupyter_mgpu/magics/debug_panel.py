"""JupyterLab's debugger panel across the ranks, on the kernel's debug protocol.

With the panel switched on, the notebook's own cells are debugged by ipykernel's debugger (debugpy in the
kernel) as before. A ``%%mgpu`` cell's gutter breakpoints go to the ranks instead: each rank runs the cell
under its pdb (``engine/execution/rank_debugger.py``) with those breakpoints and stops at one. The ranks
are threads of the debug session (``rank 0``, ``rank 1``, ...): a rank that stops sends a ``stopped``
event; the panel's ``stackTrace``, ``scopes`` and ``variables`` for that thread are answered from the
rank (over its guard socket), and ``continue``, ``next``, ``stepIn`` and ``stepOut`` become pdb's ``c``,
``n``, ``s`` and ``r`` for that rank (a ``continue`` marked ``allRanks``, the labextension's "Continue all
ranks" button, is ``c`` for every stopped rank); the console's ``evaluate`` in a rank's frame is answered by that rank
(its value's repr, or its error). Every other request goes to ipykernel's debugger unchanged.

The requests arrive on the kernel's control thread while the ``%%mgpu`` cell waits on the shell thread;
the wait loop (``session/rank_debugging.py``) tells this bridge when a rank stops.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.execution import panel_breaks
from jupyter_mgpu.session import rank_debugging

THREADS = 1_000_000  # thread id of rank r: THREADS + r (debugpy's own threads have small ids)
FRAMES = 2_000_000  # frame id: FRAMES + r * SPAN + index of the frame in the rank's stack
VARIABLES = 3_000_000  # variables reference of a frame's locals: VARIABLES + r * SPAN + index
SPAN = 10_000
STEPS = {"continue": "c", "next": "n", "stepIn": "s", "stepOut": "r"}
# a ``continue`` whose arguments hold ``allRanks: true`` (and DAP's ``singleThread: false``) lets every stopped
# rank go on: the labextension's "Continue all ranks" button sends it (labextension/src/continue_all.ts).
# JupyterLab's own Continue sends no ``singleThread`` and goes on acting on the shown rank alone.
ALL_RANKS = "allRanks"
REANNOUNCE_S = 0.3  # after a rank goes on, the next stopped rank is announced once the panel settled
STEP_WAIT_S = 1.0  # a rank that stepped and has not stopped again by then: the panel shows the next one
CELL_FILES = "<mgpu-cell-"
SHOWN_TYPES = ("int", "float", "bool", "str")  # the types whose values JupyterLab's variables panel shows


def running_cell(kernel: Any) -> str | None:
    """The source of the cell the kernel runs now, as the front end sent it (None outside a kernel)."""
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent("shell")
    except TypeError:  # an ipykernel whose get_parent takes no channel
        parent = kernel.get_parent()
    code = (parent or {}).get("content", {}).get("code")
    return code if isinstance(code, str) else None


def body_first_line(raw: str | None) -> int:
    """The editor's number of a ``%%mgpu`` cell's first body line: the line after the magic's, so 2 when the
    magic is the cell's first line (``raw`` None: the cell is not known, assume so); 1 for a cell with no
    ``%%mgpu`` line (``%mgpu_auto`` runs a whole code cell on the ranks)."""
    if raw is None:
        return 2
    head = next((i for i, line in enumerate(raw.splitlines()) if line.lstrip().startswith("%%mgpu")), None)
    return 1 if head is None else head + 2


def _reply(request: dict[str, Any], body: dict[str, Any] | None = None, message: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": request.get("seq", 0),
        "type": "response",
        "request_seq": request.get("seq", 0),
        "command": request.get("command"),
        "success": message is None,
        "body": body or {},
    }
    if message is not None:
        out["message"] = message
    return out


class PanelBridge:
    """Between ipykernel's debugger (the panel's requests) and the ranks (their pdb prompts)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.debugger = kernel.debugger
        self.original = self.debugger.process_request
        # source path -> the panel's breakpoints there: [line, condition, hits]
        self.breaks: dict[str, list[list[Any]]] = {}
        self.cell: dict[str, Any] | None = None  # the %%mgpu cell running with breakpoints: its path
        self.session: Any = None
        self.stopped: list[int] = []  # ranks stopped at a breakpoint, in the order they stopped
        self.shown: int | None = None  # the rank the panel shows (JupyterLab shows one thread's stack)
        self.reannounce_at: float | None = None
        self.lock = threading.Lock()

    # -- the %%mgpu cell ---------------------------------------------------------------------
    def started(self) -> bool:
        return bool(getattr(self.debugger, "is_started", False))

    def cell_breaks(self, body: str) -> dict[str, Any] | None:
        """The panel's breakpoints for the running cell's ranks: ``cell`` (its body's lines, the editor's
        numbers, the ranks' too) and ``files`` (any other file on disk: a helper module the cell imports),
        each ``[line, condition, hits]``; None when the panel is off or sets none. Remembers the cell, so
        the ranks' frames point back into it."""
        if not self.started():
            return None
        from ipykernel import compiler

        get_file_name: Callable[[str], Any] = compiler.get_file_name  # the path ipykernel gives a cell

        raw = running_cell(self.kernel) or ""
        first = body_first_line(raw)
        if first == 1:  # no %%mgpu line
            return None
        path = str(get_file_name(raw))
        # the ranks number the cell's lines as the editor does (body_first_line): the panel's lines as they are
        lines = sorted((b for b in self.breaks.get(path, []) if b[0] >= first), key=lambda b: b[0])
        files = {p: marks for p, marks in self._files().items() if p != path}
        self.cell = {"path": path} if lines or files else None
        self.stopped, self.shown, self.reannounce_at = [], None, None
        return {"cell": lines, "files": files} if self.cell else None

    def script_breaks(self) -> dict[str, Any] | None:
        """The panel's breakpoints in files, for a ``%mgpu_run`` script (its own lines, its modules'); None
        when the panel is off or sets none. The script's ranks are then the debug session's threads."""
        if not self.started():
            return None
        files = self._files()
        self.cell = {"path": ""} if files else None
        self.stopped, self.shown, self.reannounce_at = [], None, None
        return {"files": files} if files else None

    def _files(self) -> dict[str, list[list[Any]]]:
        """The panel's breakpoints in files on disk, not in ipykernel's copies of the notebook's cells."""
        from ipykernel import compiler

        tmp_directory: Callable[[], Any] = compiler.get_tmp_directory
        cells = str(tmp_directory())
        return {p: m for p, m in self.breaks.items() if m and not p.startswith(cells) and os.path.isfile(p)}

    def cell_ended(self) -> None:
        with self.lock:
            ranks, self.stopped, self.cell = list(self.stopped), [], None
            if self.shown is not None and self.shown not in ranks:
                ranks.append(self.shown)
            self.shown = None
        for r in ranks:
            self._event("continued", {"threadId": THREADS + r, "allThreadsContinued": False})

    # -- the wait loop -----------------------------------------------------------------------
    def rank_stopped(self, s: Any, rank: int, prompt: dict[str, Any]) -> None:
        """Rank ``rank`` stopped at a breakpoint (or after a step): tell the panel if it shows no other
        rank now (it shows one thread's stack); else the rank waits its turn."""
        self.session = s
        with self.lock:
            if rank not in self.stopped:
                self.stopped.append(rank)
            show = self.shown is None or self.shown == rank
            if show:
                self.shown, self.reannounce_at = rank, None
        if show:
            self._stopped(rank)

    def tick(self) -> None:
        """Once the shown rank went on (``c``) or stepped without stopping again, show the next stopped one."""
        with self.lock:
            due = self.reannounce_at is not None and time.monotonic() >= self.reannounce_at
            rank = None
            if due and (self.shown is None or self.shown not in self.stopped):
                self.reannounce_at = None
                rank = self.shown = min(self.stopped) if self.stopped else None
        if rank is not None:
            self._stopped(rank)

    def _stopped(self, rank: int) -> None:
        self._event("stopped", {"reason": "breakpoint", "threadId": THREADS + rank, "allThreadsStopped": False})

    def _event(self, name: str, body: dict[str, Any]) -> None:
        self.debugger.event_callback({"type": "event", "event": name, "seq": 0, "body": body})

    # -- the panel's requests ----------------------------------------------------------------
    async def process_request(self, message: dict[str, Any]) -> dict[str, Any]:
        command = message.get("command")
        args = message.get("arguments") or {}
        if command == "setBreakpoints":
            path = (args.get("source") or {}).get("path")
            if path:  # a file's path from the labextension (file_breakpoints.ts) may start with ~
                self.breaks[os.path.expanduser(path)] = [
                    [int(b["line"]), b.get("condition") or None, panel_breaks.hit_count(b.get("hitCondition"))]
                    for b in args.get("breakpoints") or []
                ]
        if command == "disconnect":
            self.breaks = {}
        mine = self._handle(command, args, message)
        if mine is not None:
            return mine
        reply: dict[str, Any] = await self.original(message)
        if command == "threads" and self.cell is not None and self.session is not None and reply.get("success"):
            ranks = [{"id": THREADS + r, "name": f"rank {r}"} for r in range(self.session.world_size)]
            reply.setdefault("body", {}).setdefault("threads", []).extend(ranks)
        return reply

    def _handle(self, command: Any, args: dict[str, Any], message: dict[str, Any]) -> dict[str, Any] | None:
        """A reply for a request about a rank; None for the kernel's own."""
        thread = args.get("threadId")
        if command == "continue" and args.get(ALL_RANKS) is True and self.cell is not None:
            return self._continue_all(message)
        if command in STEPS and isinstance(thread, int):
            rank = self._rank_of(thread)
            if rank is not None:
                return self._step(rank, STEPS[command], message)
        if command == "stackTrace" and isinstance(thread, int) and thread >= THREADS:
            return _reply(
                message, {"stackFrames": (frames := self._frames(thread - THREADS)), "totalFrames": len(frames)}
            )
        frame = args.get("frameId")
        if command == "scopes" and isinstance(frame, int) and frame >= FRAMES:
            scope = {"name": "Locals", "variablesReference": VARIABLES + frame - FRAMES, "expensive": False}
            return _reply(message, {"scopes": [scope]})
        if command == "evaluate" and isinstance(frame, int) and frame >= FRAMES:  # the console, on the shown rank
            rank, index = divmod(frame - FRAMES, SPAN)
            got = self._ask(rank, "debug-eval", json.dumps({"index": index, "expression": args.get("expression", "")}))
            if "error" in got or "result" not in got:
                return _reply(message, message=f"rank {rank}: {got.get('error', 'no answer')}")
            return _reply(message, {"result": got["result"], "type": got.get("type"), "variablesReference": 0})
        if command in ("evaluate", "pause") and (
            (isinstance(frame, int) and frame >= FRAMES) or (isinstance(thread, int) and thread >= THREADS)
        ):
            return _reply(message, message=f"{command} is not available on a rank: use the input box (breakpoint())")
        variables = args.get("variablesReference")
        if command == "variables" and isinstance(variables, int) and variables >= VARIABLES:
            rank, index = divmod(variables - VARIABLES, SPAN)
            return _reply(message, {"variables": self._variables(rank, index)})
        return None

    def _rank_of(self, thread: int) -> int | None:
        """The rank a step request is for. JupyterLab sends ``continue`` for the thread it shows after it
        has forgotten it (thread 1): while a rank is shown and the kernel's own thread is not stopped,
        that means the shown rank."""
        if thread >= THREADS:
            return thread - THREADS
        if self.cell is not None and self.shown is not None:
            if thread not in getattr(self.debugger, "stopped_threads", set()):
                return self.shown
        return None

    def _ask(self, rank: int, command: str, body: str | None = None) -> dict[str, Any]:
        if self.session is None:
            return {}
        return rank_debugging.ask(self.session, rank, command, body)

    def _frames(self, rank: int) -> list[dict[str, Any]]:
        cell = self.cell or {}
        out = []
        for f in self._ask(rank, "debug-frames").get("frames", []):
            path, line = f["file"], int(f["line"])
            if path.startswith(CELL_FILES) and cell:
                path = cell["path"]
            out.append(
                {
                    "id": FRAMES + rank * SPAN + int(f["index"]),
                    "name": f"rank {rank} · {f['name']}",
                    "line": line,
                    "column": 1,
                    "source": {"path": path, "name": path.rsplit("/", 1)[-1]},
                }
            )
        return out

    def _variables(self, rank: int, index: int) -> list[dict[str, Any]]:
        """The frame's locals for the panel. JupyterLab shows a variable's type in place of its value for every
        type but int, float, bool and str (``device: device``): the others go without their type, so that
        their value shows (``device: device(type='cpu')``)."""
        got = self._ask(rank, "debug-vars", json.dumps({"index": index})).get("variables", [])
        return [
            {
                **{k: v for k, v in var.items() if k != "type" or v in SHOWN_TYPES},
                "variablesReference": 0,
                "evaluateName": var["name"],
            }
            for var in got
        ]

    def _send(self, rank: int, line: str, panel_only: bool = False) -> bool:
        """Answer ``rank``'s pdb prompt with ``line``; False when it is at none (or, ``panel_only``, at one the
        notebook's input box serves: a ``breakpoint()`` in the code)."""
        prompt = self._ask(rank, "debug-take")
        if not prompt.get("prompt") or (panel_only and not prompt.get("panel")):
            return False
        said = self._ask(rank, "debug-line", json.dumps({"n": prompt["n"], "line": line, "eof": False}))
        return bool(said.get("ok"))

    def _continue_all(self, message: dict[str, Any]) -> dict[str, Any]:
        """Every rank stopped at one of the panel's breakpoints goes on (pdb's ``c``), those not shown yet too;
        a rank that reaches a breakpoint again stops there and is shown."""
        size = int(getattr(self.session, "world_size", 0) or 0)
        with self.lock:  # a rank stopping again is announced after these continued events, never before
            went = [r for r in range(size) if self._send(r, "c", panel_only=True)]
            for r in went:
                self._event("continued", {"threadId": THREADS + r, "allThreadsContinued": True})
            self.stopped = [r for r in self.stopped if r not in went]
            if self.shown in went:
                self.shown = None
            self.reannounce_at = time.monotonic() + REANNOUNCE_S
        if not went:
            return _reply(message, message="no rank is stopped at a breakpoint of the debugger panel")
        return _reply(message, {"allThreadsContinued": True})

    def _step(self, rank: int, line: str, message: dict[str, Any]) -> dict[str, Any]:
        if not self._send(rank, line):
            return _reply(message, message=f"rank {rank} is not stopped")
        with self.lock:
            if rank in self.stopped:
                self.stopped.remove(rank)
            if line == "c":  # gone on: the next stopped rank is shown once the panel has settled
                self.shown = None if self.shown == rank else self.shown
                self.reannounce_at = time.monotonic() + REANNOUNCE_S
            else:  # a step: the rank stops again at once, or the next one is shown after a while
                self.reannounce_at = time.monotonic() + STEP_WAIT_S
        self._event("continued", {"threadId": THREADS + rank, "allThreadsContinued": False})
        return _reply(message, {"allThreadsContinued": False})


def install(ipython: Any) -> PanelBridge | None:
    """Put the bridge in front of ipykernel's debugger (a kernel without one: nothing to do)."""
    kernel = getattr(ipython, "kernel", None)
    debugger = getattr(kernel, "debugger", None)
    if debugger is None or (rank_debugging.panel is not None and rank_debugging.panel.kernel is kernel):
        return None
    bridge = PanelBridge(kernel)
    debugger.process_request = bridge.process_request
    rank_debugging.panel = bridge
    return bridge
