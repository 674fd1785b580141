"""Counter-based random fill: the global tensor is the same whatever the world size.

The global tensor is cut into fixed tiles of its last two dims (``TILE × TILE``), independent of
the placement; tile ``(lead, i, j)`` is drawn from its own generator seeded with a hash of
``(seed, lead, i, j)``. A rank fills its shard from the tiles it overlaps, so shard ``k`` of a
4-rank tensor holds exactly the elements of the same rows of a 1-rank tensor. The controller can
build the same global tensor with :func:`global_tensor` for checks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

TILE = 256
_MASK = (1 << 64) - 1


def mix(*words: int) -> int:
    """A splitmix64 hash of ``words``: well-spread 63-bit seeds for neighbouring tiles."""
    h = 0x9E3779B97F4A7C15
    for w in words:
        z = (h + (int(w) & _MASK) + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        h = z ^ (z >> 31)
    return h & ((1 << 63) - 1)


def _as_matrix(
    shape: Sequence[int], ranges: Sequence[tuple[int, int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Split a shape/box into leading dims and a 2-D (rows, cols) tail."""
    shape, ranges = tuple(shape), tuple(ranges)
    if len(shape) == 0:
        return (), (), (1, 1), ((0, 1), (0, 1))
    if len(shape) == 1:
        return (), (), (1, shape[0]), ((0, 1), ranges[0])
    return shape[:-2], ranges[:-2], shape[-2:], ranges[-2:]


def fill(out: Any, kind: str, shape: Sequence[int], ranges: Sequence[tuple[int, int]], seed: int) -> Any:
    """Fill ``out`` (the local shard covering ``ranges`` of a global ``shape``) with ``randn``/``rand``."""
    import torch

    lead_shape, lead_ranges, (nr, nc), ((r0, r1), (c0, c1)) = _as_matrix(shape, ranges)
    gen_dtype = out.dtype if out.dtype == torch.float64 else torch.float32
    g = torch.Generator(device=out.device)
    draw = torch.randn if kind == "randn" else torch.rand
    view = out.reshape(out.shape[:-2] + (r1 - r0, c1 - c0)) if out.dim() >= 2 else out.reshape(r1 - r0, c1 - c0)
    lead_strides = [math.prod(lead_shape[i + 1 :]) for i in range(len(lead_shape))]
    for lead in itertools.product(*(range(a, b) for a, b in lead_ranges)):
        flat = sum(i * s for i, s in zip(lead, lead_strides))
        local_lead = tuple(i - a for i, (a, _) in zip(lead, lead_ranges))
        target = view[local_lead] if local_lead else view
        for ti in range(r0 // TILE, (r1 - 1) // TILE + 1 if r1 > r0 else r0 // TILE):
            tr0, tr1 = ti * TILE, min(nr, ti * TILE + TILE)
            for tj in range(c0 // TILE, (c1 - 1) // TILE + 1 if c1 > c0 else c0 // TILE):
                tc0, tc1 = tj * TILE, min(nc, tj * TILE + TILE)
                g.manual_seed(mix(seed, flat, ti, tj))
                tile = draw((tr1 - tr0, tc1 - tc0), generator=g, dtype=gen_dtype, device=out.device)
                a0, a1, b0, b1 = max(r0, tr0), min(r1, tr1), max(c0, tc0), min(c1, tc1)
                target[a0 - r0 : a1 - r0, b0 - c0 : b1 - c0].copy_(tile[a0 - tr0 : a1 - tr0, b0 - tc0 : b1 - tc0])
    return out


def arange_fill(out: Any, shape: Sequence[int], ranges: Sequence[tuple[int, int]]) -> Any:
    """Fill ``out`` with each element's flat (row-major) index in the global tensor."""
    import torch

    shape = tuple(shape)
    acc = torch.zeros((), dtype=torch.int64, device=out.device)
    for d, (a, b) in enumerate(ranges):
        stride = math.prod(shape[d + 1 :])
        idx = torch.arange(a, b, dtype=torch.int64, device=out.device) * stride
        acc = acc.unsqueeze(-1) + idx if d else idx
    out.copy_(acc.reshape(out.shape))
    return out


def global_tensor(kind: str, shape: Sequence[int], dtype: Any = None, seed: int = 0, device: Any = "cpu") -> Any:
    """The whole tensor that ``mg.<kind>(shape, seed=seed)`` describes, built in this process."""
    import torch

    dtype = dtype or torch.float32
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    ranges = [(0, s) for s in shape]
    if kind in ("randn", "rand"):
        return fill(out, kind, shape, ranges, seed)
    if kind == "arange":
        return arange_fill(out, shape, ranges)
    return out.fill_(0 if kind == "zeros" else 1)
