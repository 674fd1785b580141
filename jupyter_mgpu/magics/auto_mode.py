"""``%mgpu_auto on``: every following code cell runs on the ranks, as if it began with ``%%mgpu``.

Cells that begin with a magic (``%mgpu_status``, ``%%local``, ``%%time`` …) stay in the kernel, so
the notebook keeps its own commands; ``%%local`` runs a cell in the kernel. It works as an IPython
input transformer (like ``%autoawait``'s rewriting), so the cell's source, history and errors are
those the user typed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

MAGIC = "%%mgpu\n"


class AutoMode:
    """The transformer ``%mgpu_auto`` installs; ``in_kernel()`` suspends it (for ``%%local``)."""

    def __init__(self) -> None:
        self.on = False
        self._kernel_depth = 0

    def __call__(self, lines: list[str]) -> list[str]:
        if not self.on or self._kernel_depth:
            return lines
        first = next((line for line in lines if line.strip()), None)
        if first is None or first.lstrip().startswith("%"):
            return lines
        return [MAGIC, *lines]

    @contextlib.contextmanager
    def in_kernel(self) -> Iterator[None]:
        """Cells transformed inside run in the kernel, whatever the mode."""
        self._kernel_depth += 1
        try:
            yield
        finally:
            self._kernel_depth -= 1


AUTO = AutoMode()


def set_auto(shell: Any, on: bool) -> None:
    """Turn auto mode on or off in ``shell`` (installing the transformer once)."""
    transforms = shell.input_transformers_cleanup
    if AUTO not in transforms:
        transforms.append(AUTO)
    AUTO.on = on
