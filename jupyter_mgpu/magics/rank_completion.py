"""Tab and Shift-Tab in ``%%mgpu`` cells, answered by the ranks instead of the notebook.

The body of a ``%%mgpu`` cell runs on the ranks, so its completions and tooltips come from there:
``install`` wraps the ipykernel's ``do_complete`` and ``do_inspect``; for a cell whose first line is
``%%mgpu ...`` and a cursor below that line, the body is sent to rank 0 (the first rank of
``--targets``, if the line names some) on its completion socket (``engine/execution/completion_server.py``,
answered from a thread while the rank runs a cell), and the reply's positions are moved back into the
cell. Within :data:`BUDGET` seconds, or :data:`LOADED_BUDGET` while the rank is seen running (a loaded
machine answers slower, and the kernel's own answer would be wrong), or not at all: without a session,
with a dead, stopped or stuck rank, with
ranks on another host (their sockets are not mirrored here), or on any error, the kernel's own answer
is given, as in every other cell.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_mgpu.engine.execution import completion_server
from jupyter_mgpu.engine.execution.direct_channel import recv_frames, send_frames
from jupyter_mgpu.engine.records.telemetry import TELEMETRY_DIR, read_sample_file
from jupyter_mgpu.engine.wire import unix_socket

BUDGET = 0.2  # seconds a Tab may wait for a rank, connecting included
LOADED_BUDGET = 5.0  # seconds it may wait while the rank is seen running (its telemetry moves): a loaded machine
# a rank whose telemetry record is older than this, and than three of its sampling periods, is not seen running
# (stopped, hung, gone); a rank starved of its cores on a loaded machine writes late (CI saw 0.6 s crossed)
STALE_S = 2.0
_TARGETS = re.compile(r"(?:--targets|-t)(?:[ \t]+|=)(\S+)")


def mgpu_body(code: str, cursor_pos: int | None) -> tuple[int, str] | None:
    """Where a ``%%mgpu`` cell's body starts and its first line, when the cursor is in the body; else None.
    In auto mode a code cell without a magic is a body from its start."""
    from jupyter_mgpu.magics.auto_mode import AUTO

    if AUTO.on and not code.lstrip().startswith("%"):  # %mgpu_auto on: a code cell is a %%mgpu cell
        return 0, "%%mgpu"
    newline = code.find("\n")
    if newline < 0 or code[:newline].split(maxsplit=1)[:1] != ["%%mgpu"]:
        return None
    pos = len(code) if cursor_pos is None else cursor_pos
    return (newline + 1, code[:newline]) if pos > newline else None


def first_target(line: str, world_size: int) -> int:
    """The rank that answers for a ``%%mgpu`` line: the first of its ``--targets``, else rank 0."""
    from jupyter_mgpu.session.targets import parse_targets

    found = _TARGETS.search(line)
    if found is None:
        return 0
    try:
        return parse_targets(found.group(1).strip("'\""), world_size)[0]
    except Exception:
        return 0


class RankAsker:
    """One cached connection per completion socket; a request that ran out of time closes its connection."""

    def __init__(self) -> None:
        self.socks: dict[Path, socket.socket] = {}

    def ask(
        self, path: Path, request: dict[str, Any], timeout: float, alive: Callable[[], bool] | None = None
    ) -> dict[str, Any] | None:
        """The rank's reply to ``request`` within ``timeout`` seconds, or None; past ``timeout``, as long
        as ``alive()`` says the rank still runs (a loaded machine: slower, not gone), up to :data:`LOADED_BUDGET`."""
        start = time.monotonic()
        deadline = start + timeout
        for attempt in (0, 1):  # a cached connection the rank closed (a restarted engine): reconnect once
            fresh = path not in self.socks
            try:
                sock = self._sock(path, timeout)
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                send_frames(sock, [json.dumps(request).encode()])
                while not select.select([sock], [], [], max(deadline - time.monotonic(), 0))[0]:
                    if alive is None or time.monotonic() - start >= LOADED_BUDGET or not alive():
                        raise TimeoutError("no answer from the rank")
                    deadline = min(start + LOADED_BUDGET, time.monotonic() + 0.1)
                sock.settimeout(max(start + LOADED_BUDGET - time.monotonic(), 0.001))
                return dict(json.loads(bytes(recv_frames(sock)[0])))
            except (OSError, EOFError, ValueError) as exc:
                self.forget(path)  # a late reply must never answer the next request
                if fresh or attempt or isinstance(exc, TimeoutError) or time.monotonic() >= deadline:
                    return None
        return None

    def _sock(self, path: Path, timeout: float) -> socket.socket:
        sock = self.socks.get(path)
        if sock is None:
            for gone in [p for p in self.socks if not p.exists()]:  # a cluster that was shut down
                self.forget(gone)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                unix_socket.connect(sock, path)
            except OSError:
                sock.close()
                raise
            self.socks[path] = sock
        return sock

    def forget(self, path: Path) -> None:
        sock = self.socks.pop(path, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for path in list(self.socks):
            self.forget(path)


_ASKER = RankAsker()


def rank_reply(
    op: str, code: str, cursor_pos: int | None, timeout: float = BUDGET, **extra: Any
) -> dict[str, Any] | None:
    """A rank's ``complete`` or ``inspect`` reply for a ``%%mgpu`` cell, in the cell's positions; None when
    the cell is not one, the cursor is on its ``%%mgpu`` line, or no rank answered well within ``timeout``."""
    from jupyter_mgpu.session.lifecycle import current

    body = mgpu_body(code, cursor_pos)
    session = current(required=False)
    if body is None or session is None or session.broken:
        return None
    offset, line = body
    pos = len(code) if cursor_pos is None else cursor_pos
    rank = first_target(line, session.world_size)
    path = completion_server.socket_path(session.runtime_dir, rank)
    request = {"op": op, "code": code[offset:], "cursor_pos": pos - offset, **extra}
    reply = _ASKER.ask(path, request, timeout, alive=lambda: _seen_running(session.runtime_dir, rank))
    if reply is None or reply.get("status") != "ok":
        return None
    if op == "complete":
        reply["cursor_start"] += offset
        reply["cursor_end"] += offset
        for kind in reply.get("metadata", {}).get(completion_server.EXPERIMENTAL_KEY, []):
            kind["start"] += offset
            kind["end"] += offset
    return reply


def _seen_running(rundir: Any, rank: int) -> bool:
    """Whether ``rank``'s sampler wrote its telemetry record lately: the engine runs, however slowly. Lately:
    within :data:`STALE_S`, or three of the rank's sampling periods where it samples less often."""
    record = Path(rundir) / TELEMETRY_DIR / f"rank{rank}.json"
    try:
        age = time.time() - os.stat(record).st_mtime
    except OSError:
        return False
    return age < STALE_S or age < 3 * _period(record)


