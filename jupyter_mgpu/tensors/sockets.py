"""Kernel side of scatter and gather with ranks on other hosts: one authenticated socket per rank.

The path is chosen per pair (kernel, rank): a rank on the kernel's host (same machine and PID, mount
and IPC namespaces) keeps today's copy by address (``process_copy``); a rank elsewhere gets its bytes
over TCP. For one transfer the kernel listens on its cluster interface (a port the OS picks, closed
when the transfer ends), each streamed rank connects and proves it holds the cluster's link key, and
the kernel sends each slice from — or receives each shard into — its place in the tensor, one copy on
each side. Bytes are not encrypted (as ipyparallel's are not without CurveZMQ).

The other half: ``ops/sockets.py``, its rank side.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.wire import link
from jupyter_mgpu.errors import MgpuError

ACCEPT_TIMEOUT = 60.0


def streamed_ranks(session: Any) -> set[int]:
    """The ranks whose transfers go over sockets (empty on the single-host path)."""
    from jupyter_mgpu.tensors import process_copy

    cluster = session.cluster
    local = getattr(cluster, "local_ranks", None)
    if local is None:
        return set()
    everyone = set(range(session.world_size))
    remote = everyone - set(local)
    if not remote:
        return set()
    if session.device_kind != "cpu" or not process_copy.usable(session):
        return everyone  # the shared-memory paths serve whole sessions on one host only
    return remote


class Transfer:
    """A listener for one transfer; ``handler(rank, sock)`` moves that rank's bytes."""

    def __init__(self, session: Any, expected: set[int], handler: Callable[[int, socket.socket], None]) -> None:
        cluster = session.cluster
        self.key = cluster.link_key
        self.expected = set(expected)
        self.handler = handler
        self.id = secrets.token_hex(8)
        self.errors: list[BaseException] = []
        self.done: set[int] = set()
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((cluster.address, 0))
        self.listener.listen(max(4, len(expected)))
        self.address, self.port = self.listener.getsockname()
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, name="mgpu-transfer", daemon=True)
        self.acceptor.start()

    def where(self) -> dict[int, dict[str, Any]]:
        """What each streamed rank needs to connect (sent in the call; nothing secret)."""
        return {r: {"address": self.address, "port": self.port, "transfer": self.id} for r in self.expected}

    def _check(self, hello: dict[str, Any]) -> str | None:
        rank = hello.get("rank")
        with self.lock:
            if (
                hello.get("role") != "data"
                or hello.get("transfer") != self.id
                or rank not in self.expected
                or rank in self.done
            ):
                return "not a rank of this transfer"
            self.done.add(rank)
        return None

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                _, hello = link.server_handshake(conn, self.key, self._check)
                self.handler(int(hello["rank"]), conn)
            except link.AuthError:
                pass
            except BaseException as exc:
                self.errors.append(exc)

    def finish(self, timeout: float = ACCEPT_TIMEOUT) -> None:
        """Close the listener, wait for the ranks' streams, raise the first error."""
        self._close_listener()
        deadline = time.monotonic() + timeout
        for t in list(self.threads):
            t.join(max(0.0, deadline - time.monotonic()))
        if self.errors:
            raise MgpuError(f"a transfer with a rank on another host failed: {self.errors[0]}")

    def abandon(self) -> None:
        self._close_listener()

    def _close_listener(self) -> None:
        link.close_listening(self.listener)


def _raw(t: Any) -> memoryview:
    from jupyter_mgpu.ops.sockets import raw

    return raw(t)


def send_slices(tensor: Any, table: list[Any]) -> Callable[[int, socket.socket], None]:
    """A handler that sends rank r its slice of ``tensor`` and waits for its acknowledgement."""

    def handler(rank: int, sock: socket.socket) -> None:
        piece = tensor[table[rank].index]
        if not piece.is_contiguous():
            piece = piece.contiguous()
        sock.sendall(_raw(piece))
        sock.recv(1)

    return handler


def receive_shards(result: Any, table: list[Any]) -> Callable[[int, socket.socket], None]:
    """A handler that receives rank r's shard into its place in ``result``."""
    from jupyter_mgpu.ops.sockets import recv_into

    def handler(rank: int, sock: socket.socket) -> None:
        view = result[table[rank].index]
        if view.is_contiguous():
            recv_into(sock, _raw(view))
        else:
            import torch

            tmp = torch.empty(view.shape, dtype=view.dtype)
            recv_into(sock, _raw(tmp))
            view.copy_(tmp)
        sock.sendall(b"k")

    return handler


def scatter(handle: Any, tensor: Any, table: list[Any], streamed: set[int]) -> Any:
    """Fill a new DistTensor ``handle``: streamed ranks over sockets, the others by address."""
    from jupyter_mgpu.ops import sockets as rank_sockets
    from jupyter_mgpu.tensors import process_copy
    from jupyter_mgpu.tensors.handles import run_creating

    s = handle.session
    expected = {r for r in streamed if table[r].numel}
    transfer = Transfer(s, expected, send_slices(tensor, table))
    try:
        where = run_creating(
            handle,
            rank_sockets.scatter,
            handle.handle_id,
            handle.shape,
            handle.placement,
            handle.dtype_name,
            transfer.where(),
            label="scatter",
        )
        transfer.finish()
    except BaseException:
        transfer.abandon()
        raise
    jobs = [(m["pid"], m["addr"], tensor[info.index]) for info, m in zip(table, where) if m]
    try:
        process_copy.write(jobs)
    except BaseException:
        handle.free()
        raise
    handle._in_blocks = not expected
    return handle


def torch_empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """A new tensor whose pages are touched now: receiving into pages that fault one by one inside the
    socket copies runs at a third of the speed (measured, benchmarks/transfer.py --two-hosts)."""
    import torch

    return torch.empty(shape, dtype=dtype).zero_()


def gather(handle: Any, out: Any, streamed: set[int]) -> Any:
    """The global tensor of ``handle``: streamed ranks' shards over sockets, the others read by address."""
    from jupyter_mgpu.layout import placement as pl
    from jupyter_mgpu.ops import sockets as rank_sockets
    from jupyter_mgpu.tensors import process_copy

    table = handle.table
    result = out if out is not None else torch_empty(handle.shape, handle.dtype)
    senders = {
        r for r, info in enumerate(table) if info.numel and (r == 0 or not isinstance(handle.placement, pl.Replicate))
    }
    by_address = sorted(set(range(handle.world_size)) - set(streamed))
    transfer = Transfer(handle.session, senders, receive_shards(result, table))
    try:
        where = handle.session.run(
            rank_sockets.gather,
            handle.handle_id,
            handle.shape,
            handle.placement,
            transfer.where(),
            by_address,
            label="gather",
        )
        transfer.finish()
    except BaseException:
        transfer.abandon()
        raise
    process_copy.read([(w["pid"], w["addr"], result[info.index]) for info, w in zip(table, where) if w])
    return result
