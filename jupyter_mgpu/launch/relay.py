"""The relay on the kernel's host for engines on other hosts (one process per cluster).

Run as ``python -m jupyter_mgpu.launch.relay RUNDIR``. It reads ``relay.json`` (0600: the link key,
the address to listen on, the kernel's pid, how long a silent link lives), listens on that address only (a port the OS picks,
written to ``relay.port``) and accepts one authenticated link per rank (``engine/wire/link.py``). For each
linked rank it makes the cluster directory look as it does on one host, so the kernel, its memory
monitor, trace and metrics readers and the server extension need no second code path:

- telemetry records, trace and metrics files arrive over the link and are written into the
  directory (records in place, as the samplers write them);
- ``guard.<rank>.sock`` and ``direct.<rank>.sock`` are served here and relayed to the engine's own;
- ``telemetry/control.json`` (the kernel's steering) is sent to every engine when it changes;
- a link that ends while the cluster runs becomes ``exits/<rank>.json`` (the engine or its host is
  gone), which every wait in the kernel already watches.

The kernel talks to the relay on ``relay.sock`` (interrupt ranks, which are linked, stop). The relay
ends its links and exits on SIGTERM, on ``stop`` and when the kernel's process is gone; engines
whose link ends exit too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.engine.wire import link as lk
from jupyter_mgpu.engine.wire import unix_socket

PORT_FILE = "relay.port"
CONFIG_FILE = "relay.json"
SOCKET_NAME = "relay.sock"
CONTROL_POLL = 0.05
PING_EVERY = 1.0  # the relay pings every link this often; each engine pings too
SILENCE = 10.0  # a link silent this long is lost (a host that vanished without closing its connections);
# the kernel writes it into relay.json (``silence``), so a test can shorten it


class Mirror:
    """Writes what the engines send into the cluster directory."""

    def __init__(self, rundir: Path) -> None:
        self.rundir = rundir
        self.records: dict[str, tuple[int, int]] = {}  # path -> (fd, bytes last written)
        self.lock = threading.Lock()

    def _path(self, rel: str) -> Path | None:
        if not lk.safe_relative(rel):
            return None
        path = self.rundir / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def put(self, rel: str, body: bytes) -> None:
        path = self._path(rel)
        if path is None:
            return
        if rel.startswith("telemetry/"):  # a record rewritten in place: readers keep it open
            with self.lock:
                fd, written = self.records.get(rel, (None, 4096))
                if fd is None:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                os.pwrite(fd, body.ljust(written), 0)
                self.records[rel] = (fd, len(body))
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)

    def append(self, rel: str, offset: int, body: bytes) -> None:
        path = self._path(rel)
        if path is None:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        except OSError:
            return  # removed here meanwhile: the engine sends it whole when it starts it anew
        try:
            if os.fstat(fd).st_size == offset:
                os.pwrite(fd, body, offset)
        finally:
            os.close(fd)

    def gone(self, rel: str) -> None:
        path = self._path(rel)
        if path is not None:
            with self.lock:
                kept = self.records.pop(rel, None)
            if kept:
                os.close(kept[0])
            path.unlink(missing_ok=True)


class RankLink:
    """The link of one rank: its relayed sockets and what it sends."""

    def __init__(self, relay: Relay, rank: int, link: lk.Link, hello: dict[str, Any]) -> None:
        self.relay, self.rank, self.link = relay, rank, link
        self.pid, self.host = hello.get("pid"), hello.get("host")
        self.streams = lk.Streams(link)
        self.next_channel = 1
        self.listeners: list[tuple[socket.socket, Path]] = []
        self.lock = threading.Lock()

    def serve(self) -> None:
        for name in ("guard", "direct"):
            path = self.relay.rundir / f"{name}.{self.rank}.sock"
            sock = unix_socket.listen_private(path, 16)
            self.listeners.append((sock, path))
            threading.Thread(
                target=self._accept, args=(sock, name), name=f"mgpu-relay-{name}{self.rank}", daemon=True
            ).start()
        threading.Thread(target=self._read, name=f"mgpu-relay-link{self.rank}", daemon=True).start()

    def _accept(self, sock: socket.socket, name: str) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            if not unix_socket.same_user(conn):
                conn.close()
                continue
            with self.lock:
                channel = self.next_channel
                self.next_channel += 1
            self.streams.add(channel, conn, name, announce=name.encode())

    def _read(self) -> None:
        mirror = self.relay.mirror
        try:
            while True:
                channel, kind, payload = self.link.recv()
                if kind == lk.PUT:
                    rel, _, body = lk.unpack_path(payload)
                    mirror.put(rel, body)
                elif kind == lk.APPEND:
                    rel, offset, body = lk.unpack_path(payload, with_offset=True)
                    mirror.append(rel, offset or 0, body)
                elif kind == lk.GONE:
                    mirror.gone(lk.unpack_path(payload)[0])
                elif kind == lk.DATA:
                    self.streams.data(channel, payload)
                elif kind == lk.CLOSE:
                    self.streams.remote_closed(channel)
        except (EOFError, OSError, lk.AuthError, ValueError):
            pass
        self.relay.lost(self)

    def close(self) -> None:
        for sock, path in self.listeners:
            lk.close_listening(sock)
            path.unlink(missing_ok=True)
        self.streams.close_all()
        self.link.close()


class Relay:
    """Accepts the engines' links and serves the kernel's requests."""

    def __init__(self, rundir: Path, config: dict[str, Any]) -> None:
        self.rundir = rundir
        self.key = bytes.fromhex(config["key"])
        self.world_size = int(config["world_size"])
        self.silence = float(config.get("silence", SILENCE))
        self.links: dict[int, RankLink] = {}
        self.lock = threading.Lock()
        self.stopping = False
        self.mirror = Mirror(rundir)
        self.control: bytes | None = None
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((config["address"], 0))
        self.listener.listen(64)
        self.requests = unix_socket.listen_private(rundir / SOCKET_NAME, 16)

    # -- engines ---------------------------------------------------------------------------
    def _check(self, hello: dict[str, Any]) -> str | None:
        rank = hello.get("rank")
        if hello.get("role") != "engine" or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            return "not an engine of this cluster"
        with self.lock:
            if rank in self.links:
                return f"rank {rank} is linked already"
        return None

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._link, args=(conn,), daemon=True).start()

    def _link(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            session_key, hello = lk.server_handshake(conn, self.key, self._check)
        except (OSError, EOFError, lk.AuthError, ValueError):
            conn.close()
            return
        conn.settimeout(self.silence)  # every engine pings each second: silence means its host is gone
        rl = RankLink(self, int(hello["rank"]), lk.Link(conn, session_key, is_client=False), hello)
        with self.lock:
            if self.stopping:
                rl.link.close()
                return
            self.links[rl.rank] = rl
        if self.control is not None:
            rl.link.send(lk.CONTROL, self.control)
        rl.serve()

    def lost(self, rl: RankLink) -> None:
        """A link ended: unless the cluster is stopping, its engine (or its host) is gone."""
        with self.lock:
            if self.links.get(rl.rank) is rl:
                del self.links[rl.rank]
            stopping = self.stopping
        rl.close()
        if not stopping:
            rd.write_json(
                self.rundir / "exits" / f"{rl.rank}.json",
                {
                    "rank": rl.rank,
                    "pid": rl.pid,
                    "host": rl.host,
                    "time": time.time(),
                    "returncode": None,
                    "signal": None,
                    "lost": True,
                },
            )

    def watch_control(self) -> None:
        """Send the kernel's telemetry steering to every engine when it changes."""
        path = self.rundir / "telemetry" / "control.json"
        seen = None
        pinged = time.monotonic()
        while True:
            if time.monotonic() - pinged > PING_EVERY:
                pinged = time.monotonic()
                for rl in list(self.links.values()):
                    try:
                        rl.link.send(lk.PING)
                    except OSError:
                        pass
            try:
                st = path.stat()
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                if stamp != seen:
                    seen = stamp
                    self.control = path.read_bytes()
                    for rl in list(self.links.values()):
                        try:
                            rl.link.send(lk.CONTROL, self.control)
                        except OSError:
                            pass
            except OSError:
                pass
            time.sleep(CONTROL_POLL)

    # -- the kernel ------------------------------------------------------------------------
    def serve_requests(self) -> None:
        while True:
            try:
                conn, _ = self.requests.accept()
            except OSError:
                return
            with conn:
                try:
                    if not unix_socket.same_user(conn):
                        continue
                    conn.settimeout(5)
                    request = json.loads(conn.makefile("rb").readline())
                    if not isinstance(request, dict):
                        continue
                    conn.sendall(json.dumps(self.handle(request)).encode() + b"\n")
                except (OSError, ValueError):
                    continue
            if request.get("cmd") == "stop":
                os._exit(0)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        if cmd == "linked":
            with self.lock:
                return {"ranks": sorted(self.links)}
        if cmd == "interrupt":
            done = []
            for r in request.get("ranks") or []:
                rl = self.links.get(r)
                if rl is not None:
                    try:
                        rl.link.send(lk.INTERRUPT)
                        done.append(r)
                    except OSError:
                        pass
            return {"interrupted": done}
        if cmd == "stopping":
            with self.lock:
                self.stopping = True
            return {"stopping": True}
        if cmd == "stop":
            self.stop()
            return {"stopped": True}
        return {"error": f"unknown request {cmd!r}"}

    def stop(self) -> None:
        """Tell every engine to end (each removes its files and exits), then close the links."""
        with self.lock:
            self.stopping = True
            links = list(self.links.values())
        for rl in links:
            try:
                rl.link.send(lk.BYE)
            except OSError:
                pass
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(not rl.link.closed for rl in links):
            time.sleep(0.02)  # each reader ends when its engine closes the connection
        for rl in links:
            rl.close()
        self.listener.close()


def main(rundir_arg: str) -> None:
    rundir = Path(rundir_arg)
    config = json.loads((rundir / CONFIG_FILE).read_text())
    relay = Relay(rundir, config)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(*_: Any) -> None:
        relay.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    from jupyter_mgpu.engine.startup import watchdog

    watchdog.start(int(config["kernel_pid"]), config.get("kernel_create_time"), on_gone=relay.stop)
    for target in (relay.accept, relay.watch_control):
        threading.Thread(target=target, daemon=True).start()
    rd.write_json(rundir / PORT_FILE, {"port": relay.listener.getsockname()[1], "pid": os.getpid()})
    relay.serve_requests()


def request(rundir: str | Path, message: dict[str, Any], timeout: float = 5.0) -> dict[str, Any] | None:
    """Kernel side: one request to the cluster's relay; its reply, or None if it cannot be reached."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            unix_socket.connect(s, Path(rundir) / SOCKET_NAME)
            s.sendall(json.dumps(message).encode() + b"\n")
            reply: dict[str, Any] | None = json.loads(s.makefile("rb").readline())
            return reply
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    main(*sys.argv[1:2])
