"""Sizes in bytes, written and read one way everywhere: ``format_bytes`` for every view, ``parse_size``
for every option that takes a memory size (pure: safe to import anywhere, the server extension included)."""

from __future__ import annotations

import re

from jupyter_mgpu.errors import MgpuError

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)


def format_bytes(n: float) -> str:
    """A size in binary units with one decimal (bytes without): ``512 B``, ``2.0 KiB``, ``5.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_size(text: str | int | float) -> int:
    """Parse a memory size such as ``2GiB``, ``512M``, ``1.5GB`` or ``1000000`` into bytes."""
    if isinstance(text, bool):
        raise MgpuError(f"malformed memory size {text!r}: use a number with a unit such as 512MiB or 2GiB")
    if isinstance(text, (int, float)):
        if not (1 <= text < 2**63):  # also rejects NaN
            raise MgpuError(f"memory size must be at least 1 byte, got {text!r}")
        return int(text)
    m = _SIZE_RE.match(str(text))
    if not m:
        raise MgpuError(f"malformed memory size {text!r}: use a number with a unit such as 512MiB or 2GiB")
    number, prefix, binary, b = m.groups()
    power = "kmgtp".find(prefix.lower()) + 1 if prefix else 0
    # no unit: bytes; K/M/G or KiB/MiB/GiB: binary; KB/MB/GB: decimal (as pip, docker and slurm read them)
    base = 1024 if (binary or not b) else 1000
    value = int(float(number) * base**power)
    if not 1 <= value < 2**63:
        raise MgpuError(f"memory size must be at least 1 byte, got {text!r}")
    return value
