"""The authenticated TCP connection between a remote engine and its notebook's host.

A cluster that spans hosts cannot share a runtime directory, so each engine started by one of
ipyparallel's launchers keeps one TCP connection (a *link*) to the cluster's relay on the kernel's
host (``launch/relay.py``). Telemetry, traces and metrics travel up it, steering and interrupts down
it, and the kernel's guard and direct-channel sockets are relayed through it.

Authentication: both ends hold a key derived from ipyparallel's own HMAC key (which only the
cluster's connection files and ipyparallel's signed messages carry) — :func:`derive_key`; no secret
of ours is ever sent. A connection opens with a challenge-response in both directions (fresh nonces,
HMAC-SHA256), then every frame of a link carries an HMAC of its direction, sequence number, header
and payload under a per-connection key: frames cannot be forged, replayed or reordered. Nothing is
encrypted (as with ipyparallel without CurveZMQ): keep the interface on a private network.

Frames: ``!IBI`` (channel, kind, payload length), the payload, 32 bytes of MAC.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import threading
from typing import Any

HEADER = struct.Struct("!IBI")
MAC_BYTES = 32
MAX_PAYLOAD = 1 << 20  # larger writes are split into frames of this size
HANDSHAKE_TIMEOUT = 10.0

# frame kinds
PING, PUT, APPEND, GONE, CONTROL, INTERRUPT, OPEN, DATA, CLOSE, BYE = range(10)


class AuthError(ConnectionError):
    """The peer could not prove it holds the cluster's key."""


def derive_key(ipp_key: bytes, cluster_id: str) -> bytes:
    """The link key of a cluster: an HMAC of its id under ipyparallel's session key."""
    return hmac.new(bytes(ipp_key), b"jupyter-mgpu link v1 " + cluster_id.encode(), hashlib.sha256).digest()


def _mac(key: bytes, *parts: bytes) -> bytes:
    m = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        m.update(len(p).to_bytes(8, "big"))
        m.update(p)
    return m.digest()


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("the peer closed the connection")
        got += k
    return buf


def close_listening(sock: socket.socket) -> None:
    """Close a listening socket so that a thread blocked in its ``accept()`` returns (on Linux ``close``
    alone leaves that thread waiting and the port open)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _send_json(sock: socket.socket, obj: dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(len(data).to_bytes(4, "big") + data)


def _recv_json(sock: socket.socket, limit: int = 4096) -> dict[str, Any]:
    n = int.from_bytes(recv_exact(sock, 4), "big")
    if n > limit:
        raise AuthError("oversized handshake message")
    obj = json.loads(bytes(recv_exact(sock, n)))
    if not isinstance(obj, dict):
        raise AuthError("malformed handshake message")
    return obj


def client_handshake(sock: socket.socket, key: bytes, hello: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """Prove we hold ``key`` and check that the server does; returns the session key and the server's welcome."""
    nonce = os.urandom(16).hex()
    sock.settimeout(HANDSHAKE_TIMEOUT)
    _send_json(sock, {**hello, "nonce": nonce})
    reply = _recv_json(sock)
    theirs = str(reply.get("nonce", ""))
    context = json.dumps(hello, sort_keys=True).encode()
    if not hmac.compare_digest(
        bytes.fromhex(str(reply.get("proof", ""))), _mac(key, b"server", nonce.encode(), theirs.encode(), context)
    ):
        raise AuthError("the server could not prove it holds the cluster's key")
    _send_json(sock, {"proof": _mac(key, b"client", nonce.encode(), theirs.encode(), context).hex()})
    welcome = _recv_json(sock)
    if not welcome.get("ok"):
        raise AuthError(str(welcome.get("error") or "refused"))
    sock.settimeout(None)
    return _mac(key, b"session", nonce.encode(), theirs.encode()), welcome


def server_handshake(sock: socket.socket, key: bytes, check: Any = None) -> tuple[bytes, dict[str, Any]]:
    """Check that the client holds ``key`` (and prove we do); returns the session key and its hello.

    ``check(hello)`` may return an error text to refuse an authenticated client (e.g. an unknown rank).
    """
    sock.settimeout(HANDSHAKE_TIMEOUT)
    hello = _recv_json(sock)
    theirs = str(hello.pop("nonce", ""))
    nonce = os.urandom(16).hex()
    context = json.dumps(hello, sort_keys=True).encode()
    _send_json(sock, {"nonce": nonce, "proof": _mac(key, b"server", theirs.encode(), nonce.encode(), context).hex()})
    reply = _recv_json(sock)
    try:
        proof = bytes.fromhex(str(reply.get("proof", "")))
    except ValueError:
        proof = b""
    if not hmac.compare_digest(proof, _mac(key, b"client", theirs.encode(), nonce.encode(), context)):
        raise AuthError("the client could not prove it holds the cluster's key")
    error = check(hello) if check is not None else None
    _send_json(sock, {"ok": not error, "error": error})
    if error:
        raise AuthError(error)
    sock.settimeout(None)
    return _mac(key, b"session", theirs.encode(), nonce.encode()), hello


