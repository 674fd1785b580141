"""Relay engines' output to the notebook as it arrives, each line prefixed with its rank."""

from __future__ import annotations

import sys
from typing import Any


class OutputRelay:
    """Polls an ipyparallel AsyncResult's live stdout/stderr and prints new complete lines."""

    def __init__(self, ar: Any, ranks: list[int], prefix: bool = True):
        self.ar = ar
        self.ranks = ranks
        self.prefix = prefix
        self._sent = {(r, s): 0 for r in ranks for s in ("stdout", "stderr")}
        self._shown_outputs = {r: 0 for r in ranks}

    def _emit(self, rank: int, name: str, text: str) -> None:
        out = sys.stdout if name == "stdout" else sys.stderr
        if self.prefix:
            text = "".join(f"[rank {rank}] {line}\n" for line in text.split("\n"))
        else:
            text += "\n"
        out.write(text)
        out.flush()

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
            for out in outputs[self._shown_outputs[rank]:]:
                self._display(rank, out)
            self._shown_outputs[rank] = len(outputs)

    def _display(self, rank: int, output: Any) -> None:
        try:
            from IPython.display import display

            data = output.get("data", {}) if isinstance(output, dict) else {}
            if data:
                display(data, raw=True, metadata=output.get("metadata", {}))
        except Exception:
            pass

    def flush(self) -> None:
        self.poll(final=True)
