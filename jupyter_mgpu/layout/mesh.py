"""Pure DTensor layout math: a device mesh of 1 to 3 dims and one placement per mesh dim.

Spelled like torch: ``Mesh((2, 2), ("dp", "tp"))`` lays ranks out row-major as
``init_device_mesh`` does, and each mesh dim gets ``Shard(dim)``, ``Replicate()`` or
``Partial(reduce_op)``. :func:`mesh_shard_table` gives every rank's piece computed exactly as
torch's ``compute_local_shape_and_global_offset``: a mesh dim of size ``n`` splits the current
local extent ``m`` of its tensor dim into ``torch.chunk`` pieces of ``ceil(m / n)`` (so trailing
pieces may be short or empty: 5 over 4 is 2, 2, 1, 0, where ``placement.split`` gives 2, 1, 1, 1),
several mesh dims sharding one tensor dim nest in mesh-dim order, and an empty piece starts at the
dim's global size. ``Block2D(r, c)`` is the mesh ``(r, c)`` with ``[Shard(0), Shard(1)]``
(:func:`block2d_mesh`); it agrees with ``placement.shard_table`` only when the sizes divide evenly.
No torch here: torch's own meshes and placements are read by duck typing (:func:`from_torch`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from jupyter_mgpu.layout.placement import Block2D, Range, Replicate, Shard, ShardInfo

MAX_MESH_DIMS = 3
REDUCE_OPS = ("sum", "avg", "min", "max", "product", "band", "bor", "bxor")


@dataclass(frozen=True)
class Partial:
    """Every rank on this mesh dim holds a full-size summand (or min/max/... operand) of the value."""

    reduce_op: str = "sum"

    def __post_init__(self) -> None:
        if self.reduce_op not in REDUCE_OPS:
            raise ValueError(f"Partial reduce_op must be one of {', '.join(REDUCE_OPS)}, got {self.reduce_op!r}")

    @property
    def op(self) -> str:
        return self.reduce_op

    @property
    def label(self) -> str:
        return f"P({self.reduce_op})"

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op!r})"


MeshPlacement = Union[Shard, Replicate, Partial]  # noqa: UP007  (a runtime alias, as in placement.py)


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _flatten(nested: Any) -> list[Any]:
    if isinstance(nested, (list, tuple)):
        return [x for item in nested for x in _flatten(item)]
    return [nested]


def _nested_shape(nested: Any) -> tuple[int, ...]:
    if isinstance(nested, (list, tuple)):
        return (len(nested), *(_nested_shape(nested[0]) if nested else ()))
    return ()


@dataclass(frozen=True, init=False)
class Mesh:
    """A device mesh: ``shape`` (1 to 3 dims), optional ``dim_names`` and the ranks at each position.

    ``ranks`` is flat in row-major order or nested like torch's ``mesh.tolist()``; by default
    ``range(prod(shape))``, so rank ``r`` of a ``(2, 2)`` mesh sits at ``(r // 2, r % 2)``.
    """

    shape: tuple[int, ...]
    dim_names: tuple[str, ...] | None
    ranks: tuple[int, ...]

    def __init__(self, shape: Iterable[int] | int, dim_names: Iterable[str] | None = None, ranks: Any = None) -> None:
        shp: tuple[int, ...] = (shape,) if isinstance(shape, int) else tuple(shape)
        if not 1 <= len(shp) <= MAX_MESH_DIMS:
            raise ValueError(f"a mesh needs 1 to {MAX_MESH_DIMS} dims, got {len(shp)} (shape {shp})")
        if not all(_whole(s) and s >= 1 for s in shp):
            raise ValueError(f"mesh shape {shp} must be positive whole numbers")
        names = None if dim_names is None else tuple(dim_names)
        if names is not None and (len(names) != len(shp) or len(set(names)) != len(names)):
            raise ValueError(f"mesh dim_names {names} must be {len(shp)} different names, one per mesh dim")
        n = math.prod(shp)
        if ranks is None:
            flat = list(range(n))
        else:
            nested = _nested_shape(ranks)
            if len(nested) > 1 and nested != shp:
                raise ValueError(f"mesh ranks are laid out as {nested}, not as the mesh shape {shp}")
            flat = _flatten(ranks)
            if len(flat) != n or not all(_whole(r) and r >= 0 for r in flat) or len(set(flat)) != n:
                raise ValueError(f"mesh ranks must be {n} different non-negative whole numbers, got {ranks!r}")
        object.__setattr__(self, "shape", shp)
        object.__setattr__(self, "dim_names", names)
        object.__setattr__(self, "ranks", tuple(int(r) for r in flat))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def coordinate(self, rank: int) -> tuple[int, ...]:
        """Rank ``rank``'s position in the mesh (as ``DeviceMesh.get_coordinate()`` on that rank)."""
        if rank not in self.ranks:
            raise ValueError(f"rank {rank} is not in the mesh {self.label} (ranks {list(self.ranks)})")
        flat, coord = self.ranks.index(rank), []
        for s in reversed(self.shape):
            flat, c = divmod(flat, s)
            coord.append(c)
        return tuple(reversed(coord))

    def rank_at(self, coordinate: Sequence[int]) -> int:
        """The rank at a mesh position."""
        if len(coordinate) != self.ndim or not all(0 <= c < s for c, s in zip(coordinate, self.shape)):
            raise ValueError(f"mesh coordinate {tuple(coordinate)} is outside the mesh shape {self.shape}")
        flat = 0
        for c, s in zip(coordinate, self.shape):
            flat = flat * s + c
        return self.ranks[flat]

    def dim_name(self, mesh_dim: int) -> str:
        """The mesh dim's name, or ``"dim N"`` when the mesh has none."""
        return self.dim_names[mesh_dim] if self.dim_names else f"dim {mesh_dim}"

    @property
    def label(self) -> str:
        """``(2, 2)`` or ``(dp=2, tp=2)``."""
        if self.dim_names:
            return "(" + ", ".join(f"{n}={s}" for n, s in zip(self.dim_names, self.shape)) + ")"
        return "(" + ", ".join(str(s) for s in self.shape) + ")"


@dataclass(frozen=True)
class MeshShardInfo(ShardInfo):
    """One rank's piece under a mesh placement (``ranges``/``shape`` as in :class:`ShardInfo`).

    ``block_id`` numbers the distinct index boxes (in order of the lowest rank holding each);
    ``holders`` are all ranks whose piece covers the same box; ``replica_group`` those of them that
    hold the same values (they differ only on Replicate mesh dims; holders that differ on a
    Partial mesh dim hold different operands of the reduction). ``partial_ops`` has one entry per
    Partial mesh dim, e.g. ``("sum",)``.
    """

    coordinate: tuple[int, ...]
    block_id: int
    holders: tuple[int, ...]
    replica_group: tuple[int, ...]
    partial_dims: tuple[int, ...]
    partial_ops: tuple[str, ...]

    @property
    def partial(self) -> bool:
        return bool(self.partial_dims)

    @property
    def empty(self) -> bool:
        return self.numel == 0


def placements_label(placements: Sequence[Any]) -> str:
    """Torch's spelling: ``[S(0), R]``, ``[S(0), S(1)]``, ``[P(sum), R]``."""
    return "[" + ", ".join(p.label for p in placements) + "]"


def normalize_placements(shape: Sequence[int], mesh: Mesh, placements: Sequence[Any]) -> tuple[MeshPlacement, ...]:
    """Check one placement per mesh dim against a tensor of ``shape``; negative shard dims become positive.

    Raises ``ValueError`` with one sentence naming what is wrong.
    """
    if isinstance(placements, (Shard, Replicate, Partial, Block2D)):
        placements = [placements]
    placements = list(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(
            f"{len(placements)} placement{'' if len(placements) == 1 else 's'} {placements} for a "
            f"{mesh.ndim}-D mesh {mesh.label}: "
            f"give one placement per mesh dim"
        )
    ndim, out = len(shape), list[MeshPlacement]()
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Block2D):
            raise ValueError(
                f"Block2D is a whole 2-D mesh, not a placement of one mesh dim (mesh dim {mesh_dim}); "
                f"use block2d_mesh() for its mesh and [Shard(0), Shard(1)]"
            )
        if isinstance(p, Shard):
            dim = p.dim + ndim if p.dim < 0 else p.dim
            if not 0 <= dim < ndim:
                where = f"dims 0-{ndim - 1}" if ndim else "no dims"
                raise ValueError(
                    f"Shard({p.dim}) on mesh dim {mesh_dim} is out of range for a {ndim}-D tensor ({where})"
                )
            out.append(Shard(dim))
        elif isinstance(p, (Replicate, Partial)):
            out.append(p)
        else:
            raise ValueError(
                f"mesh dim {mesh_dim} has placement {p!r}; it must be Shard(dim), Replicate() or Partial(op)"
            )
    return tuple(out)


def chunk(size: int, parts: int, index: int) -> tuple[int, int]:
    """``(length, offset)`` of piece ``index`` when ``torch.chunk`` splits ``size`` into ``parts``.

    Pieces are ``ceil(size / parts)`` long; trailing ones are shorter or empty (offset ``size``).
    """
    full = -(-size // parts)
    start = min(size, full * index)
    return max(0, min(size, full * index + full) - start), start


def _check_shape(shape: Iterable[int]) -> tuple[int, ...]:
    shp = tuple(shape)
    if not all(_whole(s) and s >= 0 for s in shp):
        raise ValueError(f"tensor shape {shp} must be non-negative whole numbers")
    return shp


def local_box(
    shape: Sequence[int], mesh_shape: Sequence[int], placements: Sequence[MeshPlacement], coordinate: Sequence[int]
) -> tuple[Range, ...]:
    """The global index ranges held at one mesh coordinate (placements already normalized)."""
    start = [0] * len(shape)
    local = list(shape)
    for mesh_dim, p in enumerate(placements):
        if not isinstance(p, Shard):
            continue
        length, offset = chunk(local[p.dim], mesh_shape[mesh_dim], coordinate[mesh_dim])
        # torch: an empty piece's global offset is the dim's global size, whatever came before
        start[p.dim] = start[p.dim] + offset if length else shape[p.dim]
        local[p.dim] = length
    return tuple((a, a + n) for a, n in zip(start, local))


def mesh_shard_table(shape: Iterable[int], mesh: Mesh, placements: Sequence[Any]) -> list[MeshShardInfo]:
    """Every rank's piece of a tensor of ``shape`` placed on ``mesh`` by ``placements``, in rank order."""
    shp = _check_shape(shape)
    pls = normalize_placements(shp, mesh, placements)
    partial_dims = tuple(i for i, p in enumerate(pls) if isinstance(p, Partial))
    partial_ops = tuple(p.reduce_op for p in pls if isinstance(p, Partial))
    rows = []
    for rank in sorted(mesh.ranks):
        coord = mesh.coordinate(rank)
        rows.append((rank, coord, local_box(shp, mesh.shape, pls, coord)))
    box_ids: dict[tuple[Range, ...], int] = {}
    holders: dict[tuple[Range, ...], list[int]] = {}
    groups: dict[tuple[tuple[Range, ...], tuple[int, ...]], list[int]] = {}
    for rank, coord, box in rows:
        box_ids.setdefault(box, len(box_ids))
        holders.setdefault(box, []).append(rank)
        groups.setdefault((box, tuple(coord[d] for d in partial_dims)), []).append(rank)
    return [
        MeshShardInfo(
            rank=rank,
            ranges=box,
            shape=tuple(b - a for a, b in box),
            coordinate=coord,
            block_id=box_ids[box],
            holders=tuple(holders[box]),
            replica_group=tuple(groups[(box, tuple(coord[d] for d in partial_dims))]),
            partial_dims=partial_dims,
            partial_ops=partial_ops,
        )
        for rank, coord, box in rows
    ]


def blocks(table: Sequence[MeshShardInfo]) -> list[MeshShardInfo]:
    """One entry per distinct box (the lowest rank's), in ``block_id`` order: what a view draws once."""
    seen: dict[int, MeshShardInfo] = {}
    for s in table:
        seen.setdefault(s.block_id, s)
    return [seen[i] for i in sorted(seen)]


def block2d_mesh(placement: Block2D, world_size: int) -> tuple[Mesh, tuple[Shard, Shard]]:
    """``Block2D(r, c)`` as torch spells it: the mesh ``(r, c)`` and ``[Shard(0), Shard(1)]``."""
    rows, cols = placement.grid(world_size)
    return Mesh((rows, cols)), (Shard(0), Shard(1))


def from_torch(device_mesh: Any, placements: Sequence[Any]) -> tuple[Mesh, tuple[MeshPlacement, ...]]:
    """Our :class:`Mesh` and placements for a torch ``DeviceMesh`` and its placements (read by duck typing)."""
    mesh = Mesh(
        tuple(int(s) for s in device_mesh.shape),
        getattr(device_mesh, "mesh_dim_names", None),
        device_mesh.mesh.tolist(),
    )
    out: list[MeshPlacement] = []
    for mesh_dim, p in enumerate(placements):
        kind = type(p).__name__
        if kind == "Shard":
            out.append(Shard(int(p.dim)))
        elif kind == "Replicate":
            out.append(Replicate())
        elif kind == "Partial":
            out.append(Partial(str(p.reduce_op)))
        else:
            raise ValueError(f"mesh dim {mesh_dim} has torch placement {p!r}, which is not Shard, Replicate or Partial")
    return mesh, tuple(out)
