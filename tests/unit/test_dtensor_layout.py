"""The pure side of DTensors in the views: the layout value a cell returns, the view data of any mesh
(replicas as one block, Partial marked), the text picture of our own split, and moves between any two
tables of boxes — no engines."""

from __future__ import annotations

import pickle

import pytest

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout.dtensor_layout import DTensorLayout, describe_pieces, itemsize_of
from jupyter_mgpu.layout.mesh import Mesh, Partial, mesh_shard_table
from jupyter_mgpu.widgets.placement_data import mesh_view_data, view_data
from jupyter_mgpu.widgets.placement_svg import frame_svg


def test_a_layout_travels_and_says_who_holds_what():
    layout = DTensorLayout((6, 4), "float32", Mesh((2, 2), ("dp", "tp")), (pl.Shard(0), pl.Replicate()), "x")
    assert pickle.loads(pickle.dumps(layout)) == layout  # every rank's is equal, so the notebook shows it once
    assert layout.label == "[S(0), R] on mesh (dp=2, tp=2)" and layout.bytes_per_rank == [48] * 4
    pieces = describe_pieces(layout)
    assert pieces[1]["kind"] == "a replica (also on rank 0)" and pieces[2]["ranges"] == ((3, 6), (0, 4))
    assert repr(layout).startswith("x: tensor (6, 4) on mesh (2, 2) ['dp', 'tp']: [S(0), R]")
    assert "<pre>" in layout._repr_html_()
    assert itemsize_of("bfloat16") == 2 and itemsize_of("int8") == 1 and itemsize_of("float64") == 8


def test_mesh_view_draws_replicas_once_and_marks_partial():
    layout = DTensorLayout((4, 4), "float32", Mesh((2, 2)), (Partial(), pl.Shard(1)))
    data = mesh_view_data(layout, 4)
    assert data["partial"] == "P(sum)" and "P(sum)" in data["frames"][0]["caption"]
    assert len(data["blocks"]) == 2  # two column halves, each held by two ranks (operands of one sum)
    assert sorted(data["frames"][0]["add"]) == [[0, 0], [1, 1], [2, 0], [3, 1]]
    assert "rank 2 at mesh (1, 0), a full-size operand of P(sum): 0:4 × 0:2" in data["tips"][0][0]
    svg = frame_svg(data, 0)
    assert 'class="mgpu-partial"' in svg and "mgpu-hatch" in svg


def test_the_view_of_our_own_split_is_unchanged_by_the_mesh_path():
    data = view_data((5, 3), pl.Shard(0), 4, 4, "t")
    assert [blk[1:3] for blk in data["blocks"]] == [[0, 2], [2, 3], [3, 4], [4, 5]]  # array_split: 2, 1, 1, 1
    assert data["frames"][0]["caption"] == "t: S(0) over 4 ranks"
    replicated = view_data((2, 2), pl.Replicate(), 3, 4, "r")
    assert len(replicated["blocks"]) == 1 and len(replicated["frames"][0]["add"]) == 3
    svg = frame_svg(replicated, 0)
    assert svg.count('fill="#1f77b4"') > 1  # a copy held by three ranks: thin stripes, not three thirds


def test_text_of_any_split():
    from jupyter_mgpu.layout import mesh_text

    text = mesh_text.render_pieces((5, 2), [(0, ((0, 2), (0, 2))), (1, ((2, 5), (0, 2)))], "our split")
    assert text.splitlines()[0] == "our split" and "Row 0-1" in text and "Row 2-4" in text
    assert "P(sum)" in mesh_text.render((4,), Mesh((2,)), [Partial()])


@pytest.mark.parametrize("replicated", [False, True])
def test_moves_between_any_two_tables(replicated):
    src = [((0, 5), (0, 3))] * 2 if replicated else [((0, 3), (0, 3)), ((3, 5), (0, 3))]
    dst = [s.ranges for s in mesh_shard_table((5, 3), Mesh((2,)), [pl.Shard(1)])]
    mv = pl.moves_between(src, dst, replicated)
    if replicated:
        assert mv == [[dst[0], None], [None, dst[1]]]
    else:
        assert mv[0][1] == ((0, 3), (2, 3)) and mv[1][0] == ((3, 5), (0, 2))
    assert pl.moves((5, 3), pl.Shard(0), pl.Shard(1), 2) == pl.moves_between(
        [s.ranges for s in pl.shard_table((5, 3), pl.Shard(0), 2)],
        [s.ranges for s in pl.shard_table((5, 3), pl.Shard(1), 2)],
    )
