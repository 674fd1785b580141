"""The controller's ports, held from the moment they are chosen, so no other process can take one.

ipyparallel's controller chooses each port by binding port 0 and closing the socket
(``ipyparallel.util.select_random_ports``), writes the client's connection file, and only then binds
most of them (queues, schedulers, the heart in a forked process). In between, any process on the
machine may get such a port: an outgoing connection's local port, another program's port 0. The
controller then dies with ``Address already in use`` after its connection file exists, and the kernel's
client waits its whole timeout for an answer ("Hub connection request timed out"): seen on a busy
machine while another cluster started. Here each chosen port stays bound by a socket that never listens
(``SO_REUSEADDR``, as zmq's listeners have it) for the controller's life: the kernel hands the port to
nobody else, and the controller's own listener still binds it.
"""

from __future__ import annotations

import socket

_held: list[socket.socket] = []


def hold_chosen_ports() -> None:
    """Make ipyparallel's port choice (in this process) keep every port it chooses bound until exit."""
    from ipyparallel import util

    def select_random_ports(n: int) -> list[int]:
        ports = []
        for _ in range(n):
            sock = held_socket()
            while sock.getsockname()[1] in util._random_ports:
                sock.close()
                sock = held_socket()
            port = sock.getsockname()[1]
            _held.append(sock)
            util._random_ports.add(port)
            ports.append(port)
        return ports

    util.select_random_ports = select_random_ports


def held_socket(host: str = "") -> socket.socket:
    """A socket bound to a free port of ``host`` that never listens: the port is nobody else's while it is
    open, yet a server's own listener (``SO_REUSEADDR``, as zmq's, tornado's and libuv's have it) binds it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock
