"""The mesh layout math (layout/mesh.py) and its text picture (layout/mesh_text.py), checked against
hand-worked cases and against torch's own pure shard arithmetic for every combination of sizes."""

from __future__ import annotations

import itertools

import pytest

from jupyter_mgpu.layout.mesh import (
    Mesh,
    Partial,
    block2d_mesh,
    blocks,
    chunk,
    from_torch,
    mesh_shard_table,
    placements_label,
)
from jupyter_mgpu.layout.mesh_text import render
from jupyter_mgpu.layout.placement import Block2D, Replicate, Shard, shard_table


def sizes(table, dim=0):
    return [s.shape[dim] for s in table]


# ---- Mesh ----


def test_mesh_lays_ranks_out_row_major_like_init_device_mesh():
    m = Mesh((2, 3), ("dp", "tp"))
    assert m.ranks == (0, 1, 2, 3, 4, 5) and m.ndim == 2 and m.size == 6
    assert [m.coordinate(r) for r in range(6)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert all(m.rank_at(m.coordinate(r)) == r for r in range(6))
    assert m.label == "(dp=2, tp=3)" and Mesh((2, 3)).label == "(2, 3)"
    assert Mesh(4).shape == (4,) and Mesh((1, 2, 2)).coordinate(3) == (0, 1, 1)


def test_mesh_takes_ranks_nested_like_torch_or_flat():
    nested = Mesh((2, 2), ranks=[[3, 2], [1, 0]])
    assert nested.ranks == (3, 2, 1, 0) and nested.coordinate(3) == (0, 0) and nested.coordinate(0) == (1, 1)
    assert Mesh((2, 2), ranks=[3, 2, 1, 0]) == nested
    table = mesh_shard_table((4,), nested, [Shard(0), Replicate()])
    assert [s.rank for s in table] == [0, 1, 2, 3]  # rank order, whatever the layout
    assert [s.ranges for s in table] == [((2, 4),), ((2, 4),), ((0, 2),), ((0, 2),)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shape": (1, 2, 2, 1)}, "a mesh needs 1 to 3 dims, got 4"),
        ({"shape": ()}, "a mesh needs 1 to 3 dims, got 0"),
        ({"shape": (2, 0)}, "must be positive whole numbers"),
        ({"shape": (2, 2), "dim_names": ("dp",)}, "must be 2 different names"),
        ({"shape": (2, 2), "dim_names": ("a", "a")}, "must be 2 different names"),
        ({"shape": (2, 2), "ranks": [0, 1, 2]}, "must be 4 different non-negative whole numbers"),
        ({"shape": (2, 2), "ranks": [0, 1, 1, 2]}, "must be 4 different non-negative whole numbers"),
        ({"shape": (2, 2), "ranks": [[0], [1], [2], [3]]}, "laid out as (4, 1), not as the mesh shape (2, 2)"),
    ],
)
def test_bad_mesh_is_one_sentence(kwargs, message):
    with pytest.raises(ValueError, match="^[^\n]*$") as err:
        Mesh(**kwargs)
    assert message in str(err.value)


def test_coordinate_of_a_rank_outside_the_mesh_says_so():
    with pytest.raises(ValueError, match=r"rank 5 is not in the mesh \(2, 2\)"):
        Mesh((2, 2)).coordinate(5)


# ---- chunk: torch.chunk-style splits ----


@pytest.mark.parametrize(
    "n, parts, expected",
    [
        (10, 4, [3, 3, 3, 1]),
        (5, 4, [2, 2, 1, 0]),
        (9, 4, [3, 3, 3, 0]),
        (8, 4, [2, 2, 2, 2]),
        (3, 4, [1, 1, 1, 0]),
        (0, 4, [0, 0, 0, 0]),
        (6, 4, [2, 2, 2, 0]),
    ],
)
def test_chunk_sizes_are_ceil_pieces_with_a_short_or_empty_tail(n, parts, expected):
    assert [chunk(n, parts, i)[0] for i in range(parts)] == expected
    table = mesh_shard_table((n, 2), Mesh(parts), [Shard(0)])
    assert sizes(table) == expected
    starts = [s.ranges[0][0] for s in table]
    assert starts == [min(n, sum(expected[:i])) if expected[i] else n for i in range(parts)]


