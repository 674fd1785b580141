"""Pure layout math: where each piece of a global tensor lives (no torch, nothing of ours).

``Shard(dim)`` splits one dimension over all ranks, ``Replicate()`` gives every rank the whole
tensor, ``Block2D(rows, cols)`` arranges ranks in a grid (rank ``r`` at ``(r // cols, r % cols)``)
and splits dims 0 and 1 over it. Uneven sizes are split like ``numpy.array_split``: the first
``n % p`` pieces get one element more. :func:`shard_table` is the one table that the tensor
handles, the matmul planner, the transfer code and later widgets all share.

The other half: ``widgets/placement.py``, its view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Union

Range = tuple[int, int]


@dataclass(frozen=True)
class Shard:
    """Split dimension ``dim`` into contiguous pieces, one per rank, in rank order."""

    dim: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise ValueError(f"Shard(dim) needs a whole-number dimension, got {self.dim!r}")

    @property
    def label(self) -> str:
        return f"S({self.dim})"

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Replicate:
    """Every rank holds the whole tensor."""

    @property
    def label(self) -> str:
        return "R"

    def __repr__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Block2D:
    """A ``rows × cols`` grid of ranks; dim 0 is split over grid rows, dim 1 over grid columns.

    ``Block2D()`` picks the most square grid for the world size when it is used.
    """

    rows: int | None = None
    cols: int | None = None

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"Block2D {name} must be a positive whole number, got {v!r}")

    def grid(self, world_size: int) -> tuple[int, int]:
        """The ``(rows, cols)`` grid for ``world_size`` ranks."""
        rows, cols = self.rows, self.cols
        if rows is None:
            if cols is None:
                return square_grid(world_size)
            rows = world_size // cols if world_size % cols == 0 else 0
        elif cols is None:
            cols = world_size // rows if world_size % rows == 0 else 0
        if rows * cols != world_size:
            raise ValueError(
                f"Block2D({self.rows}, {self.cols}) is not a grid of {world_size} ranks "
                f"(rows × cols must equal the world size)"
            )
        return rows, cols

    @property
    def label(self) -> str:
        if self.rows is None and self.cols is None:
            return "B"
        return f"B({self.rows or '?'}x{self.cols or '?'})"

    def __repr__(self) -> str:
        return f"Block2D({self.rows}, {self.cols})"


Placement = Union[Shard, Replicate, Block2D]  # noqa: UP007  (a runtime alias: X | Y of classes needs 3.10's types.UnionType)


@dataclass(frozen=True)
class ShardInfo:
    """One rank's piece: its index range per dimension (start, stop) and its local shape."""

    rank: int
    ranges: tuple[Range, ...]
    shape: tuple[int, ...]

    @property
    def index(self) -> tuple[slice, ...]:
        """The slices that select this piece of the global tensor."""
        return tuple(slice(a, b) for a, b in self.ranges)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def square_grid(world_size: int) -> tuple[int, int]:
    """The most square ``rows × cols = world_size`` grid with ``rows <= cols``."""
    rows = math.isqrt(world_size)
    while world_size % rows:
        rows -= 1
    return rows, world_size // rows


