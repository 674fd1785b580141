"""The kernel's end of the direct channel (see ``engine/direct.py``): blocking calls, one hop.

``Session.run`` sends a blocking, non-streaming call here when no ipyparallel task is still queued on
those ranks, so calls keep their order whichever path they take. Everything else (``%%mgpu`` cells
with live output, ``block=False``) goes through ipyparallel as before.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
from pathlib import Path
from typing import Any, Callable

from .engine import direct

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

    def available(self, ranks: list[int]) -> bool:
        """Whether every rank in ``ranks`` has (or can open) a connection."""
        try:
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
                s.connect(str(direct.socket_path(self.rundir, rank)))
            except OSError:
                s.close()
                raise
            self.socks[rank] = s
        return s

    def forget(self, rank: int) -> None:
        s = self.socks.pop(rank, None)
        if s is not None:
            s.close()

    def close(self) -> None:
        for r in list(self.socks):
            self.forget(r)

    def call(self, ranks: list[int], bufs: list[Any], check: Callable[[list[int]], None],
             poll: float = 0.05) -> dict[int, Any]:
        """Send one request to ``ranks`` and wait for every reply; ``check(pending)`` runs between polls.

        ``check`` raises to stop waiting (a dead rank, a timeout); replies to earlier, abandoned
        requests are read and dropped. Raises :class:`ChannelClosed` if a rank's socket closes.
        """
        from ipyparallel.serialize import deserialize_object

        rid = next(self.ids)
        header = json.dumps({"id": rid}).encode()
        for r in ranks:
            try:
                direct.send_frames(self._sock(r), [header, *bufs])
            except OSError:
                self.forget(r)
                raise ChannelClosed(r) from None
        results: dict[int, Any] = {}
        by_fd = {self.socks[r].fileno(): r for r in ranks}
        while len(results) < len(ranks):
            pending = [r for r in ranks if r not in results]
            ready, _, _ = select.select([self.socks[r] for r in pending], [], [], poll)
            for s in ready:
                r = by_fd[s.fileno()]
                try:
                    parts = direct.recv_frames(s)
                except (EOFError, OSError):
                    self.forget(r)
                    raise ChannelClosed(r) from None
                if json.loads(bytes(parts[0])).get("id") == rid:
                    results[r] = deserialize_object(parts[1:])[0]
            if len(results) < len(ranks):
                check([r for r in ranks if r not in results])
        return results
