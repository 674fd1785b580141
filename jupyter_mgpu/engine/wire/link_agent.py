"""The engine's end of its link to the notebook's host (see ``link.py`` and ``launch/relay.py``).

Two daemon threads in a remote engine, independent of its main thread (which may sit in a C++
collective for minutes):

- the *mirror* sends what the rank writes into its private runtime directory — telemetry records
  (whole, when they change: 20 checks a second), trace and metrics files (appended bytes, or the
  whole file again when it was started anew) — and a ping each second;
- the *reader* applies what comes down: the kernel's telemetry steering (``control.json``), SIGINT
  for the stop button, and byte streams to this engine's guard and direct-channel sockets, which the
  relay exposes on the kernel's host under the names the kernel already uses.

When the link ends (the kernel, its relay or the network is gone, or the cluster stops) the engine
removes its runtime directory and exits: nothing is left running on this host.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from jupyter_mgpu.engine.wire import link as lk

TICK = 0.05  # seconds between looks at the telemetry record
LOG_EVERY = 4  # ticks between walks of the trace and metrics folders
PING_EVERY = 1.0
SILENCE = 10.0  # the relay pings each second: this long without a frame means the notebook's host is gone
PREFIX = 256  # bytes of a log file compared to tell an append from a file started anew
CHUNK = 512 * 1024  # most bytes of one file sent per walk

_agent: Agent | None = None


class Agent:
    """One engine's link: mirror up, steering and relayed streams down."""

    def __init__(self, rundir: str, rank: int, link: lk.Link) -> None:
        self.rundir = Path(rundir)
        self.rank = rank
        self.link = link
        self.sent: dict[str, tuple[int, int, bytes]] = {}  # path -> (inode, bytes sent, prefix digest)
        self.records: dict[str, bytes] = {}
        self.streams = lk.Streams(link)
        self.halt = threading.Event()
        self.last_send = time.monotonic()

    # -- up --------------------------------------------------------------------------------
    def _send(self, kind: int, payload: bytes = b"", channel: int = 0) -> None:
        self.link.send(kind, payload, channel)
        self.last_send = time.monotonic()

    def _record(self, rel: str) -> None:
        """A telemetry record: sent whole when it changed and parses (a torn read waits a tick)."""
        try:
            raw = (self.rundir / rel).read_bytes()
        except OSError:
            return
        if self.records.get(rel) == raw:
            return
        try:
            data = json.loads(raw)
        except ValueError:
            return
        if not isinstance(data, dict) or data.get("check", data.get("seq")) != data.get("seq"):
            return
        self.records[rel] = raw
        self._send(lk.PUT, lk.pack_path(rel, raw.rstrip()))

    def _log(self, rel: str, path: Path) -> None:
        """An append-only file: new bytes as APPEND, or all of it again (PUT) when it was started anew."""
        try:
            st = path.stat()
            with open(path, "rb") as f:
                head = f.read(PREFIX)
                inode, sent, digest = self.sent.get(rel, (None, 0, b""))
                same = (
                    rel in self.sent
                    and inode == st.st_ino
                    and st.st_size >= sent
                    and hashlib.sha256(head[: min(sent, PREFIX)]).digest() == digest
                )
                if same and st.st_size == sent:
                    return
                start = sent if same else 0
                f.seek(start)
                body = f.read(min(st.st_size - start, CHUNK))  # the rest on the next walk
        except OSError:
            return
        end = start + len(body)
        if same:
            self._send(lk.APPEND, lk.pack_path(rel, body, start))
        else:
            self._send(lk.PUT, lk.pack_path(rel, body))
        self.sent[rel] = (st.st_ino, end, hashlib.sha256(head[: min(end, PREFIX)]).digest())

    def _walk(self) -> None:
        seen = set()
        for top in lk.MIRRORED_DIRS:
            if top == "telemetry":
                continue
            base = self.rundir / top
            if not base.is_dir():
                continue
            for here, _, files in os.walk(base):
                for name in files:
                    path = Path(here) / name
                    rel = path.relative_to(self.rundir).as_posix()
                    if name.startswith(".") or not lk.safe_relative(rel) or not path.is_file():
                        continue
                    seen.add(rel)
                    self._log(rel, path)
        for rel in set(self.sent) - seen:
            del self.sent[rel]
            self._send(lk.GONE, lk.pack_path(rel))

    def mirror(self) -> None:
        ticks = 0
        record = f"telemetry/rank{self.rank}.json"
        try:
            while not self.halt.is_set():
                self._record(record)
                if ticks % LOG_EVERY == 0:
                    self._walk()
                if time.monotonic() - self.last_send > PING_EVERY:
                    self._send(lk.PING)
                ticks += 1
                time.sleep(TICK)
        except (OSError, lk.AuthError):
            self.end(3)

    # -- down ------------------------------------------------------------------------------
    def read(self) -> None:
        try:
            while True:
                channel, kind, payload = self.link.recv()
                self._handle(channel, kind, payload)
        except (EOFError, OSError, lk.AuthError):
            pass
        self.end(3)

    def _handle(self, channel: int, kind: int, payload: bytes) -> None:
        if kind == lk.CONTROL:
            directory = self.rundir / "telemetry"
            directory.mkdir(mode=0o700, exist_ok=True)
            tmp = directory / ".control.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, payload)
            finally:
                os.close(fd)
            os.replace(tmp, directory / "control.json")
        elif kind == lk.INTERRUPT:
            os.kill(os.getpid(), signal.SIGINT)
        elif kind == lk.OPEN:
            self._open(channel, payload.decode())
        elif kind == lk.DATA:
            self.streams.data(channel, payload)
        elif kind == lk.CLOSE:
            self.streams.remote_closed(channel)
        elif kind == lk.BYE:
            self.end(0)

    def _open(self, channel: int, name: str) -> None:
        from jupyter_mgpu.engine.wire import unix_socket

        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if name not in ("guard", "direct"):
                raise OSError(f"no stream named {name!r}")
            unix_socket.connect(conn, self.rundir / f"{name}.{self.rank}.sock")
        except OSError:
            conn.close()
            self._send(lk.CLOSE, b"", channel)
            return
        self.streams.add(channel, conn, name)

    def end(self, code: int) -> None:
        """The link is over: remove this engine's runtime directory and exit at once."""
        self.halt.set()
        shutil.rmtree(self.rundir, ignore_errors=True)
        os._exit(code)


def start(
    rundir: str, rank: int, address: str, port: int, key: bytes, hello: dict[str, Any], timeout: float = 10.0
) -> Agent:
    """Connect to the relay at ``address:port``, authenticate, and start the agent's threads."""
    global _agent
    sock = socket.create_connection((address, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        session_key, _ = lk.client_handshake(sock, key, {"role": "engine", "rank": rank, **hello})
    except BaseException:
        sock.close()
        raise
    sock.settimeout(SILENCE)
    _agent = Agent(rundir, rank, lk.Link(sock, session_key, is_client=True))
    threading.Thread(target=_agent.read, name="mgpu-link-reader", daemon=True).start()
    threading.Thread(target=_agent.mirror, name="mgpu-link-mirror", daemon=True).start()
    return _agent
