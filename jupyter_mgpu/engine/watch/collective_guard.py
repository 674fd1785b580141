"""Release this rank from collectives that can never complete, without ending the engine.

A rank blocked inside a gloo collective sits in C++ and never sees the stop button's SIGINT; left
alone it would later be matched with a *different* collective of another rank and return wrong
numbers. The kernel asks each rank, over a private Unix socket served by a thread of this module,
how far its current call has got and, when the call must end, to release it: the rank half-closes
(``SHUT_WR``) every socket its process groups opened, so each pending gloo operation on either end
fails at once with "Connection closed by peer" while the engine, its shards and its variables live
on; nccl communicators are aborted instead. The kernel then rebuilds the process group on every rank.

Which sockets belong to gloo is learned when a group is made: ``_new_process_group_helper`` (the one
function every ``init_process_group``/``new_group``/``DeviceMesh`` goes through) is wrapped to note the
socket inodes a group creation added to this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.wire import unix_socket

if TYPE_CHECKING:
    from jupyter_mgpu.engine.state import EngineState

SOCKET_NAME = "guard.{rank}.sock"
REQUEST_TIMEOUT = 2.0
_group_sockets: set[int] = set()  # inodes of sockets opened while making process groups
# callables returning inodes of sockets that are never the group's own, even when opened meanwhile
# (the rendezvous store's connections across hosts, which later groups still need)
exclusions: list[Callable[[], set[int]]] = []
_lock = threading.Lock()
_installed = False
# more requests, by name: each gets the request's body (``name <bytes>\n`` then that many bytes) and
# returns the reply
# (the rank's debugger registers ``debug-take`` and ``debug-line``: engine/execution/rank_debugger.py)
commands: dict[str, Callable[[str], dict[str, Any]]] = {}
MAX_REQUEST = 1 << 20


def socket_path(rundir: str | Path, rank: int) -> Path:
    return Path(rundir) / SOCKET_NAME.format(rank=rank)


def _socket_inodes() -> dict[int, int]:
    """This process's open sockets: inode -> fd."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(name)
    return out


def install() -> None:
    """Note the sockets of every process group made from now on (run before the first group)."""
    global _installed
    if _installed:
        return
    import torch.distributed.distributed_c10d as c10d

    original: Callable[..., Any] | None = getattr(c10d, "_new_process_group_helper", None)
    if original is None:  # another torch: only groups made through note_group_sockets() are known
        _installed = True
        return

    def tracked(*args: Any, **kwargs: Any) -> Any:
        with note_group_sockets():
            return original(*args, **kwargs)

    tracked.__wrapped__ = original  # type: ignore[attr-defined]
    c10d._new_process_group_helper = tracked
    _installed = True


@contextlib.contextmanager
def note_group_sockets() -> Iterator[None]:
    """Remember the sockets opened inside the block as process-group sockets."""
    before = set(_socket_inodes())
    try:
        yield
    finally:
        added = set(_socket_inodes()) - before
        for excluded in exclusions:
            added -= excluded()
        with _lock:
            _group_sockets.update(added)


release_count = 0  # how many releases this process has had (a wait of the watch's own ends on one)


def release(backend: str | None = None) -> int:
    """Make every pending collective of this process fail now; returns how many sockets were closed."""
    global release_count
    release_count += 1
    released = 0
    if backend == "nccl":
        with contextlib.suppress(Exception):
            import torch.distributed.distributed_c10d as c10d

            c10d._abort_process_group()
            released += 1
    with _lock:
        wanted = set(_group_sockets)
    for inode, fd in _socket_inodes().items():
        if inode not in wanted:
            continue
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                if s.type == socket.SOCK_STREAM and s.family in (socket.AF_INET, socket.AF_INET6):
                    s.shutdown(socket.SHUT_WR)  # the peer reads EOF and closes: both ends fail cleanly
                    released += 1
        except OSError:  # a listening or already closed socket
            pass
    return released


def progress(state: EngineState) -> dict[str, Any]:
    """Whether this rank is inside a call, and how many collectives it has entered during it."""
    from jupyter_mgpu.engine import state as rank_state

    seq0 = getattr(state, "call_seq0", None)
    seq = rank_state.sequence_number()
    return {
        "rank": state.rank,
        # from the moment a direct-channel request is read: the kernel's stop then finds it busy, never idle
        # just before its call begins
        "in_call": bool(getattr(state, "call_depth", 0)) or bool(getattr(state, "serving", False)),
        "collectives": None if seq0 is None or seq is None else seq - seq0,
        "generation": state.pg_generation,
        "begun": getattr(state, "calls_begun", 0),
    }