# ---- placements on 1-D, 2-D, 3-D meshes ----


def test_1d_mesh_shard_replicate_partial():
    m = Mesh(4)
    s0 = mesh_shard_table((10, 3), m, [Shard(0)])
    assert [s.ranges for s in s0] == [((0, 3), (0, 3)), ((3, 6), (0, 3)), ((6, 9), (0, 3)), ((9, 10), (0, 3))]
    assert [s.block_id for s in s0] == [0, 1, 2, 3] and all(s.holders == (s.rank,) for s in s0)
    s1 = mesh_shard_table((10, 3), m, [Shard(-1)])  # negative dims count from the end, as torch's
    assert sizes(s1, 1) == [1, 1, 1, 0] and s1[3].ranges == ((0, 10), (3, 3)) and s1[3].empty
    r = mesh_shard_table((10, 3), m, [Replicate()])
    assert {s.ranges for s in r} == {((0, 10), (0, 3))} and all(s.replica_group == (0, 1, 2, 3) for s in r)
    p = mesh_shard_table((10, 3), m, [Partial()])
    assert all(s.shape == (10, 3) and s.partial and s.partial_ops == ("sum",) for s in p)
    assert all(s.holders == (0, 1, 2, 3) and s.replica_group == (s.rank,) for s in p)
    assert not any(s.partial for s in r)


def test_2d_mesh_shard_and_replicate():
    m = Mesh((2, 2), ("dp", "tp"))
    t = mesh_shard_table((10, 6), m, [Shard(0), Replicate()])
    assert [s.ranges for s in t] == [((0, 5), (0, 6))] * 2 + [((5, 10), (0, 6))] * 2
    assert [s.block_id for s in t] == [0, 0, 1, 1] and [s.replica_group for s in t] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    t = mesh_shard_table((5, 7), m, [Shard(0), Shard(1)])
    assert [s.shape for s in t] == [(3, 4), (3, 3), (2, 4), (2, 3)]
    assert [s.coordinate for s in t] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    t = mesh_shard_table((5, 7), m, [Replicate(), Shard(1)])
    assert [s.ranges[1] for s in t] == [(0, 4), (4, 7), (0, 4), (4, 7)] and t[0].holders == (0, 2)


def test_two_mesh_dims_sharding_one_tensor_dim_nest_in_mesh_dim_order():
    m = Mesh((2, 2))
    # 10 → 5, 5 on mesh dim 0, then each 5 → 3, 2 on mesh dim 1
    t = mesh_shard_table((10,), m, [Shard(0), Shard(0)])
    assert [s.ranges for s in t] == [((0, 3),), ((3, 5),), ((5, 8),), ((8, 10),)]
    # 5 → 3, 2; then 3 → 2, 1 and 2 → 1, 1 (not 2,1,1,1 and not 2,2,1,0)
    t = mesh_shard_table((5,), m, [Shard(0), Shard(0)])
    assert sizes(t) == [2, 1, 1, 1] and [s.ranges[0][0] for s in t] == [0, 2, 3, 4]
    # 1 → 1, 0; every empty piece starts at the global size, as torch's offset does
    t = mesh_shard_table((1,), m, [Shard(0), Shard(0)])
    assert [s.ranges for s in t] == [((0, 1),), ((1, 1),), ((1, 1),), ((1, 1),)]
    assert t[1].block_id == t[2].block_id == t[3].block_id and t[1].holders == (1, 2, 3)


def test_3d_mesh_every_kind():
    m = Mesh((1, 2, 2), ("pp", "dp", "tp"))
    t = mesh_shard_table((4, 6, 8), m, [Replicate(), Shard(0), Shard(2)])
    assert [s.coordinate for s in t] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert [s.shape for s in t] == [(2, 6, 4)] * 4
    assert [s.ranges for s in t][3] == ((2, 4), (0, 6), (4, 8))
    t = mesh_shard_table((3, 5), Mesh((2, 2, 2)), [Partial("max"), Shard(1), Replicate()])
    assert [s.shape for s in t] == [(3, 3)] * 2 + [(3, 2)] * 2 + [(3, 3)] * 2 + [(3, 2)] * 2
    assert t[0].holders == (0, 1, 4, 5) and t[0].replica_group == (0, 1) and t[4].replica_group == (4, 5)
    assert t[0].partial_dims == (0,) and t[0].partial_ops == ("max",)
    assert [b.rank for b in blocks(t)] == [0, 2]


