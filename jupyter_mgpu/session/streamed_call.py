"""A direct-channel call's output as it arrives, kept the way ipyparallel's client keeps a task's.

The ranks send what a call prints and displays in events (``engine/execution/streamed_output.py``, the
other half); this keeps each rank's ``stdout``, ``stderr`` (text redrawn with ``\\r`` rewritten as
ipyparallel rewrites it) and ``outputs`` (display data) in ``_metadata``, one dict per rank in the
order of ``ranks``, so ``session/output_relay.py`` relays both call paths alike.
"""

from __future__ import annotations

import re
from typing import Any

# ipyparallel's client: text before a carriage return that starts a redraw of the line is dropped
_CR = re.compile(r".*\r(?=[^\n])")


class StreamedCall:
    """Stands for an ipyparallel AsyncResult's output metadata while a direct call runs."""

    def __init__(self, ranks: list[int]) -> None:
        self._index = {r: i for i, r in enumerate(ranks)}
        self._metadata: list[dict[str, Any]] = [{"stdout": "", "stderr": "", "outputs": []} for _ in ranks]

    def add(self, rank: int, events: list[list[Any]]) -> None:
        """Keep ``events`` (``[kind, what]``) that ``rank`` sent."""
        md = self._metadata[self._index[rank]]
        for kind, what in events:
            if kind == "display":
                md["outputs"].append(what)
            elif kind in ("stdout", "stderr"):
                text = md[kind] + what
                md[kind] = _CR.sub("", text) if "\r" in what else text
