"""layout/mesh.py against real DTensors: on 4 real ranks, torch's ``init_device_mesh`` and
``distribute_tensor`` place a global tensor, and every rank's ``to_local()`` must be exactly our
table's piece (shape and values), for 1-D, 2-D and 3-D meshes, every placement kind, even and
uneven sizes."""

from __future__ import annotations

import itertools
import math

import pytest

from jupyter_mgpu.layout.mesh import Mesh, Partial, mesh_shard_table
from jupyter_mgpu.layout.placement import Replicate, Shard

pytestmark = pytest.mark.cluster

KINDS = [Shard(0), Shard(1), Replicate(), Partial()]
SHAPES = [(8, 8), (10, 3), (5, 7), (3, 10), (1, 1), (13, 2)]
MESHES = [((4,), ("world",)), ((2, 2), ("dp", "tp")), ((1, 2, 2), ("pp", "dp", "tp"))]


def _distribute_on_rank(mesh_shape, names, cases):
    """On every rank: distribute each case's global tensor and compare this rank's piece with ours."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS
    from torch.distributed.tensor import distribute_tensor

    from jupyter_mgpu.layout.mesh import from_torch

    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=names)
    rank = dist.get_rank()
    out = {"coordinate": tuple(mesh.get_coordinate()), "cases": []}
    for shape, placements, ranges, partial_factor in cases:
        g = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
        tp = [
            TS(p.dim) if type(p).__name__ == "Shard" else TR() if type(p).__name__ == "Replicate" else TP()
            for p in placements
        ]
        dt = distribute_tensor(g, mesh, tp)
        local = dt.to_local()
        mine = g[tuple(slice(a, b) for a, b in ranges[rank])]
        out["cases"].append(
            {
                "shape": tuple(local.shape),
                # Partial("sum") from distribute_tensor: each holder gets value / (its partial mesh dims' size)
                "values": bool(local.shape == mine.shape and torch.equal(local * partial_factor, mine)),
                "full": bool(torch.equal(dt.full_tensor(), g)),
                "ours": from_torch(dt.device_mesh, dt.placements),
            }
        )
    return out


@pytest.mark.parametrize("mesh_shape, names", MESHES, ids=["1d", "2d", "3d"])
@pytest.mark.slow
def test_distribute_tensor_places_exactly_our_table(s4, mesh_shape, names):
    mesh = Mesh(mesh_shape, names)
    cases, tables = [], []
    combos = list(itertools.product(KINDS, repeat=len(mesh_shape)))
    for placements in combos:
        for shape in SHAPES:
            table = mesh_shard_table(shape, mesh, placements)
            factor = math.prod(mesh_shape[d] for d in table[0].partial_dims)
            cases.append((shape, placements, [s.ranges for s in table], factor))
            tables.append(table)
    # a 3-D tensor split on its last dim, nested with another split
    extra = [Shard(2)] + [Shard(0)] * (len(mesh_shape) - 1)
    table = mesh_shard_table((3, 2, 9), mesh, extra)
    cases.append(((3, 2, 9), tuple(extra), [s.ranges for s in table], 1))
    tables.append(table)

    results = s4.run(_distribute_on_rank, mesh_shape, names, cases, timeout=240)
    assert [r["coordinate"] for r in results] == [mesh.coordinate(rank) for rank in range(4)]
    uneven = 0
    for i, (case, table) in enumerate(zip(cases, tables)):
        shape, placements = case[0], case[1]
        torch_shapes = [r["cases"][i]["shape"] for r in results]
        assert torch_shapes == [s.shape for s in table], (shape, placements)
        assert all(r["cases"][i]["values"] for r in results), (shape, placements)
        assert all(r["cases"][i]["full"] for r in results), (shape, placements)
        assert all(r["cases"][i]["ours"] == (mesh, tuple(placements)) for r in results), (shape, placements)
        uneven += len({s.shape for s in table if not s.partial}) > 1 or any(s.empty for s in table)
    assert len(cases) == len(combos) * len(SHAPES) + 1 and uneven > len(combos)  # uneven splits were exercised


def _from_local_partial(mesh_shape, placements, shapes, global_shape):
    """``DTensor.from_local`` of ``rank + 1`` everywhere; ``full_tensor()`` reduces the Partial dims.

    Uneven pieces need ``shape=`` and ``stride=``: without them each rank infers the global shape
    from its own piece (local × mesh size), the ranks disagree and gloo aborts in ``full_tensor``.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Shard as TS

    mesh = init_device_mesh("cpu", mesh_shape)
    rank = dist.get_rank()
    tp = [TS(p.dim) if type(p).__name__ == "Shard" else TP(p.reduce_op) for p in placements]
    local = torch.full(shapes[rank], float(rank + 1), dtype=torch.float64)
    stride = torch.empty(global_shape).stride()
    dt = DTensor.from_local(local, mesh, tp, run_check=False, shape=torch.Size(global_shape), stride=stride)
    return dt.full_tensor().tolist()


@pytest.mark.parametrize(
    "mesh_shape, placements, shape",
    [
        ((4,), (Partial(),), (3, 5)),
        ((2, 2), (Partial(), Shard(0)), (5, 3)),
        ((2, 2), (Shard(1), Partial()), (2, 7)),
        ((4,), (Partial("max"),), (2, 2)),
    ],
)
def test_partial_full_tensor_reduces_over_each_blocks_holders(s4, mesh_shape, placements, shape):
    import torch

    table = mesh_shard_table(shape, Mesh(mesh_shape), placements)
    expected = torch.zeros(shape, dtype=torch.float64)
    for block in {s.block_id: s for s in table}.values():
        values = [float(r + 1) for r in block.holders]
        expected[block.index] = max(values) if block.partial_ops == ("max",) else sum(values)
    results = s4.run(_from_local_partial, mesh_shape, placements, [s.shape for s in table], shape, timeout=120)
    assert all(torch.equal(torch.tensor(r, dtype=torch.float64), expected) for r in results)
    assert len({s.block_id for s in table}) == math.prod(mesh_shape) // 2 or mesh_shape == (4,)
