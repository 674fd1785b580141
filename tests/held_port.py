"""A free port for a server a test starts, held until that server has bound it.

Probing a free port (bind port 0, close) and handing it to a server that binds it seconds later leaves the
port to any process in between: an outgoing connection of the other worker's tests, another probe. A
socket bound with SO_REUSEADDR that never listens keeps it from everyone else, while the server's own
listener (tornado's, libuv's and zmq's set SO_REUSEADDR too) still binds it: the controller's hold
(``jupyter_mgpu/engine/startup/held_ports.held_socket``). Release it once the server answers.
"""

from __future__ import annotations

from jupyter_mgpu.engine.startup.held_ports import held_socket


class HeldPort:
    """A port on 127.0.0.1 that no other process can take until :meth:`release`."""

    def __init__(self) -> None:
        self._sock = held_socket("127.0.0.1")
        self.port: int = self._sock.getsockname()[1]

    def release(self) -> None:
        self._sock.close()
