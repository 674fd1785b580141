"""The kernel's end of the direct channel (see ``engine/execution/direct_channel.py``): blocking calls, one hop.

``Session.run`` and ``Session.run_cell`` send a blocking call here when no ipyparallel task is still
queued on those ranks, so calls keep their order whichever path they take; a cell's output streams back
on the same socket (``session/streamed_call.py``). ``block=False`` goes through ipyparallel.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_mgpu.engine.execution import direct_channel as rank_channel
from jupyter_mgpu.engine.wire import unix_socket

CONNECT_TIMEOUT = 5.0


class ChannelClosed(Exception):
    """A rank's end of the direct channel closed (its engine is gone)."""

    def __init__(self, rank: int) -> None:
        super().__init__(f"rank {rank} closed the direct channel")
        self.rank = rank


class DirectChannel:
    """One Unix-socket connection per rank, opened on first use."""

    def __init__(self, rundir: str | Path) -> None:
        self.rundir = Path(rundir)
        self.socks: dict[int, socket.socket] = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()  # one call at a time: two threads' frames must not interleave
        rank_channel.prime_canning()  # before any thread packs a call: ipyparallel's lazy set-up is not thread-safe

    def available(self, ranks: list[int]) -> bool:
        """Whether every rank in ``ranks`` has (or can open) a connection."""
        try:
            with self.lock:
                for r in ranks:
                    self._sock(r)
        except OSError:
            return False
        return True

    def _sock(self, rank: int) -> socket.socket:
        s = self.socks.get(rank)
        if s is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(CONNECT_TIMEOUT)
            try:
                unix_socket.connect(s, rank_channel.socket_path(self.rundir, rank))
            except OSError:
                s.close()
                raise
            s.settimeout(None)  # a busy engine reads the request when it is free; waits are bounded by check()
            self.socks[rank] = s
        return s

    def forget(self, rank: int) -> None:
        s = self.socks.pop(rank, None)
        if s is not None:
            s.close()

    def close(self) -> None:
        for r in list(self.socks):
            self.forget(r)

    def _send(self, rank: int, parts: list[Any]) -> None:
        for attempt in (0, 1):  # an engine drops a connection that stalled mid-frame: open a new one once
            try:
                rank_channel.send_frames(self._sock(rank), parts)
                return
            except KeyboardInterrupt:
                self.forget(rank)  # a half-sent frame: the engine drops this connection
                raise
            except OSError:
                self.forget(rank)
                if attempt:
                    raise ChannelClosed(rank) from None

    def call(
        self,
        ranks: list[int],
        bufs: list[Any],
        check: Callable[[list[int], dict[int, Any]], None],
        poll: float = 0.05,
        on_output: Callable[[int, list[Any]], None] | None = None,
        parent: dict[str, str] | None = None,
    ) -> dict[int, Any]:
        """Send one request to ``ranks`` and wait for every reply; ``check(pending, replies so far)``
        runs between polls, and at least every ``poll`` seconds. With ``on_output`` the ranks send what
        the call prints and displays as it comes (``engine/execution/streamed_output.py``):
        ``on_output(rank, events)``; ``parent`` (a ``session`` and ``msg_id`` of ipyparallel's client) is what
        the ranks' comm messages answer, so that client relays a widget's messages to the front end.

        ``check`` raises to stop waiting (a dead rank, a timeout); replies to earlier, abandoned
        requests are read and dropped. Raises :class:`ChannelClosed` if a rank's socket closes.
        """
        with self.lock:
            rid = next(self.ids)
            header = json.dumps({"id": rid, "stream": on_output is not None, "parent": parent}).encode()
            try:
                for r in ranks:
                    self._send(r, [header, *bufs])
                return self._replies(rid, ranks, check, poll, on_output)
            except KeyboardInterrupt:  # a reply may be half read, a request sent to some ranks only: closed, the
                # connections make a rank that has not read the request yet drop it (``_hung_up``)
                for r in ranks:
                    self.forget(r)
                raise

    def _replies(
        self,
        rid: int,
        ranks: list[int],
        check: Callable[[list[int], dict[int, Any]], None],
        poll: float,
        on_output: Callable[[int, list[Any]], None] | None,
    ) -> dict[int, Any]:
        results: dict[int, Any] = {}
        by_fd = {self.socks[r].fileno(): r for r in ranks}
        checked = time.monotonic()
        while len(results) < len(ranks):
            pending = [r for r in ranks if r not in results]
            ready, _, _ = select.select([self.socks[r] for r in pending], [], [], poll)
            for s in ready:
                r = by_fd[s.fileno()]
                try:
                    parts = rank_channel.recv_frames(s)
                except (EOFError, OSError):
                    self.forget(r)
                    raise ChannelClosed(r) from None
                header = json.loads(bytes(parts[0]))
                if header.get("id") != rid:
                    continue
                if header.get("out"):
                    if on_output is not None:
                        on_output(r, rank_channel.load_value(parts[1:]))
                else:
                    results[r] = rank_channel.load_value(parts[1:])
            now = time.monotonic()
            if not ready or now - checked >= poll:  # a quiet poll, or output streaming: anyone dead, time up?
                checked = now
                if len(results) < len(ranks):
                    check([r for r in ranks if r not in results], results)
        return results
