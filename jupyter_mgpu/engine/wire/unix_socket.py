"""Unix sockets at paths of any length.

A cluster's sockets live in its private runtime directory, under the user's home on a JupyterHub node
(``<home>/.local/share/jupyter/runtime/jupyter-mgpu/<id>/``): with a home deeper than about 34
characters their paths pass the 107 bytes that ``AF_UNIX`` addresses hold. Such a path is reached
through the directory's descriptor instead (``/proc/self/fd/<n>/<name>``, Linux), which names the same
file: permissions and the socket's place in the filesystem do not change.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_PATH_BYTES = 107  # sizeof(sun_path) - 1 for the terminating NUL


@contextmanager
def reachable(path: str | Path) -> Iterator[str]:
    """An address for ``path`` that fits ``AF_UNIX``: the path itself, or one through its directory's fd."""
    path = Path(path)
    if len(os.fsencode(path)) <= MAX_PATH_BYTES:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def bind(sock: socket.socket, path: str | Path) -> None:
    """``sock.bind(path)`` for a path of any length."""
    with reachable(path) as address:
        sock.bind(address)


def connect(sock: socket.socket, path: str | Path) -> None:
    """``sock.connect(path)`` for a path of any length."""
    with reachable(path) as address:
        sock.connect(address)


def listen_private(path: str | Path, backlog: int) -> socket.socket:
    """A stream socket listening at ``path`` (replacing a stale one), readable by this user only."""
    path = Path(path)
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bind(sock, path)  # any length: a hub user's home can be deep
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def same_user(conn: socket.socket) -> bool:
    """Whether the peer of ``conn`` runs as this user (the second lock, after the private directory)."""
    uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    return bool(uid == os.getuid())
