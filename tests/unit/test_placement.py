"""Pure layout math, the matmul planner and counter-based seeding (no engines)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import matmul_plan as mp

shapes = st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple)


@st.composite
def layouts(draw):
    shape = draw(shapes)
    p = draw(st.integers(1, 6))
    kinds = ["shard", "replicate"] + (["block"] if len(shape) >= 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "shard":
        placement = pl.Shard(draw(st.integers(-len(shape), len(shape) - 1)))
    elif kind == "replicate":
        placement = pl.Replicate()
    else:
        rows = draw(st.sampled_from([d for d in range(1, p + 1) if p % d == 0]))
        placement = pl.Block2D(rows, p // rows)
    return shape, placement, p


def _cover_counts(shape, boxes):
    counts = {}
    for box in boxes:
        for idx in _indices(box):
            counts[idx] = counts.get(idx, 0) + 1
    return counts


def _indices(box):
    if not box:
        yield ()
        return
    (a, b), rest = box[0], box[1:]
    for i in range(a, b):
        for tail in _indices(rest):
            yield (i,) + tail


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_shards_tile_the_tensor_exactly_once(layout):
    shape, placement, p = layout
    table = pl.shard_table(shape, placement, p)
    assert [s.rank for s in table] == list(range(p))
    for s in table:
        assert s.shape == tuple(b - a for a, b in s.ranges)
        assert all(0 <= a <= b <= n for (a, b), n in zip(s.ranges, shape))
    counts = _cover_counts(shape, [s.ranges for s in table])
    expected = p if isinstance(placement, pl.Replicate) else 1
    assert set(_indices(tuple((0, n) for n in shape))) == set(counts)
    assert set(counts.values()) <= {expected}
    # balanced: piece sizes along a split dim differ by at most one
    if isinstance(placement, pl.Shard):
        sizes = [s.shape[placement.dim % len(shape)] for s in table]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None)
@given(layouts(), st.data())
def test_moves_deliver_every_target_element_exactly_once(layout, data):
    shape, src, p = layout
    kinds = [pl.Replicate(), pl.Shard(0)] + ([pl.Shard(1), pl.Block2D()] if len(shape) >= 2 else [])
    dst = data.draw(st.sampled_from(kinds))
    mv = pl.moves(shape, src, dst, p)
    src_tab, dst_tab = pl.shard_table(shape, src, p), pl.shard_table(shape, dst, p)
    for d in range(p):
        boxes = [mv[s][d] for s in range(p) if mv[s][d] is not None]
        counts = _cover_counts(shape, boxes)
        assert set(counts) == set(_indices(dst_tab[d].ranges))
        assert set(counts.values()) <= {1}
        for s in range(p):  # a rank only sends what it holds
            if mv[s][d] is not None:
                assert pl.intersect(mv[s][d], src_tab[s].ranges) == mv[s][d]


def test_uneven_rows_and_labels():
    table = pl.shard_table((1000, 8), pl.Shard(0), 3)
    assert [s.ranges[0] for s in table] == [(0, 334), (334, 667), (667, 1000)]
    assert [s.shape for s in table] == [(334, 8), (333, 8), (333, 8)]
    assert pl.Shard(0).label == "S(0)" and pl.Replicate().label == "R" and pl.Block2D(2, 2).label == "B(2x2)"
    assert pl.normalize(pl.Block2D(), 2, 6) == pl.Block2D(2, 3)
    assert pl.normalize(pl.Shard(-1), 3, 2) == pl.Shard(2)


@pytest.mark.parametrize(
    "bad, ndim, p, words",
    [
        (pl.Shard(2), 2, 2, "out of range"),
        (pl.Shard(-3), 2, 2, "out of range"),
        (pl.Block2D(3, 2), 2, 4, "not a grid of 4"),
        (pl.Block2D(), 1, 4, "at least 2 dims"),
        ("S(0)", 2, 2, "placement must be"),
    ],
)
def test_bad_placements_name_the_problem(bad, ndim, p, words):
    with pytest.raises(ValueError, match=words):
        pl.normalize(bad, ndim, p)


def test_block2d_rejects_nonsense():
    with pytest.raises(ValueError, match="positive whole number"):
        pl.Block2D(0, 2)


# -- planner ----------------------------------------------------------------------------------
def test_plan_row_memory_is_the_1d_formula():
    n, p = 1200, 4
    plan = mp.plan_matmul(((n, n), (n, n)), p, "float32", strategy="row")
    assert plan.strategy == "row"
    assert plan.peak_bytes == [(n * n // p + n * n + n * n // p) * 4] * p


def test_plan_ring_and_summa_stay_near_3n2_over_p():
    n, p = 4096, 4
    plan = mp.plan_matmul(((n, n), (n, n)), p, "float32")
    bound = 3 * n * n // p * 4
    for name in ("ring", "summa"):
        assert bound < max(plan.options[name].peak_bytes) <= 1.2 * bound
    assert max(plan.options["row"].peak_bytes) > 1.9 * bound
    # moved bytes: ring passes (P-1)/P of B to every rank
    assert plan.options["ring"].bytes_moved == [n * n * 3 // 4 * 4] * p


def test_plan_counts_redistribution_of_inputs():
    shapes = ((400, 300), (300, 200))
    right = mp.plan_matmul(shapes, 2, "float32", strategy="ring", placements=(pl.Shard(0), pl.Shard(0)))
    wrong = mp.plan_matmul(shapes, 2, "float32", strategy="ring", placements=(pl.Shard(1), pl.Shard(1)))
    assert sum(wrong.bytes_moved) > sum(right.bytes_moved)
    assert max(wrong.extra_bytes) > max(right.extra_bytes)


def test_auto_picks_a_strategy_that_fits_and_refuses_when_none_does():
    shapes = ((2000, 2000), (2000, 2000))
    roomy = mp.plan_matmul(shapes, 4, "float32", device_memory=10**10)
    assert roomy.strategy in mp.STRATEGIES
    lean = min(max(o.extra_bytes) for o in roomy.options.values())
    tight = mp.plan_matmul(shapes, 4, "float32", device_memory=lean + 1)
    assert tight.strategy is not None and max(tight.chosen.extra_bytes) <= lean + 1
    none = mp.plan_matmul(shapes, 4, "float32", device_memory=lean // 3)
    assert none.strategy is None
    assert "no matmul strategy fits" in none.reason and "devices" in none.reason
    # the suggested world size really fits
    q = int(none.reason.split("at least ")[1].split(" devices")[0])
    assert mp.plan_matmul(shapes, q, "float32", device_memory=lean // 3, strategy="ring").strategy == "ring"
    assert mp.plan_matmul(shapes, q - 1, "float32", device_memory=lean // 3, strategy="ring").strategy is None


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"shapes": ((3, 4), (5, 6))}, "inner dimensions do not match"),
        ({"strategy": "cannon"}, "unknown matmul strategy"),
        ({"dtype": "int64"}, "matmul supports"),
        ({"grid": (3, 3)}, "not rows x cols"),
    ],
)
def test_planner_bad_input(kwargs, words):
    args = {"shapes": ((4, 4), (4, 4)), "world_size": 4, "dtype": "float32", **kwargs}
    with pytest.raises(ValueError, match=words):
        mp.plan_matmul(**args)


def test_summa_panels_respect_both_block_edges():
    panels = mp.summa_panels(10, (2, 3), 2)
    edges = {a for a, _ in panels} | {b for _, b in panels}
    assert {4, 7, 5, 10, 0} <= edges
    assert all(b - a <= 2 for a, b in panels)
    assert panels[0][0] == 0 and panels[-1][1] == 10


# -- seeding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(300, 530), (7,), (3, 260, 5), ()])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_seeded_shards_are_slices_of_one_global_tensor(shape, p):
    import torch

    from jupyter_mgpu.engine.shards import seeding

    full = seeding.global_tensor("randn", shape, seed=7)
    for placement in [pl.Shard(0), pl.Shard(-1)] if shape else [pl.Replicate()]:
        for s in pl.shard_table(shape, placement, p):
            part = seeding.fill(torch.empty(s.shape), "randn", shape, s.ranges, 7)
            assert torch.equal(part, full[tuple(slice(a, b) for a, b in s.ranges)])
    if shape:
        assert not torch.equal(full, seeding.global_tensor("randn", shape, seed=8))
        assert abs(float(full.float().mean())) < 0.5 and math.isfinite(float(full.std()))


@pytest.mark.parametrize("n, free", [(30000, 512 << 20), (300000, 2 << 30), (10**7, 512 << 20)])
def test_a_misfit_names_the_smallest_world_size_that_fits(n, free):
    shapes = ((n, n), (n, n))
    none = mp.plan_matmul(shapes, 2, "float32", device_memory=free)
    assert none.strategy is None
    if " devices with this much" in none.reason:
        q = int(none.reason.split("at least ")[1].split(" devices")[0])
        assert mp.plan_matmul(shapes, q, "float32", device_memory=free, strategy="ring").strategy == "ring"
        assert mp.plan_matmul(shapes, q - 1, "float32", device_memory=free, strategy="ring").strategy is None
    else:  # not even 1024 devices would do
        assert "use more devices" in none.reason
        assert mp.plan_matmul(shapes, 1024, "float32", device_memory=free, strategy="ring").strategy is None
