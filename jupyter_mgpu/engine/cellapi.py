"""``mgpu`` inside a ``%%mgpu`` cell: helpers user code on a rank can call."""

from __future__ import annotations

from typing import Any

from . import runtime


def info() -> dict[str, Any]:
    """This rank's identity, device and memory (same as a row of ``%mgpu_status``)."""
    return runtime.describe()
