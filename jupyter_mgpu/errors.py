"""Errors for people: one clear sentence that says what went wrong, on which rank, what to do."""

from __future__ import annotations

from typing import Any


class MgpuError(RuntimeError):
    """A user-facing error of jupyter_mgpu; notebooks show its message without a traceback."""


class Interrupted(KeyboardInterrupt):
    """The stop button ended a call on the ranks; the message says what became of the process group."""


# Notebooks and kernel clients (``ename`` of the execute reply) see it as the KeyboardInterrupt it is.
Interrupted.__name__ = Interrupted.__qualname__ = "KeyboardInterrupt"


class RankError(MgpuError):
    """Code failed on one or more ranks; ``ranks`` lists them, ``errors`` maps rank to the remote error."""

    def __init__(self, message: str, ranks: list[int] | None = None, errors: dict[int, Any] | None = None):
        super().__init__(message)
        self.ranks = list(ranks or [])
        self.errors = dict(errors or {})

    @property
    def tracebacks(self) -> dict[int, str]:
        """Each failed rank's whole traceback, as plain text (``%mgpu_tb`` prints them in colour)."""
        import re

        return {
            r: re.sub(r"\x1b\[[0-9;]*m", "", e["traceback"])
            for r, e in sorted(self.errors.items())
            if isinstance(e, dict) and e.get("traceback")
        }


class DeviceOutOfMemoryError(RankError):
    """A rank ran past its device memory (a GPU's memory, or a CPU virtual device's budget)."""


class EngineDiedError(RankError):
    """An engine process ended while the session needed it."""


class CollectiveError(RankError):
    """A collective went wrong between the ranks."""


class CollectiveTimeoutError(CollectiveError):
    """A collective did not complete within the session's timeout."""


class CollectiveHangError(CollectiveTimeoutError):
    """Every rank of a collective's group was blocked (waiting in one, or done) and nothing moved."""


class CollectiveMismatchError(CollectiveError):
    """The ranks of a group called different collectives at the same point (op, dtype, shape, reduce op, root)."""


def rank_list(ranks: list[int]) -> str:
    """``rank 2`` or ``ranks 0, 1, 3``: how every message names ranks."""
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
