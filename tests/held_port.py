"""A free port for a server a test starts, held until that server has bound it.

Probing a free port (bind port 0, close) and handing it to a server that binds it seconds later leaves the
port to any process in between: an outgoing connection of the other worker's tests, another probe. A
socket bound with SO_REUSEADDR that never listens keeps it from everyone else, while the server's own
listener (tornado's, libuv's and zmq's set SO_REUSEADDR too) still binds it: the same hold as the
controller's (``jupyter_mgpu/engine/startup/held_ports.py``). Release it once the server answers.
"""

from __future__ import annotations

import socket


class HeldPort:
    """A port on 127.0.0.1 that no other process can take until :meth:`release`."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]

    def release(self) -> None:
        self._sock.close()