def split(n: int, parts: int) -> list[Range]:
    """``n`` indices in ``parts`` contiguous ranges; the first ``n % parts`` are one longer."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def normalize(placement: Placement, ndim: int, world_size: int) -> Placement:
    """Check ``placement`` against a tensor of ``ndim`` dims; negative shard dims become positive.

    Raises ``ValueError`` with one sentence naming what is wrong.
    """
    if isinstance(placement, Shard):
        dim = placement.dim + ndim if placement.dim < 0 else placement.dim
        if not 0 <= dim < ndim:
            raise ValueError(
                f"Shard({placement.dim}) is out of range for a {ndim}-D tensor (dims 0-{ndim - 1})"
                if ndim
                else f"Shard({placement.dim}) cannot split a 0-D tensor"
            )
        return Shard(dim)
    if isinstance(placement, Replicate):
        return placement
    if isinstance(placement, Block2D):
        if ndim < 2:
            raise ValueError(f"Block2D needs a tensor with at least 2 dims, this one has {ndim}")
        rows, cols = placement.grid(world_size)
        return Block2D(rows, cols)
    raise ValueError(f"placement must be Shard(dim), Replicate() or Block2D(rows, cols), got {placement!r}")


def shard_table(shape: Iterable[int], placement: Placement, world_size: int) -> list[ShardInfo]:
    """Per rank, in rank order: the index ranges of the global tensor it holds and its local shape."""
    shape = tuple(int(s) for s in shape)
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape} has a negative size")
    placement = normalize(placement, len(shape), world_size)
    full = [(0, s) for s in shape]
    table = []
    if isinstance(placement, Shard):
        parts = split(shape[placement.dim], world_size)
    elif isinstance(placement, Block2D):
        rows, cols = placement.grid(world_size)  # normalize() set both, so this is (rows, cols) as given
        row_parts, col_parts = split(shape[0], rows), split(shape[1], cols)
    for rank in range(world_size):
        ranges = list(full)
        if isinstance(placement, Shard):
            ranges[placement.dim] = parts[rank]
        elif isinstance(placement, Block2D):
            ranges[0] = row_parts[rank // cols]
            ranges[1] = col_parts[rank % cols]
        table.append(ShardInfo(rank, tuple(ranges), tuple(b - a for a, b in ranges)))
    return table


def label(placement: Placement) -> str:
    """The short label: ``S(0)``, ``R``, ``B(2x2)``."""
    return placement.label


def owners(placement: Placement) -> str:
    """``"one"`` if each element lives on exactly one rank, ``"all"`` if every rank holds it."""
    return "all" if isinstance(placement, Replicate) else "one"


def intersect(a: tuple[Range, ...], b: tuple[Range, ...]) -> tuple[Range, ...] | None:
    """The overlap of two index boxes, or None if they share no element."""
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo, hi = max(a0, b0), min(a1, b1)
        if hi <= lo:
            return None
        out.append((lo, hi))
    return tuple(out)


def box_numel(box: tuple[Range, ...]) -> int:
    return math.prod(b - a for a, b in box)


def box_is_contiguous(box: tuple[Range, ...], origin: tuple[Range, ...]) -> bool:
    """Whether global ``box`` is one contiguous run inside a row-major local tensor covering ``origin``:
    leading dims of extent 1, then at most one partial dim, then whole dims."""
    extents = [b - a for a, b in box]
    full = [b - a for a, b in origin]
    if 0 in extents:
        return True
    i = 0
    while i < len(extents) and extents[i] == 1:
        i += 1
    return all(e == f for e, f in zip(extents[i + 1 :], full[i + 1 :]))


def moves(
    shape: Iterable[int], src: Placement, dst: Placement, world_size: int
) -> list[list[tuple[Range, ...] | None]]:
    """``moves[s][d]``: the box rank ``s`` sends to rank ``d`` to turn ``src`` into ``dst`` (None: nothing).

    A replicated source never sends (every rank already has everything); the diagonal is kept
    (local copies) so a caller sees the whole plan.
    """
    shape = tuple(shape)
    st, dt = shard_table(shape, src, world_size), shard_table(shape, dst, world_size)
    replicated = isinstance(normalize(src, len(shape), world_size), Replicate)
    return moves_between([s.ranges for s in st], [d.ranges for d in dt], replicated)


def moves_between(
    src: list[tuple[Range, ...]], dst: list[tuple[Range, ...]], src_replicated: bool = False
) -> list[list[tuple[Range, ...] | None]]:
    """:func:`moves` between any two tables of boxes, one per rank in rank order (e.g. our split and
    DTensor's): ``[s][d]`` is the overlap of ``src[s]`` and ``dst[d]``; a replicated source only copies
    locally."""
    out: list[list[tuple[Range, ...] | None]] = []
    for s in range(len(src)):
        row: list[tuple[Range, ...] | None] = []
        for d in range(len(dst)):
            if src_replicated:
                row.append(dst[d] if s == d and box_numel(dst[d]) > 0 else None)
                continue
            box = intersect(src[s], dst[d])
            row.append(box if box is not None and box_numel(box) > 0 else None)
        out.append(row)
    return out
