"""Rank side of ``mg.from_dtensor`` and ``DistTensor.to_dtensor``: torch DTensors bound to names in
this rank's namespace, read as our pure layout, written into the notebook's one buffer, or made from
our shards (sharing their memory where the two splits agree).

Runs on the engines; the controller side is ``tensors/dtensor_handle.py``.
"""

from __future__ import annotations

import math
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.execution import namespace_transfer
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout.dtensor_layout import DTensorLayout
from jupyter_mgpu.layout.mesh import Mesh, MeshPlacement, Partial
from jupyter_mgpu.ops import shard_exchange, shared_file

_MESHES: dict[
    tuple[Any, ...], Any
] = {}  # torch DeviceMeshes made here, by (shape, names, ranks): each makes process groups


def _dtensor(name: str) -> Any:
    """The DTensor bound to ``name`` on this rank (the session's error names the ranks that lack it)."""
    from torch.distributed.tensor import DTensor

    ns = rank_state.user_ns()
    if name not in ns:
        raise NameError(f"name {name!r} is not defined on the ranks: bind a DTensor to it in a %%mgpu cell first")
    value = ns[name]
    if not isinstance(value, DTensor):
        raise TypeError(f"{name!r} is a {type(value).__name__} on the ranks, not a torch DTensor")
    return value


def describe(name: str) -> dict[str, Any]:
    """The layout of the DTensor ``name`` and this rank's real piece (local shape, global offset, bytes)."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    dt = _dtensor(name)
    local = dt.to_local()
    shape, offset = compute_local_shape_and_global_offset(dt.shape, dt.device_mesh, dt.placements)
    return {
        "rank": rank_state.get().rank,
        "layout": DTensorLayout.of(dt, name),
        "local_shape": tuple(int(s) for s in local.shape),
        "torch_shape": tuple(int(s) for s in shape),
        "offset": tuple(int(o) for o in offset),
        "bytes": local.numel() * local.element_size(),
    }


def _reduced(dt: Any) -> Any:
    """``dt`` with every Partial mesh dim reduced (all_reduce), as ``full_tensor()`` would first."""
    from torch.distributed.tensor import Replicate

    if not any(p.is_partial() for p in dt.placements):
        return dt
    return dt.redistribute(dt.device_mesh, [Replicate() if p.is_partial() else p for p in dt.placements])


def _writer_piece(name: str) -> tuple[Any, Any, bool]:
    """(reduced DTensor, this rank's row of its table, whether this rank writes it: the first holder)."""
    dt = _reduced(_dtensor(name))
    rank = rank_state.get().rank
    mine = next(s for s in DTensorLayout.of(dt).table if s.rank == rank)
    writes = mine.numel > 0 and rank == min(mine.holders)
    if etrace.active():
        etrace.begin_op("gather")
        etrace.declare(name, dt.shape, dt.to_local().element_size(), name)
        etrace.record(0, "hold", [etrace.block(name, mine.ranges)], mine.numel * dt.to_local().element_size())
        if writes:
            etrace.record(1, "send", [etrace.block(name, mine.ranges)], mine.numel * dt.to_local().element_size(), -1)
        etrace.end_op()
    return dt, mine, writes


def gather_to_file(name: str, path: str) -> int:
    """Write this rank's piece of the DTensor ``name`` into its place in the shared file ``path``
    (each replicated piece by its lowest rank only; Partial values reduced first); returns bytes written."""
    dt, mine, writes = _writer_piece(name)
    if not writes:
        return 0
    local = dt.to_local()
    view, m = shared_file._file_view(path, tuple(dt.shape), mine.ranges, local.dtype, write=True)
    view.copy_(local)
    del view
    m.close()
    nbytes: int = local.numel() * local.element_size()
    return nbytes


def piece(name: str) -> Any:
    """This rank's piece as a CPU tensor, or None when another rank writes it (ranks on other hosts)."""
    dt, _, writes = _writer_piece(name)
    return dt.to_local().cpu() if writes else None


def _device_mesh(mesh: Mesh) -> Any:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    key = (mesh.shape, mesh.dim_names, mesh.ranks)
    if key not in _MESHES:
        ranks = torch.tensor(mesh.ranks, dtype=torch.int).reshape(mesh.shape)
        _MESHES[key] = DeviceMesh(rank_state.get().device.type, ranks, mesh_dim_names=mesh.dim_names)
    return _MESHES[key]


def _torch_placements(placements: tuple[MeshPlacement, ...]) -> list[Any]:
    from torch.distributed.tensor import Partial as TorchPartial
    from torch.distributed.tensor import Replicate, Shard

    out: list[Any] = []
    for p in placements:
        if isinstance(p, pl.Shard):
            out.append(Shard(p.dim))
        elif isinstance(p, Partial):
            out.append(TorchPartial(p.reduce_op))
        else:
            out.append(Replicate())
    return out


def to_dtensor(
    hid: str,
    name: str,
    shape: tuple[int, ...],
    placement: pl.Placement,
    mesh: Mesh,
    placements: tuple[MeshPlacement, ...],
    same_split: bool,
) -> dict[str, Any]:
    """Bind ``name`` on this rank to a DTensor of our tensor ``hid`` on ``mesh`` with ``placements``.

    Where every rank's piece is the same box in both splits (``same_split``), the DTensor's local
    tensor is our shard itself (no copy); else the pieces move between the ranks once.
    """
    import torch
    from torch.distributed.tensor import DTensor

    local = store.get(hid)
    rank, world = rank_state.get().rank, rank_state.get().world_size
    if same_split:
        mine = local
    else:
        ours = [s.ranges for s in pl.shard_table(shape, placement, world)]
        theirs = {s.rank: s.ranges for s in DTensorLayout(shape, "", mesh, placements).table}
        replicated = isinstance(placement, pl.Replicate)
        mine, _ = shard_exchange.exchange_boxes(local, ours, [theirs[r] for r in range(world)], replicated)
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    dt = DTensor.from_local(
        mine,
        _device_mesh(mesh),
        _torch_placements(placements),
        run_check=False,
        shape=torch.Size(shape),
        stride=tuple(strides),
    )
    namespace_transfer.put({name: dt})
    return {"rank": rank, "shares": mine is local, "bytes": mine.numel() * mine.element_size()}
