"""Relay engines' output to the notebook as it arrives, each line prefixed with its rank.

Lines show live, in the order they arrive (rank 3 may well print first). A relay made inside
:func:`grouped_by_rank` (the ``%%mgpu`` magic, whose cell output is all the ranks' output) ends by
showing the cell's output again grouped by rank — rank 0's lines, then rank 1's, … — when the ranks'
lines arrived interleaved or out of order.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator
from typing import Any

_GROUP = contextvars.ContextVar("mgpu_group_by_rank", default=False)


@contextlib.contextmanager
def grouped_by_rank() -> Iterator[None]:
    """Relays made inside end by regrouping the output they showed by rank (clearing the cell's output:
    use it only where the relay's output is all the cell shows)."""
    token = _GROUP.set(True)
    try:
        yield
    finally:
        _GROUP.reset(token)


class OutputRelay:
    """Polls an ipyparallel AsyncResult's live stdout/stderr and prints new complete lines."""

    def __init__(self, ar: Any, ranks: list[int], prefix: bool = True):
        self.ar = ar
        self.ranks = ranks
        self.prefix = prefix
        self.group = _GROUP.get()
        self._sent = {(r, s): 0 for r in ranks for s in ("stdout", "stderr")}
        self._shown_outputs = dict.fromkeys(ranks, 0)
        self._shown: list[tuple[int, str, Any]] = []  # (rank, "stdout" | "stderr" | "display", what), as shown

    def _write(self, rank: int, name: str, text: str) -> None:
        out = sys.stdout if name == "stdout" else sys.stderr
        if self.prefix:
            text = "".join(f"[rank {rank}] {line}\n" for line in text.split("\n"))
        else:
            text += "\n"
        out.write(text)
        out.flush()

    def _emit(self, rank: int, name: str, text: str) -> None:
        if self.group:  # kept only to be shown again in rank order at the end
            self._shown.append((rank, name, text))
        self._write(rank, name, text)

    def poll(self, final: bool = False) -> None:
        metadata = self.ar._metadata
        for i, rank in enumerate(self.ranks):
            md = metadata[i] if i < len(metadata) else {}
            for name in ("stdout", "stderr"):
                text = md.get(name) or ""
                start = self._sent[(rank, name)]
                if len(text) <= start:
                    continue
                end = len(text) if final else text.rfind("\n", start) + 1
                if end <= start:
                    continue
                chunk = text[start:end]
                self._sent[(rank, name)] = end
                self._emit(rank, name, chunk[:-1] if chunk.endswith("\n") else chunk)
            outputs = md.get("outputs") or []
            for out in outputs[self._shown_outputs[rank] :]:
                if self.group:
                    self._shown.append((rank, "display", out))
                self._display(out)
            self._shown_outputs[rank] = len(outputs)

    def _display(self, output: Any) -> None:
        try:
            from IPython.display import display

            data = output.get("data", {}) if isinstance(output, dict) else {}
            if data:
                display(data, raw=True, metadata=output.get("metadata", {}))
        except Exception:
            pass

    def in_rank_order(self) -> bool:
        """Whether what was shown is already grouped by rank, in rank order."""
        ranks = [r for r, _, _ in self._shown]
        return ranks == sorted(ranks)

    def flush(self) -> None:
        """Show what is left; then, when grouping, show the whole output again grouped by rank if needed."""
        self.poll(final=True)
        if self.group and not self.in_rank_order():
            self._regroup()

    def _regroup(self) -> None:
        from IPython.display import clear_output

        clear_output(wait=True)  # cleared when the first regrouped line arrives: no flicker
        for rank, name, what in sorted(self._shown, key=lambda item: item[0]):  # stable: each rank's own order
            if name == "display":
                self._display(what)
            else:
                self._write(rank, name, what)
        self._shown.sort(key=lambda item: item[0])
