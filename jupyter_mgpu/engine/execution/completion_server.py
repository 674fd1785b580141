"""Tab and Shift-Tab for ``%%mgpu`` cells, answered from this rank's own namespace.

A ``%%mgpu`` cell runs on the ranks, so the names worth completing (a model built there, a name only
the ranks define) live in the engines, not in the notebook kernel. Each engine serves completion and
inspection from a daemon thread on ``complete.<rank>.sock`` in the cluster's private (0700) runtime
dir: the thread answers while the main thread runs a long cell (the GIL switches every 5 ms), so Tab
never waits for a cell to end. The kernel side is ``magics/rank_completion.py``.

Frames as the direct channel's (``engine/execution/direct_channel.py``); one JSON part each way. A request is
``{"op": "complete" | "inspect", "code", "cursor_pos", "detail_level", "omit_sections"}`` with ``code`` the cell's body;
the reply is what ipykernel's ``do_complete`` / ``do_inspect`` reply with, for that body. Completion
uses IPython's own matchers with jedi off: jedi's first look at torch takes over a second, the
namespace matchers answer in well under a millisecond and evaluate nothing (IPython's ``limited``
policy), which matters in a thread running beside the user's cell.

Ranks on other hosts serve the socket in their own host's runtime dir, which the relay does not
mirror: there the kernel falls back to its own completion.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

from jupyter_mgpu.engine.execution.direct_channel import recv_frames, send_frames
from jupyter_mgpu.engine.wire import unix_socket

SOCKET_NAME = "complete.{rank}.sock"
IDLE_TIMEOUT = 3600.0  # a kernel's cached connection may sit idle; a dead one is dropped after this
EXPERIMENTAL_KEY = "_jupyter_types_experimental"  # ipykernel's metadata key for typed completions


def socket_path(rundir: str | Path, rank: int) -> Path:
    return Path(rundir) / SOCKET_NAME.format(rank=rank)


class Answerer:
    """Completion and inspection against one IPython shell's namespace (one request at a time)."""

    def __init__(self, shell: Any, rank: int) -> None:
        from IPython.core.completer import IPCompleter

        self.shell = shell
        self.rank = rank
        self.lock = threading.Lock()
        self.completer = IPCompleter(
            shell=shell, namespace=shell.user_ns, global_namespace=shell.user_global_ns, parent=shell
        )
        self.completer.use_jedi = False  # see the module docstring

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request; a bad request is one sentence naming this rank."""
        op = request.get("op")
        code = request.get("code")
        pos = request.get("cursor_pos")
        if not isinstance(code, str) or not isinstance(pos, int) or not 0 <= pos <= len(code):
            return _error(f"rank {self.rank}: a completion request needs code and a cursor_pos inside it")
        with self.lock:
            if op == "complete":
                return self.complete(code, pos)
            if op == "inspect":
                omit = tuple(request.get("omit_sections") or ())
                return self.inspect(code, pos, int(request.get("detail_level") or 0), omit)
        return _error(f"rank {self.rank}: unknown completion request {op!r} (expected complete or inspect)")

    def complete(self, code: str, cursor_pos: int) -> dict[str, Any]:
        """As ipykernel's ``_experimental_do_complete``: matches, their span and their types."""
        from IPython.core.completer import provisionalcompleter, rectify_completions

        with provisionalcompleter():
            found = list(rectify_completions(code, self.completer.completions(code, cursor_pos)))
        kinds = [
            {"start": c.start, "end": c.end, "text": c.text, "type": c.type, "signature": c.signature} for c in found
        ]
        for k in kinds:  # ".weight" over ".we" (IPython without jedi) as the kernel shows it: "weight" over "we"
            if k["text"].startswith(".") and code[k["start"] : k["start"] + 1] == ".":
                k["text"], k["start"] = k["text"][1:], k["start"] + 1
        start, end = (kinds[0]["start"], kinds[0]["end"]) if kinds else (cursor_pos, cursor_pos)
        return {
            "matches": [k["text"] for k in kinds],
            "cursor_start": start,
            "cursor_end": end,
            "metadata": {EXPERIMENTAL_KEY: kinds},
            "status": "ok",
        }

    def inspect(
        self, code: str, cursor_pos: int, detail_level: int, omit_sections: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """As ipykernel's ``do_inspect``: the mime bundle of the name at the cursor."""
        from IPython.utils.tokenutil import token_at_cursor

        name = token_at_cursor(code, cursor_pos)
        try:
            bundle = self.shell.object_inspect_mime(name, detail_level=detail_level, omit_sections=omit_sections)
        except KeyError:
            return {"status": "ok", "data": {}, "metadata": {}, "found": False}
        return {"status": "ok", "data": dict(bundle), "metadata": {}, "found": True}


def _error(sentence: str) -> dict[str, Any]:
    return {"status": "error", "ename": "ValueError", "evalue": sentence, "traceback": []}


class Server(threading.Thread):
    """Accepts the kernel's connections; each is served by its own daemon thread."""

    def __init__(self, rundir: str, rank: int, shell: Any) -> None:
        super().__init__(name="mgpu-completion", daemon=True)
        self.answerer = Answerer(shell, rank)
        self.path = socket_path(rundir, rank)
        self.sock = unix_socket.listen_private(self.path, 4)

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not unix_socket.same_user(conn):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="mgpu-completion-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(IDLE_TIMEOUT)
        with conn:
            while True:
                try:
                    parts = recv_frames(conn)
                except (EOFError, OSError):
                    return
                try:
                    reply = self.answerer.answer(json.loads(bytes(parts[0])))
                except Exception as exc:  # the completer's own failure: the kernel falls back
                    reply = _error(f"rank {self.answerer.rank}: {type(exc).__name__}: {exc}")
                try:
                    send_frames(conn, [json.dumps(reply, default=str).encode()])
                except OSError:  # the kernel gave up waiting and closed: nothing to answer
                    return


def start(user_ns: dict[str, Any]) -> Server | None:
    """Serve this rank's completion socket from a daemon thread (run at engine start)."""
    from IPython import get_ipython

    from jupyter_mgpu.engine import state as rank_state

    shell = get_ipython()
    if shell is None:  # not inside an IPython engine: nothing to complete
        return None
    st = rank_state.get()
    server = Server(st.rundir, st.rank, shell)
    server.start()
    return server