def test_partial_spelling_and_labels():
    assert Partial().reduce_op == "sum" and Partial("avg").op == "avg" and repr(Partial()) == "Partial('sum')"
    assert placements_label([Shard(0), Replicate()]) == "[S(0), R]"
    assert placements_label([Shard(0), Shard(1)]) == "[S(0), S(1)]"
    assert placements_label([Partial(), Replicate()]) == "[P(sum), R]"
    assert placements_label([Partial("max"), Shard(1), Replicate()]) == "[P(max), S(1), R]"
    with pytest.raises(ValueError, match="Partial reduce_op must be one of sum, avg"):
        Partial("mean")


# ---- agreement with torch's own arithmetic and with Block2D ----


def _torch_table(shape, mesh_shape, placements):
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

    tp = [
        TS(p.dim) if isinstance(p, Shard) else TP(p.reduce_op) if isinstance(p, Partial) else TR() for p in placements
    ]
    out = []
    for coord in itertools.product(*(range(s) for s in mesh_shape)):
        local, offset = _compute_local_shape_and_global_offset(shape, mesh_shape, list(coord), tp)
        out.append(tuple((o, o + n) for o, n in zip(offset, local)))
    return out


KINDS = [Shard(0), Shard(1), Replicate(), Partial()]
MESHES = [(4,), (3,), (2, 2), (2, 3), (1, 2, 2), (2, 2, 2)]
SHAPES = [(0, 3), (1, 1), (5, 7), (8, 8), (10, 3), (3, 10), (13, 2)]


@pytest.mark.parametrize("mesh_shape", MESHES)
def test_every_combination_matches_torchs_compute_local_shape_and_global_offset(mesh_shape):
    m, checked = Mesh(mesh_shape), 0
    for placements in itertools.product(KINDS, repeat=len(mesh_shape)):
        for shape in SHAPES:
            ours = [s.ranges for s in mesh_shard_table(shape, m, placements)]
            assert ours == _torch_table(shape, mesh_shape, placements), (shape, mesh_shape, placements)
            checked += 1
    assert checked == len(KINDS) ** len(mesh_shape) * len(SHAPES)


def test_block2d_is_the_2d_mesh_with_shard0_shard1():
    mesh, pls = block2d_mesh(Block2D(2, 3), 6)
    assert mesh == Mesh((2, 3)) and pls == (Shard(0), Shard(1))
    assert block2d_mesh(Block2D(), 4)[0] == Mesh((2, 2))
    for shape in [(4, 6), (8, 9), (2, 3, 5)]:  # even: identical ranges
        old = shard_table(shape, Block2D(2, 3), 6)
        new = mesh_shard_table(shape, mesh, pls)
        assert [s.ranges for s in new] == [s.ranges for s in old]
        assert [s.shape for s in new] == [s.shape for s in old]
    # uneven: numpy.array_split (ours) gives 3,2,2,2 rows; torch.chunk (DTensor) gives 3,3,3,0
    old = shard_table((9, 4), Block2D(4, 1), 4)
    new = mesh_shard_table((9, 4), *block2d_mesh(Block2D(4, 1), 4))
    assert sizes(old) == [3, 2, 2, 2] and sizes(new) == [3, 3, 3, 0]


def test_from_torch_reads_torchs_mesh_and_placements():
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS
    from torch.distributed.tensor.placement_types import _StridedShard

    class FakeMesh:  # what DeviceMesh exposes; a real one needs a process group (tests/cluster)
        shape = (2, 2)
        mesh_dim_names = ("dp", "tp")

        class mesh:
            @staticmethod
            def tolist():
                return [[0, 1], [2, 3]]

    mesh, pls = from_torch(FakeMesh(), [TS(1), TR()])
    assert mesh == Mesh((2, 2), ("dp", "tp")) and pls == (Shard(1), Replicate())
    assert from_torch(FakeMesh(), [TP("max"), TS(0)])[1] == (Partial("max"), Shard(0))
    with pytest.raises(ValueError, match="mesh dim 1 has torch placement .*not Shard, Replicate or Partial"):
        from_torch(FakeMesh(), [TR(), _StridedShard(0, split_factor=2)])


