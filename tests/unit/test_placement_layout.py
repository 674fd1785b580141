"""Pure block layout of the placement view: tiles cover the tensor exactly once, owners match the shard table."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout import tiles as lay
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.placement import text_diagram
from jupyter_mgpu.widgets.placement_data import view_data


def _check_exact_cover(shape, placement, p, dims=None):
    panels = lay.placement_layout(shape, placement, p, dims)
    d = lay.check_dims(len(shape), dims)
    table = pl.shard_table(shape, placement, p)
    plane = (shape[d[0]] if len(d) == 2 else 1) * (shape[d[-1]] if d else 1)
    for panel in panels:
        assert lay.tile_cells(panel) == plane  # the tiles cover the drawn plane exactly once
        seen = set()
        for t in panel["tiles"]:
            key = (t["rows"], t["cols"])
            assert key not in seen
            seen.add(key)
            # every owner's shard covers the tile, and every rank whose shard covers it is an owner
            fixed = dict(panel["fixed"])
            expect = []
            for s in table:
                box = list(s.ranges)
                ok = all(box[i][0] <= a and b <= box[i][1] for i, (a, b) in fixed.items() if b > a)
                if len(d) == 2:
                    ok = ok and box[d[0]][0] <= t["rows"][0] and t["rows"][1] <= box[d[0]][1]
                if d:
                    ok = ok and box[d[-1]][0] <= t["cols"][0] and t["cols"][1] <= box[d[-1]][1]
                if ok and s.numel:
                    expect.append(s.rank)
            assert t["owners"] == expect
    # panels of the dims not drawn partition those dims too
    others = [i for i in range(len(shape)) if i not in d]
    total = sum(math.prod(max(b - a, 0) for _, (a, b) in panel["fixed"]) for panel in panels)
    assert total == (math.prod(shape[i] for i in others) if others else 1) or 0 in shape


@pytest.mark.parametrize("placement", [pl.Shard(0), pl.Shard(1), pl.Replicate(), pl.Block2D(2, 2), pl.Block2D(1, 4)])
def test_2d_layout_tiles_exactly_once_with_uneven_shards(placement):
    _check_exact_cover((7, 5), placement, 4)


def test_replicated_tile_lists_every_owner():
    [panel] = lay.placement_layout((4, 4), pl.Replicate(), 3)
    assert [t["owners"] for t in panel["tiles"]] == [[0, 1, 2]]


def test_block2d_grid_is_rank_major():
    [panel] = lay.placement_layout((6000, 4000), pl.Block2D(2, 2), 4)
    assert [t["owners"] for t in panel["tiles"]] == [[0], [1], [2], [3]]
    assert panel["rows"] == [0, 3000, 6000] and panel["cols"] == [0, 2000, 4000]


def test_3d_tensor_sharded_on_a_dim_not_drawn_becomes_small_multiples():
    panels = lay.placement_layout((4, 3, 5), pl.Shard(0), 4, dims=(1, 2))
    assert len(panels) == 4
    assert [p["fixed"] for p in panels] == [[(0, (i, i + 1))] for i in range(4)]
    assert [p["tiles"][0]["owners"] for p in panels] == [[0], [1], [2], [3]]
    _check_exact_cover((4, 3, 5), pl.Shard(0), 4, dims=(1, 2))
    _check_exact_cover((4, 3, 5), pl.Shard(2), 3, dims=(0, 2))


def test_1d_and_0d_and_world_16():
    _check_exact_cover((10,), pl.Shard(0), 3)
    _check_exact_cover((), pl.Replicate(), 2)
    _check_exact_cover((33, 17), pl.Block2D(4, 4), 16)
    _check_exact_cover((5, 9), pl.Shard(0), 16)  # more ranks than rows: empty shards own nothing


def test_bad_dims_are_one_sentence():
    with pytest.raises(ValueError, match="two different dims"):
        lay.check_dims(3, (1, 1))
    with pytest.raises(ValueError, match="two different dims"):
        lay.check_dims(2, (0, 5))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=3), st.integers(1, 16), st.integers(0, 3))
def test_property_exact_cover(shape, p, kind):
    shape = tuple(shape)
    if kind == 3 and len(shape) < 2:
        kind = 0
    placement = [pl.Shard(0), pl.Shard(len(shape) - 1), pl.Replicate(), pl.Block2D()][kind]
    try:
        pl.normalize(placement, len(shape), p)
    except ValueError:
        return
    _check_exact_cover(shape, placement, p)


def test_view_data_colours_are_the_project_rank_colours_and_stable():
    a = view_data((8, 8), pl.Block2D(2, 2), 4, 4, "A")
    b = view_data((3, 8), pl.Shard(1), 4, 4, "B")
    assert a["colors"] == b["colors"] == [rank_color(r) for r in range(4)]
    assert len(set(a["colors"])) == 4
    frame = a["frames"][0]
    assert sorted(r for r, _ in frame["add"]) == [0, 1, 2, 3]
    assert frame["mem"] == [16 * 4] * 4
    tip = a["tips"][0][0]
    assert "rank 0: 0:4 × 0:4, local shape (4, 4), 64 B" == tip


def test_view_draws_up_to_64_ranks_and_beyond_names_the_text_form_in_one_sentence():
    assert len(view_data((8, 8), pl.Shard(0), 17, 4, "A")["colors"]) == 17
    assert len(view_data((8, 8), pl.Shard(0), 64, 4, "A")["colors"]) == 64
    with pytest.raises(ValueError, match="1 to 64 ranks") as err:
        view_data((8, 8), pl.Shard(0), 65, 4, "A")
    message = str(err.value)
    assert "text=True" in message and message.count(". ") == 0 and "\n" not in message


def test_text_diagram():
    assert text_diagram((4, 4), pl.Block2D(2, 2), 4).splitlines() == ["|  0   |  1   |", "|  2   |  3   |"]
    assert "*" in text_diagram((4, 4), pl.Replicate(), 2)
