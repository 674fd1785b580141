"""``mg.from_dtensor("name")`` and ``DistTensor.to_dtensor("name")``: torch DTensors that live on the
ranks under a name, seen and gathered from the notebook without copying by hand.

A :class:`DTensorHandle` holds no data: its layout (shape, dtype, mesh, placements), every rank's real
local shape and bytes, and ``gather()``, which writes the global tensor into one buffer the way
``DistTensor.gather`` does (Partial values reduced first, as ``full_tensor()`` would).

The other half: ``ops/dtensor_handle.py``, its rank side.
"""

from __future__ import annotations

import math
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout.dtensor_layout import DTensorLayout, describe_pieces
from jupyter_mgpu.layout.mesh import Mesh, Partial, block2d_mesh, mesh_shard_table, normalize_placements
from jupyter_mgpu.ops import dtensor_handle as rank_dtensor
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.tensors import dist_tensor, shared_blocks, sockets
from jupyter_mgpu.tensors.handles import check_out
from jupyter_mgpu.units import format_bytes


class DTensorHandle:
    """A handle to the DTensor bound to ``name`` on every rank of ``session`` (no copy of its data)."""

    def __init__(self, session: Any, name: str, layout: DTensorLayout, pieces: list[dict[str, Any]]):
        self.session = session
        self.name = name
        self.layout = layout
        self.local_shapes = [tuple(p["local_shape"]) for p in pieces]
        self.bytes_per_rank = [int(p["bytes"]) for p in pieces]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    @property
    def dtype_name(self) -> str:
        return self.layout.dtype

    @property
    def dtype(self) -> Any:
        import torch

        return getattr(torch, self.layout.dtype)

    @property
    def placement(self) -> DTensorLayout:
        """Mesh and placements (``.mesh``, ``.placements``, ``.label`` like ``[S(0), R] on mesh (2, 2)``)."""
        return self.layout

    @property
    def mesh(self) -> Mesh:
        return self.layout.mesh

    @property
    def placements(self) -> tuple[Any, ...]:
        return self.layout.placements

    @property
    def world_size(self) -> int:
        return int(self.session.world_size)

    @property
    def nbytes(self) -> int:
        return self.layout.nbytes

    def __repr__(self) -> str:
        head = (
            f"DTensor {self.name!r}(shape={self.shape}, dtype={self.dtype_name}, "
            f"placements={self.layout.label}, {self.world_size} ranks)"
        )
        rows = [
            f"  rank {p['rank']} at {p['coordinate']}: local {p['shape']}, {format_bytes(b)}, {p['kind']}"
            for p, b in zip(describe_pieces(self.layout), self.bytes_per_rank)
        ]
        return "\n".join([head] + rows)

    def _repr_html_(self) -> str:
        from jupyter_mgpu.widgets.placement import layout_html

        return layout_html(self.layout, repr(self))

    def refresh(self) -> DTensorHandle:
        """Read the name again (after a cell rebound it): a new handle."""
        return from_dtensor(self.name, session=self.session)

    def gather(self, out: Any = None) -> Any:
        """The global tensor in the notebook, each piece written once into one buffer (replicas by their
        lowest rank; Partial values reduced first, as ``full_tensor()`` would). ``out``: a contiguous CPU
        tensor of the right shape and dtype to fill instead of a new one."""
        import torch

        s = self.session
        s.check_alive()
        check_out(out, self.shape, self.dtype_name)
        numel = math.prod(self.shape)
        nbytes = numel * torch.empty((), dtype=self.dtype).element_size()
        if sockets.streamed_ranks(s):  # ranks on other hosts cannot write this host's file: pieces by value
            result = out if out is not None else torch.empty(self.shape, dtype=self.dtype)
            pieces = s.run(rank_dtensor.piece, self.name, label="gather")
            for row, got in zip(self.layout.table, pieces):
                if got is not None:
                    result[row.index].copy_(got)
            return result
        if out is None:  # the ranks write into fresh shared pages that become the result
            with shared_blocks.one_off(nbytes) as buf:
                s.run(rank_dtensor.gather_to_file, self.name, buf.path, label="gather")
                flat = buf.tensor(numel, self.dtype)
            return flat.view(self.shape)
        with shared_blocks.staging(nbytes) as buf:
            s.run(rank_dtensor.gather_to_file, self.name, buf.path, label="gather")
            out.copy_(buf.tensor(numel, self.dtype).view(self.shape))
        return out