def _period(record: Path) -> float:
    """The sampling period a telemetry record states (0 where it cannot be read: half written, gone)."""
    period = (read_sample_file(record) or {}).get("period")
    return float(period) if isinstance(period, (int, float)) and not isinstance(period, bool) else 0.0


async def _own(answer: Any) -> Any:
    return (await answer) if inspect.isawaitable(answer) else answer


def install(ipython: Any) -> None:
    """In an ipykernel, let the ranks answer Tab and Shift-Tab in ``%%mgpu`` cells (once per kernel)."""
    kernel = getattr(ipython, "kernel", None)
    if kernel is None or getattr(kernel, "_mgpu_rank_completion", False):
        return
    own_complete, own_inspect = kernel.do_complete, kernel.do_inspect

    async def do_complete(code: str, cursor_pos: int | None) -> Any:
        try:
            reply = rank_reply("complete", code, cursor_pos)
        except Exception:
            reply = None
        return reply if reply is not None else await _own(own_complete(code, cursor_pos))

    async def do_inspect(code: str, cursor_pos: int | None, detail_level: int = 0, omit_sections: Any = ()) -> Any:
        try:
            reply = rank_reply(
                "inspect", code, cursor_pos, detail_level=detail_level, omit_sections=list(omit_sections)
            )
            if reply is not None and not getattr(ipython, "enable_html_pager", True):
                reply.get("data", {}).pop("text/html", None)  # as ipykernel's own do_inspect
        except Exception:
            reply = None
        if reply is not None:
            return reply
        return await _own(own_inspect(code, cursor_pos, detail_level, omit_sections))

    kernel.do_complete, kernel.do_inspect = do_complete, do_inspect
    kernel._mgpu_rank_completion = True
