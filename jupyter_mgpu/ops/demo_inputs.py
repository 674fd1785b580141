"""Demo tensors that make each collective obvious: rank r holds a shape (disk, square, …) of value r+1.

The classic teaching picture: on an 11×11 grid rank 0 has a disk of 1s, rank 1 a square of 2s, and so
on, so after ``all_reduce`` (MAX) or ``all_gather`` one can see whose data went where. Works for any
world size (shapes repeat after :data:`SHAPES` runs out, values keep growing with the rank) and any
1-D or 2-D shape. Pure torch; used on the ranks and by the controller's checks.
"""

from __future__ import annotations

import re
from typing import Any

SHAPES = ("disk", "square", "ring", "cross", "diamond", "x", "triangle", "frame", "stripes", "dots")
DEFAULT_SHAPE = (11, 11)


def parse_shape(shape: Any) -> tuple[int, ...]:
    """``"12x12"``, ``"12"``, ``12`` or ``(12, 12)`` → a tuple of 1 or 2 positive dimensions."""
    if shape is None:
        return DEFAULT_SHAPE
    if isinstance(shape, bool):
        raise ValueError(f"shape must be like 11x11 or 12, got {shape!r}")
    if isinstance(shape, int):
        dims: tuple[int, ...] = (shape,)
    elif isinstance(shape, str):
        parts = [p for p in re.split(r"[x×,*\s]+", shape.strip().lower()) if p]
        try:
            dims = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"shape must be like 11x11 or 12, got {shape!r}") from None
    else:
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ValueError(f"shape must be like 11x11 or 12, got {shape!r}") from None
    if not 1 <= len(dims) <= 2 or any(d < 1 for d in dims):
        raise ValueError(f"demo shapes have 1 or 2 positive dimensions such as 11x11 or 12, got {shape!r}")
    if dims[0] * (dims[1] if len(dims) > 1 else 1) > 1 << 20:
        raise ValueError(
            f"demo shape {shape!r} is too large to draw (more than 1M elements); pass your own tensors instead"
        )
    return dims


def shape_name(rank: int) -> str:
    """The name of rank ``rank``'s demo shape (``disk`` for rank 0, ``square`` for rank 1, …)."""
    return SHAPES[rank % len(SHAPES)]


def _mask(name: str, rows: int, cols: int) -> Any:
    import torch

    y = torch.linspace(-1.0, 1.0, rows).unsqueeze(1) if rows > 1 else torch.zeros(1, 1)
    x = torch.linspace(-1.0, 1.0, cols).unsqueeze(0) if cols > 1 else torch.zeros(1, 1)
    y, x = y.expand(rows, cols), x.expand(rows, cols)
    r2 = x * x + y * y
    if name == "disk":
        m = r2 <= 0.55
    elif name == "square":
        m = torch.maximum(x.abs(), y.abs()) <= 0.62
    elif name == "ring":
        m = (r2 >= 0.3) & (r2 <= 0.85)
    elif name == "cross":
        m = torch.minimum(x.abs(), y.abs()) <= 0.22
    elif name == "diamond":
        m = x.abs() + y.abs() <= 0.8
    elif name == "x":
        m = (x.abs() - y.abs()).abs() <= 0.22
    elif name == "triangle":
        m = (y >= -0.7) & (y <= 0.7) & (x.abs() <= (y + 0.7) * 0.6)
    elif name == "frame":
        m = (torch.maximum(x.abs(), y.abs()) >= 0.6) & (torch.maximum(x.abs(), y.abs()) <= 0.85)
    elif name == "stripes":
        m = (torch.arange(rows).unsqueeze(1).expand(rows, cols) % 3) == 1
    else:  # dots
        m = (torch.arange(rows).unsqueeze(1) % 3 == 1) & (torch.arange(cols).unsqueeze(0) % 3 == 1)
    if not bool(m.any()):  # tiny grids: at least the centre
        m = torch.zeros(rows, cols, dtype=torch.bool)
        m[rows // 2, cols // 2] = True
    return m


def demo_tensor(rank: int, shape: Any = DEFAULT_SHAPE, dtype: Any = None, device: Any = None) -> Any:
    """Rank ``rank``'s demo tensor: its shape (see :func:`shape_name`) filled with ``rank + 1``, zeros elsewhere.

    1-D shapes are filled with ``rank + 1`` everywhere, so every element shows whose data it is.
    """
    import torch

    dims = parse_shape(shape)
    dtype = dtype or torch.float32
    if len(dims) == 1:
        t = torch.full(dims, float(rank + 1), dtype=dtype)
    else:
        t = _mask(shape_name(rank), dims[0], dims[1]).to(dtype) * (rank + 1)
    return t.to(device) if device is not None else t