def from_dtensor(name: str, session: Any = None) -> DTensorHandle:
    """A handle to the torch DTensor bound to ``name`` on the ranks (made in a ``%%mgpu`` cell or by
    ``to_dtensor``): its placement, per-rank local shapes and bytes, ``.gather()`` and ``mg.show``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise MgpuError(f"mg.from_dtensor needs the name the DTensor has on the ranks, got {name!r}")
    s = session or sessmod.current()
    s.check_alive()
    pieces = s.run(rank_dtensor.describe, name, label="from_dtensor")
    layout = pieces[0]["layout"]
    for p in pieces[1:]:
        if p["layout"] != layout:
            raise MgpuError(
                f"{name!r} is not one DTensor on every rank: rank {p['rank']} has {p['layout'].label} "
                f"of shape {p['layout'].shape}, rank {pieces[0]['rank']} {layout.label} of shape {layout.shape}"
            )
    mine = {row.rank: row for row in layout.table}
    for p in pieces:
        row = mine.get(p["rank"])
        if row is None or tuple(p["local_shape"]) != row.shape:
            raise MgpuError(
                f"rank {p['rank']}'s piece of {name!r} has shape {p['local_shape']}, not the "
                f"{row.shape if row else 'none'} its placement gives (made with from_local and uneven pieces?)"
            )
    return DTensorHandle(s, name, layout, pieces)


def _mesh_and_placements(tensor: Any, mesh: Any, placements: Any) -> tuple[Mesh, tuple[Any, ...]]:
    """The mesh and placements ``to_dtensor`` uses: given, or the natural ones for our placement."""
    world, ours = tensor.world_size, tensor.placement
    default: tuple[Any, ...]
    if mesh is None and isinstance(ours, pl.Block2D):
        m, default = block2d_mesh(ours, world)
    else:
        if mesh is None:
            m = Mesh((world,))
        elif isinstance(mesh, Mesh):
            m = mesh
        elif isinstance(mesh, (tuple, list, int)):
            m = Mesh(mesh)
        else:  # torch's DeviceMesh, read by its shape, names and ranks
            m = Mesh(tuple(mesh.shape), getattr(mesh, "mesh_dim_names", None), mesh.mesh.tolist())
        if isinstance(ours, pl.Shard):
            default = tuple(pl.Shard(ours.dim) for _ in m.shape)  # nested: split over every rank in mesh order
        elif isinstance(ours, pl.Replicate):
            default = tuple(pl.Replicate() for _ in m.shape)
        elif m.ndim == 2:
            default = (pl.Shard(0), pl.Shard(1))
        else:
            raise MgpuError(f"a {ours.label} tensor needs a 2-D mesh, got {m.label}")
    if m.size != world or sorted(m.ranks) != list(range(world)):
        raise MgpuError(f"the mesh {m.label} must hold every rank of this session once ({world} ranks)")
    try:
        chosen = normalize_placements(tensor.shape, m, default if placements is None else placements)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None
    if any(isinstance(p, Partial) for p in chosen):
        raise MgpuError("to_dtensor places known values: use Shard(dim) or Replicate() on each mesh dim, not Partial")
    return m, chosen


def to_dtensor(tensor: Any, name: str, mesh: Any = None, placements: Any = None) -> DTensorHandle:
    """Bind ``name`` on every rank to a torch DTensor of ``tensor`` (its shards' memory shared where our
    split and DTensor's agree) and return the handle (see ``DistTensor.to_dtensor``)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise MgpuError(f"to_dtensor needs a name to bind on the ranks, got {name!r}")
    s = dist_tensor.session_of(tensor)
    m, chosen = _mesh_and_placements(tensor, mesh, placements)
    ours = [row.ranges for row in tensor.table]
    same = all(a == b.ranges for a, b in zip(ours, mesh_shard_table(tensor.shape, m, chosen)))
    s.run(
        rank_dtensor.to_dtensor,
        tensor.handle_id,
        name,
        tensor.shape,
        tensor.placement,
        m,
        chosen,
        same,
        label="to_dtensor",
    )
    return from_dtensor(name, session=s)


dist_tensor.OPERATORS["to_dtensor"] = to_dtensor