# ---- bad placements ----


@pytest.mark.parametrize(
    "shape, mesh, placements, message",
    [
        ((4, 4), Mesh(4), [Shard(2)], "Shard(2) on mesh dim 0 is out of range for a 2-D tensor (dims 0-1)"),
        ((4,), Mesh((2, 2)), [Replicate(), Shard(-2)], "Shard(-2) on mesh dim 1 is out of range for a 1-D tensor"),
        ((), Mesh(2), [Shard(0)], "Shard(0) on mesh dim 0 is out of range for a 0-D tensor (no dims)"),
        ((4, 4), Mesh((2, 2)), [Shard(0)], "1 placement [Shard(0)] for a 2-D mesh (2, 2): give one placement per"),
        ((4, 4), Mesh(4), [Shard(0), Shard(1)], "2 placements [Shard(0), Shard(1)] for a 1-D mesh (4): give"),
        ((4, 4), Mesh((2, 2)), [Block2D(2, 2), Replicate()], "Block2D is a whole 2-D mesh, not a placement"),
        ((4, 4), Mesh(2), ["S(0)"], "mesh dim 0 has placement 'S(0)'; it must be Shard(dim), Replicate() or"),
        ((4, -1), Mesh(2), [Shard(0)], "tensor shape (4, -1) must be non-negative whole numbers"),
    ],
)
def test_bad_placement_is_one_sentence(shape, mesh, placements, message):
    with pytest.raises(ValueError, match="^[^\n]*$") as err:
        mesh_shard_table(shape, mesh, placements)
    assert message in str(err.value)


# ---- the text picture ----


def test_render_2d_mesh_exact_text():
    assert render((4, 6), Mesh((2, 2), ("dp", "tp")), [Shard(0), Shard(1)]) == (
        "tensor (4, 6) on mesh (2, 2) ['dp', 'tp']: [S(0), S(1)]\n"
        "          Col 0-2   Col 3-5\n"
        "        ┌─────────┬─────────┐\n"
        "Row 0-1 │    0    │    1    │\n"
        "        ├─────────┼─────────┤\n"
        "Row 2-3 │    2    │    3    │\n"
        "        └─────────┴─────────┘\n"
    )


def test_render_draws_replicas_once_with_their_holders():
    assert render((10, 4), Mesh((2, 2)), [Shard(0), Replicate()], ascii=True) == (
        "tensor (10, 4) on mesh (2, 2): [S(0), R]\n"
        "          Col 0-3\n"
        "        +---------+\n"
        "Row 0-4 |   0,1   |\n"
        "        +---------+\n"
        "Row 5-9 |   2,3   |\n"
        "        +---------+\n"
    )


def test_render_1d_tensor_partial_and_empty_pieces():
    text = render((5,), Mesh((2, 2)), [Partial(), Shard(0)])
    assert text.splitlines()[2:5] == ["Row 0-2 │ 0,2 P(sum) │", "        ├────────────┤", "Row 3-4 │ 1,3 P(sum) │"]
    assert "P(sum): each listed rank holds a full-size operand" in text
    text = render((5,), Mesh(4), [Shard(0)])
    assert "Row 4-4 │ 2 │" in text and "empty pieces (torch.chunk's short tail): rank 3" in text


def test_render_higher_dim_tensor_draws_dims_0_and_1_per_range_of_the_rest():
    text = render((4, 6, 8), Mesh((1, 2, 2)), [Shard(0), Shard(1), Shard(2)])
    lines = text.splitlines()
    assert lines[1] == "a 3-D tensor: dims 0 and 1 drawn, one grid per range of dim 2"
    assert "dim 2 = 0-3" in lines and "dim 2 = 4-7" in lines
    assert "Row 0-3 │    0    │    2    │" in lines and "Row 0-3 │    1    │    3    │" in lines
    assert "the other dims are whole" in render((4, 6, 8), Mesh(2), [Shard(1)])


def test_render_empty_and_0d_tensors():
    assert render((0, 3), Mesh(2), [Shard(0)]).endswith("the tensor is empty: no blocks to draw\n")
    assert render((), Mesh(2), [Replicate()]).splitlines()[1:] == ["┌─────┐", "│ 0,1 │", "└─────┘"]
