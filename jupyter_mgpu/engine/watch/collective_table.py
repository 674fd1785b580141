"""The host's table of the collectives its ranks are calling: a shared file in the cluster's 0700
directory, mapped by every rank of the host, where each rank writes only its own slots.

A slot holds one call: a fixed header (payload length and CRC, the process group's generation, the
call's number in its group, the group's and the fingerprint's CRC) and a JSON payload (the words for
the call and its line). The payload is written before the header, and a reader checks the header's
numbers and the payload's CRC, so a write caught half-done reads as no record rather than a wrong one.
Comparing fingerprints reads headers only (a fraction of a microsecond a peer); the payload is read
when they differ, to say how; a differing one counts only once it has stayed so for :data:`SETTLE_S`
(:meth:`CollectiveTable.differs`). A rank's record of a call lives in its slot for that group and number
while it makes its next ``RING - 1`` calls. Ranks on other hosts have a table of their own; this one
never holds their records. ``engine/watch/collective_watch.py`` writes and reads it; nothing else does.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import time
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

FILE_NAME = "collectives.table"
RING = 64
SLOT = 512
SETTLE_S = 0.2  # a peer's differing record that agrees within this was being replaced: no mismatch
_HEAD = struct.Struct("=IIIIII")  # payload length, payload CRC, generation, number, group CRC, fingerprint CRC


@lru_cache(maxsize=4096)
def crc(text: str) -> int:
    return zlib.crc32(text.encode())


@lru_cache(maxsize=4096)
def _payload(call: str, line: str) -> tuple[bytes, int]:
    """A record's JSON (cut to fit a slot) and its CRC: the same call from the same line is encoded once."""
    payload = json.dumps({"call": call, "line": line}, separators=(",", ":")).encode()[: SLOT - _HEAD.size]
    return payload, zlib.crc32(payload)


class CollectiveTable:
    """The table of ``world_size`` ranks in ``rundir``; this rank writes its own slots only."""

    def __init__(self, rundir: str | Path, world_size: int) -> None:
        path = Path(rundir) / FILE_NAME
        size = world_size * RING * SLOT
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    @staticmethod
    def _offset(rank: int, group_crc: int, number: int) -> int:
        return (rank * RING + (group_crc + number) % RING) * SLOT

    def write(
        self, rank: int, group: str, number: int, generation: int, fingerprint: str, call: str, line: str
    ) -> None:
        """Put this rank's call ``number`` on ``group`` in its slot: its ``fingerprint``, and the words for
        the ``call`` and its ``line`` (the record others read when theirs differs)."""
        payload, pcrc = _payload(call, line)
        g = crc(group)
        at = self._offset(rank, g, number)
        self.map[at + _HEAD.size : at + _HEAD.size + len(payload)] = payload
        self.map[at : at + _HEAD.size] = _HEAD.pack(len(payload), pcrc, generation, number, g, crc(fingerprint))

    def fingerprint(self, rank: int, group: str, number: int, generation: int) -> int | None:
        """The CRC of ``rank``'s fingerprint of that call, or None when it has not written it (yet)."""
        g = crc(group)
        length, _, gen, n, gcrc, fcrc = _HEAD.unpack_from(self.map, self._offset(rank, g, number))
        if length == 0 or gen != generation or n != number or gcrc != g:
            return None
        return int(fcrc)

    def differs(self, rank: int, group: str, number: int, generation: int, mine: int, settle: float = SETTLE_S) -> bool:
        """Whether ``rank``'s record of that call has another fingerprint than ``mine`` (a CRC) and keeps it for
        ``settle`` seconds. A record that comes to agree within them was being replaced by the peer's own call
        at this number: CI once saw two ranks raise a mismatch at #118 whose records, read a moment later,
        all named the same all_to_all_single. A real mismatch stays: the peer waits in its call or raised."""
        theirs = self.fingerprint(rank, group, number, generation)
        if theirs is None or theirs == mine:
            return False
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            time.sleep(0.005)
            theirs = self.fingerprint(rank, group, number, generation)
            if theirs is None or theirs == mine:
                return False
        return True

    def record(self, rank: int, group: str, number: int, generation: int) -> dict[str, Any] | None:
        """``rank``'s record of that call, or None (not written, or being written now)."""
        g = crc(group)
        at = self._offset(rank, g, number)
        length, pcrc, gen, n, gcrc, _ = _HEAD.unpack_from(self.map, at)
        if not 0 < length <= SLOT - _HEAD.size or gen != generation or n != number or gcrc != g:
            return None
        payload = self.map[at + _HEAD.size : at + _HEAD.size + length]
        if zlib.crc32(payload) != pcrc:
            return None
        try:
            return dict(json.loads(payload))
        except ValueError:
            return None

    def close(self) -> None:
        self.map.close()