class Link:
    """Framed, MAC-checked messages over an authenticated socket; ``send`` is thread-safe."""

    def __init__(self, sock: socket.socket, session_key: bytes, is_client: bool) -> None:
        self.sock = sock
        self.key = session_key
        self.out_dir, self.in_dir = (b"c", b"s") if is_client else (b"s", b"c")
        self.out_seq = 0
        self.in_seq = 0
        self.lock = threading.Lock()
        self.closed = False

    def _frame_mac(self, direction: bytes, seq: int, header: bytes, payload: bytes) -> bytes:
        m = hmac.new(self.key, direction + seq.to_bytes(8, "big") + header, hashlib.sha256)
        m.update(payload)
        return m.digest()

    def send(self, kind: int, payload: bytes | bytearray | memoryview = b"", channel: int = 0) -> None:
        """Send one message (split into frames of at most ``MAX_PAYLOAD`` bytes for DATA)."""
        view = memoryview(payload).cast("B")
        if kind != DATA and len(view) > MAX_PAYLOAD:
            raise ValueError(f"a message of kind {kind} holds at most {MAX_PAYLOAD} bytes")
        with self.lock:
            while True:
                chunk = bytes(view[:MAX_PAYLOAD])
                view = view[MAX_PAYLOAD:]
                header = HEADER.pack(channel, kind, len(chunk))
                self.out_seq += 1
                mac = self._frame_mac(self.out_dir, self.out_seq, header, chunk)
                self.sock.sendall(header + chunk + mac)
                if not len(view):
                    return

    def recv(self) -> tuple[int, int, bytes]:
        """The next ``(channel, kind, payload)``; raises EOFError at the end, AuthError on a bad MAC."""
        header = bytes(recv_exact(self.sock, HEADER.size))
        channel, kind, length = HEADER.unpack(header)
        if length > MAX_PAYLOAD:
            raise AuthError("oversized frame")
        payload = bytes(recv_exact(self.sock, length))
        mac = bytes(recv_exact(self.sock, MAC_BYTES))
        self.in_seq += 1
        if not hmac.compare_digest(mac, self._frame_mac(self.in_dir, self.in_seq, header, payload)):
            raise AuthError("a frame failed its authentication check")
        return channel, kind, payload

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def pack_path(path: str, body: bytes = b"", offset: int | None = None) -> bytes:
    """Payload of a PUT/APPEND/GONE: the relative path, an offset for APPEND, the bytes."""
    raw = path.encode()
    head = len(raw).to_bytes(2, "big") + raw
    if offset is not None:
        head += offset.to_bytes(8, "big")
    return head + body


def unpack_path(payload: bytes, with_offset: bool = False) -> tuple[str, int | None, bytes]:
    n = int.from_bytes(payload[:2], "big")
    path = payload[2 : 2 + n].decode()
    rest = payload[2 + n :]
    if with_offset:
        return path, int.from_bytes(rest[:8], "big"), rest[8:]
    return path, None, rest


def safe_relative(path: str) -> bool:
    """A mirrored path stays inside its directory: relative, no ``..``, no sockets' or state's names."""
    parts = path.split("/")
    return (
        bool(path)
        and not path.startswith("/")
        and all(p not in ("", ".", "..") for p in parts)
        and parts[0] in MIRRORED_DIRS
    )


MIRRORED_DIRS = ("telemetry", "trace", "metrics", "compare")


class Streams:
    """Byte streams relayed over a link, each one a local socket on this end (half-closes kept).

    ``CLOSE`` means "the sender will write no more": the receiving end shuts its local socket for
    writing, so a request/reply socket (the guard's) still gets its reply back. A stream is
    forgotten once both directions have ended.
    """

    def __init__(self, link: Link) -> None:
        self.link = link
        self.conns: dict[int, socket.socket] = {}
        self.ended: dict[int, set[str]] = {}
        self.lock = threading.Lock()

    def add(self, channel: int, conn: socket.socket, name: str = "stream", announce: bytes | None = None) -> None:
        """Relay ``conn`` as ``channel``; ``announce`` (a stream name) sends OPEN to the other end first."""
        with self.lock:
            self.conns[channel] = conn
            self.ended[channel] = set()
        if announce is not None:
            try:
                self.link.send(OPEN, announce, channel)
            except OSError:
                self.drop(channel)
                return
        threading.Thread(target=self._pump, args=(channel, conn), name=f"mgpu-link-{name}", daemon=True).start()

    def _pump(self, channel: int, conn: socket.socket) -> None:
        """Bytes from the local socket over the link until it ends."""
        try:
            while True:
                data = conn.recv(MAX_PAYLOAD)
                if not data:
                    break
                self.link.send(DATA, data, channel)
        except OSError:
            pass
        self._ended(channel, "local")

    def data(self, channel: int, payload: bytes) -> None:
        conn = self.conns.get(channel)
        if conn is None:
            return
        try:
            conn.sendall(payload)
        except OSError:
            self.drop(channel)

    def remote_closed(self, channel: int) -> None:
        conn = self.conns.get(channel)
        if conn is not None:
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._ended(channel, "remote", tell=False)

    def _ended(self, channel: int, side: str, tell: bool = True) -> None:
        with self.lock:
            ended = self.ended.get(channel)
            if ended is None:
                return
            first = side not in ended
            ended.add(side)
            done = ended >= {"local", "remote"}
            conn = self.conns.pop(channel, None) if done else None
            if done:
                del self.ended[channel]
        if tell and first and side == "local":
            try:
                self.link.send(CLOSE, b"", channel)
            except OSError:
                pass
        if conn is not None:
            conn.close()

    def drop(self, channel: int) -> None:
        """End a stream both ways at once (its local socket failed)."""
        with self.lock:
            conn = self.conns.pop(channel, None)
            ended = self.ended.pop(channel, set())
        if conn is not None:
            conn.close()
            if "local" not in ended:
                try:
                    self.link.send(CLOSE, b"", channel)
                except OSError:
                    pass

    def close_all(self) -> None:
        with self.lock:
            conns = list(self.conns.values())
            self.conns.clear()
            self.ended.clear()
        for conn in conns:
            conn.close()