class Listener(threading.Thread):
    """Answers the kernel's ``progress``, ``where`` and ``release`` requests (and those in :data:`commands`)
    while the main thread is busy."""

    def __init__(self, rundir: str, state: EngineState) -> None:
        super().__init__(name="mgpu-collective-guard", daemon=True)
        self.state = state
        self.path = socket_path(rundir, state.rank)
        self.sock = unix_socket.listen_private(self.path, 8)

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    self._serve(conn)
                except Exception:
                    pass

    def _serve(self, conn: socket.socket) -> None:
        if not unix_socket.same_user(conn):
            return
        conn.settimeout(REQUEST_TIMEOUT)
        command, body = _read_request(conn)
        if command in commands:
            reply = commands[command](body)
        elif command == "release":
            reply = {"released": release(self.state.backend), **progress(self.state)}
        elif command == "progress":
            reply = progress(self.state)
        elif command == "where":
            from jupyter_mgpu.engine.watch import collective_watch

            reply = {**collective_watch.where(self.state), "stack": collective_watch.stack(), "rank": self.state.rank}
        else:
            reply = {"error": f"unknown request {command!r}"}
        conn.sendall(json.dumps(reply).encode())


def _read_request(conn: socket.socket) -> tuple[str, str]:
    """A request's name and body: ``name\n``, or ``name <bytes>\n`` and a body of that many bytes.
    Ended by its length, never by the client's half-close (a relay across hosts need not pass it on)."""
    data = b""
    while b"\n" not in data and len(data) < 256:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    header, _, rest = data.partition(b"\n")
    words = header.decode().split()
    if not words:
        return "", ""
    size = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
    size = min(size, MAX_REQUEST)
    while len(rest) < size:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return words[0], rest[:size].decode()


def start(rundir: str, state: EngineState) -> Listener:
    """Serve this rank's guard socket from a daemon thread."""
    listener = Listener(rundir, state)
    listener.start()
    return listener


def ask(
    rundir: str | Path, rank: int, command: str, timeout: float = REQUEST_TIMEOUT, body: str | None = None
) -> dict[str, Any] | None:
    """Kernel side: send ``command`` (with ``body``, for a request of :data:`commands`) to ``rank``'s
    guard; its reply, or None if it cannot be reached."""
    raw = body.encode() if body is not None else b""
    request = (f"{command} {len(raw)}\n" if body is not None else f"{command}\n").encode() + raw
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            unix_socket.connect(s, socket_path(rundir, rank))
            s.sendall(request)
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        reply: dict[str, Any] = json.loads(data)
        return reply
    except (OSError, ValueError):
        return None


def ask_all(
    rundir: str | Path, ranks: list[int], command: str, timeout: float = REQUEST_TIMEOUT, body: str | None = None
) -> dict[int, dict[str, Any] | None]:
    """Kernel or server side: :func:`ask` every rank of ``ranks`` at once (up to 16 at a time), so that 64
    ranks with some silent take ``timeout`` once, not once each; rank -> its reply, or None."""
    from concurrent.futures import ThreadPoolExecutor

    if not ranks:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(ranks))) as pool:
        replies = pool.map(lambda r: ask(rundir, r, command, timeout, body), ranks)
        return dict(zip(ranks, replies))


def where_rows(
    rundir: str | Path, world_size: int, dead: Any, restarting: Any, timeout: float = REQUEST_TIMEOUT
) -> list[dict[str, Any]]:
    """Kernel or server side: what every rank does now, in rank order (``mg.where``'s rows and the sidebar's
    tree): ``state`` (``running``, ``collective``, ``idle``; ``dead`` and ``restarting`` ranks are not asked,
    a silent one reads ``unknown``), ``seconds`` in it, ``collective`` (``barrier #7``), ``line`` (the
    innermost line of the user's code) and ``stack`` (their frames, outermost first)."""
    import time

    dead, restarting = {int(r) for r in dead}, {int(r) for r in restarting}  # a state file's JSON may say "1"
    asked = [r for r in range(world_size) if r not in dead and r not in restarting]
    answers = ask_all(rundir, asked, "where", timeout)
    rows: list[dict[str, Any]] = []
    for r in range(world_size):
        w = answers.get(r) or {}
        since = float(w.get("since") or 0) if "state" in w else 0
        rows.append(
            {
                "rank": r,
                "state": w.get("state") or ("restarting" if r in restarting else "dead" if r in dead else "unknown"),
                "seconds": round(time.time() - since, 1) if since else None,
                "collective": w.get("collective"),
                "line": w.get("line"),
                "stack": list(w.get("stack") or []),
            }
        )
    return rows
