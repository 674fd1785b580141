"""The process group's rendezvous across hosts: a TCPStore that rank 0 hosts on one interface only.

torch's TCPStore has no authentication and, left to itself, listens on every interface. Rank 0 binds
the listening socket itself, on its address of the chosen interface, and hands it to the store
(``master_listen_fd``). Once every rank has connected, :func:`close_listener` closes that socket: the
store keeps serving the ranks' open connections (later process groups and rebuilds use them through
a prefix per generation), and nobody else can connect any more. A rank started again on its host
(``launch/host_restart.py``) meets the survivors in a fresh store a survivor opens the same way, closed
again once the rebuilt group met; the stores it replaces are kept, listening to nobody.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

_master: Any = None  # rank 0's store (server and its own client)
_listen_fd: int | None = None
_client: Any = None
_client_key: tuple[str, int] | None = None
_replaced: list[Any] = []  # earlier stores of this process, kept: the old groups may still hold them


def open_master(address: str, world_size: int, timeout: float) -> int:
    """Rank 0: listen on ``address`` (port chosen by the OS) and serve the store there; returns the port."""
    global _master, _listen_fd, _client_key
    from torch._C._distributed_c10d import TCPStore

    close_listener()  # at most one store of this process takes newcomers
    _replaced.extend(s for s in (_master, _client) if s is not None)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((address, 0))
        sock.listen(max(64, 2 * world_size))
        port: int = sock.getsockname()[1]
        _master = TCPStore(
            address,
            port,
            world_size,
            True,
            timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=sock.fileno(),
            use_libuv=True,  # serves on this very descriptor, which close_listener swaps
        )
    except BaseException:
        sock.close()
        raise
    _listen_fd = sock.detach()  # the store owns the descriptor now
    _client_key = (address, port)
    _exclude_from_release()
    return port


def _exclude_from_release() -> None:
    from jupyter_mgpu.engine.watch import collective_guard

    if store_socket_inodes not in collective_guard.exclusions:
        collective_guard.exclusions.append(store_socket_inodes)


def connect(config: dict[str, Any], timeout: float) -> Any:
    """This rank's store client for ``config`` (``{"host", "port"}``), made once and reused."""
    global _client, _client_key
    from torch._C._distributed_c10d import TCPStore

    key = (config["host"], int(config["port"]))
    if _master is not None and key == _client_key:
        return _master
    if _client is None or key != _client_key:
        _client = TCPStore(
            config["host"], int(config["port"]), int(config["world_size"]), False, timedelta(seconds=timeout)
        )
        _client_key = key
        _exclude_from_release()
    return _client


def store_socket_inodes() -> set[int]:
    """Inodes of this process's connections to or from the store (never released with a group's sockets)."""
    import psutil

    if _client_key is None:
        return set()
    port = _client_key[1]
    out = set()
    for conn in psutil.Process().net_connections("tcp"):
        ends = [conn.laddr, conn.raddr]
        if any(e and e.port == port for e in ends) and conn.fd >= 0:
            try:
                target = os.readlink(f"/proc/self/fd/{conn.fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


def close_listener() -> bool:
    """Rank 0: refuse new connections to the store from now on; True if there was a listener to close.

    The store's event loop watches the listening descriptor, so it is neither closed under the loop nor
    shut down (a shut-down listener reads as ready forever: libuv's accept loop then spins a core at 100 %
    for the session's life). The descriptor is swapped at once (``dup2``) for an idle listener nobody is
    told of: the real socket is closed (newcomers are refused), the loop hears no more from it, and an
    accept it had already begun finds nothing waiting."""
    global _listen_fd
    fd, _listen_fd = _listen_fd, None
    if fd is None:
        return False
    with _unreachable_listener() as idle:
        os.dup2(idle.fileno(), fd, inheritable=False)
    return True


def _unreachable_listener() -> socket.socket:
    """A non-blocking listening socket nobody is told of: a Unix socket under a name Linux picks for it
    (autobind, abstract), on which an accept finds nothing waiting."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("")
    s.listen(1)
    s.setblocking(False)
    return s


def listening() -> bool:
    """Whether rank 0's store still accepts new connections."""
    return _listen_fd is not None
