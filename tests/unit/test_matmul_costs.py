"""Each matmul strategy's predicted cost (``ops/matmul_costs.py``): placements, peak and moved bytes, steps, time."""

from __future__ import annotations

import math

import pytest
import torch

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import matmul_chunks as chunks
from jupyter_mgpu.ops import matmul_costs as mc
from jupyter_mgpu.ops import matmul_plan as mp


def _plan(name, m, k, n, p, itemsize=4, current=None, grid=None, kind="cpu"):
    return mc.strategy_plan(name, m, k, n, p, itemsize, current, grid, kind)


def _local(x: torch.Tensor, placement: pl.Placement, p: int) -> list[torch.Tensor]:
    return [x[s.index] for s in pl.shard_table(tuple(x.shape), placement, p)]


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_row_col_and_ring_outputs_are_their_placement_of_c(p):
    torch.manual_seed(0)
    a, b = torch.randn(7, 5, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    c = a @ b
    row_a, row_b, row_c = mc.required_placements("row", p)
    for r in range(p):  # row: own rows of A times all of B are own rows of C
        assert torch.allclose(_local(a, row_a, p)[r] @ _local(b, row_b, p)[r], _local(c, row_c, p)[r])
    col_a, col_b, col_c = mc.required_placements("col", p)
    for r in range(p):
        assert torch.allclose(_local(a, col_a, p)[r] @ _local(b, col_b, p)[r], _local(c, col_c, p)[r])
    ring_a, _, ring_c = mc.required_placements("ring", p)
    for r in range(p):  # ring: own rows of A meet every rank's rows of B in turn
        assert torch.allclose(_local(a, ring_a, p)[r] @ b, _local(c, ring_c, p)[r])


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_inner_partial_products_sum_to_c(p):
    torch.manual_seed(1)
    a, b = torch.randn(6, 9, dtype=torch.float64), torch.randn(9, 4, dtype=torch.float64)
    ia, ib, _ = mc.required_placements("inner", p)
    total = sum(x @ y for x, y in zip(_local(a, ia, p), _local(b, ib, p)))
    assert torch.allclose(total, a @ b)


@pytest.mark.parametrize("p, grid", [(4, None), (6, None), (6, (3, 2)), (8, (1, 8)), (5, None)])
def test_summa_works_on_one_2d_grid_for_a_b_and_c(p, grid):
    a_pl, b_pl, c_pl = mc.required_placements("summa", p, grid)
    assert isinstance(a_pl, pl.Block2D) and a_pl == b_pl == c_pl
    assert a_pl.grid(p) == (grid or pl.square_grid(p))


def test_an_unknown_strategy_is_refused_by_name():
    with pytest.raises(ValueError, match="'cannon'"):
        mc.required_placements("cannon", 4)


@pytest.mark.parametrize("name", mc.STRATEGIES)
@pytest.mark.parametrize("current", [None, (pl.Shard(1), pl.Shard(1)), (pl.Replicate(), pl.Shard(0))])
def test_peak_is_the_inputs_held_plus_what_the_op_allocates(name, current):
    m, k, n, p, itemsize = 90, 70, 50, 4, 4
    o = _plan(name, m, k, n, p, itemsize, current)
    held_a, held_b = current or o.placements[:2]
    a_tab, b_tab = pl.shard_table((m, k), held_a, p), pl.shard_table((k, n), held_b, p)
    held = [(a_tab[r].numel + b_tab[r].numel) * itemsize for r in range(p)]
    assert [pk - ex for pk, ex in zip(o.peak_bytes, o.extra_bytes)] == held
    c_tab = pl.shard_table((m, n), o.out_placement, p)
    assert all(ex >= c_tab[r].numel * itemsize for r, ex in enumerate(o.extra_bytes))  # C at least


@pytest.mark.parametrize("m, k, n, p", [(10, 6, 4, 3), (1200, 1200, 1200, 4), (7, 13, 5, 2)])
def test_row_peak_is_the_1d_textbook_count_on_every_rank(m, k, n, p):
    o = _plan("row", m, k, n, p, 8)
    rows = [b - a for a, b in pl.split(m, p)]
    assert o.peak_bytes == [(rr * k + k * n + rr * n) * 8 for rr in rows]  # MK/P + KN + MN/P words


@pytest.mark.parametrize("m, k, n, p", [(64, 64, 64, 4), (300, 200, 100, 3), (1000, 50, 700, 2)])
def test_ring_and_summa_allocate_c_and_their_chunk_buffers(m, k, n, p):
    ring = _plan("ring", m, k, n, p, 4)
    c_tab = pl.shard_table((m, n), ring.out_placement, p)
    buf = chunks.RING_SLOTS * math.ceil(k / p) * ring.params["chunk_cols"]
    assert ring.extra_bytes == [(s.numel + buf) * 4 for s in c_tab]
    summa = _plan("summa", m, k, n, p, 4)
    c_tab = pl.shard_table((m, n), summa.out_placement, p)
    width = summa.params["panel"]
    assert summa.extra_bytes == [(s.numel + 2 * (s.shape[0] + s.shape[1]) * width) * 4 for s in c_tab]


@pytest.mark.parametrize("m, k, n, p", [(64, 64, 64, 4), (300, 200, 100, 3), (1000, 50, 700, 2), (5, 3, 999, 4)])
def test_the_plans_pieces_are_the_chunk_planners(m, k, n, p):
    ring = _plan("ring", m, k, n, p, 4)
    width, nch, cols = chunks.ring_chunk_cols(m, k, n, p, 4), ring.params["chunks"], ring.params["chunk_cols"]
    assert cols <= width and (nch - 1) * cols < n <= nch * cols  # every column of B in exactly nch chunks
    assert ring.steps == p * nch
    summa = _plan("summa", m, k, n, p, 4)
    grid = summa.params["grid"]
    assert summa.params["panel"] == chunks.summa_panel(m, k, n, grid, 4)
    assert summa.steps == summa.params["panels"] == len(chunks.summa_panels(k, grid, summa.params["panel"]))


@pytest.mark.parametrize("name", mc.STRATEGIES)
def test_one_rank_talks_to_nobody(name):
    o = _plan(name, 64, 48, 32, 1)
    assert o.bytes_moved == [0]


@pytest.mark.parametrize("name", ["row", "col"])
def test_row_and_col_only_compute_when_their_inputs_are_in_place(name):
    o = _plan(name, 300, 200, 100, 4)
    assert o.bytes_moved == [0] * 4 and o.steps == 1


def test_ring_brings_every_other_ranks_rows_of_b_to_each_rank():
    m, k, n, p = 100, 70, 30, 3
    o = _plan("ring", m, k, n, p, 2)
    assert o.bytes_moved == [(k - (b - a)) * n * 2 for a, b in pl.split(k, p)]


@pytest.mark.parametrize("name", ["ring", "row", "inner"])
def test_redistributing_a_counts_its_bytes_and_p_minus_1_more_steps(name):
    m, k, n, p, itemsize = 120, 90, 60, 4, 4
    here = _plan(name, m, k, n, p, itemsize)
    a_now = pl.Shard(1) if here.placements[0] != pl.Shard(1) else pl.Shard(0)
    moved = _plan(name, m, k, n, p, itemsize, (a_now, here.placements[1]))
    src, dst = pl.shard_table((m, k), a_now, p), pl.shard_table((m, k), here.placements[0], p)
    for r in range(p):  # what rank r needs of A and does not hold already
        overlap = pl.intersect(src[r].ranges, dst[r].ranges)
        received = dst[r].numel - (pl.box_numel(overlap) if overlap else 0)
        assert moved.bytes_moved[r] - here.bytes_moved[r] == received * itemsize
    assert moved.steps == here.steps + (p - 1)
    assert moved.predicted_time > here.predicted_time
    assert max(moved.extra_bytes) > max(here.extra_bytes)  # the new shard of A, on top of the one held


@pytest.mark.parametrize("name", mc.STRATEGIES)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_costs_grow_with_each_size(name, dim):
    base = [1024, 1024, 1024]
    bigger = list(base)
    bigger[dim] *= 2
    small, big = _plan(name, *base, 4), _plan(name, *bigger, 4)
    assert max(big.peak_bytes) > max(small.peak_bytes)
    assert sum(big.bytes_moved) >= sum(small.bytes_moved)
    assert big.predicted_time > small.predicted_time


@pytest.mark.parametrize("name", mc.STRATEGIES)
@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_time_is_at_least_an_even_share_of_the_flops(name, kind):
    m, k, n, p = 700, 300, 500, 4
    rate = mc.SPEED[kind][0]
    assert _plan(name, m, k, n, p, kind=kind).predicted_time >= 2 * m * k * n / p / rate


@pytest.mark.parametrize("name", mc.STRATEGIES)
def test_a_faster_device_is_predicted_faster_and_an_unknown_one_as_a_cpu(name):
    cpu, cuda = _plan(name, 512, 512, 512, 4, kind="cpu"), _plan(name, 512, 512, 512, 4, kind="cuda")
    assert cuda.predicted_time < cpu.predicted_time
    assert _plan(name, 512, 512, 512, 4, kind="tpu").predicted_time == cpu.predicted_time
    assert cuda.peak_bytes == cpu.peak_bytes and cuda.bytes_moved == cpu.bytes_moved


@pytest.mark.parametrize(
    "shapes, p", [(((400, 300), (300, 200)), 4), (((64, 64), (64, 64)), 2), (((33, 7), (7, 91)), 3)]
)
def test_plan_matmul_predicts_with_these_costs(shapes, p):
    (m, k), (_, n) = shapes
    plan = mp.plan_matmul(shapes, p, "bfloat16")
    assert set(plan.options) == set(mc.STRATEGIES)
    for name, o in plan.options.items():
        mine = _plan(name, m, k, n, p, 2)
        assert (o.peak_bytes, o.extra_bytes, o.bytes_moved, o.steps) == (
            mine.peak_bytes,
            mine.extra_bytes,
            mine.bytes_moved,
            mine.steps,
        )
        assert o.predicted_time == pytest.approx(mine.predicted_time)


@pytest.mark.parametrize("n, p", [(64, 2), (512, 4), (2000, 4), (3000, 6)])
@pytest.mark.parametrize("share", [None, 0.5, 0.8])
def test_auto_chooses_among_the_near_fastest_that_fit_the_leanest(n, p, share):
    shapes = ((n, n), (n, n))
    free = None
    if share is not None:  # room for only some strategies: between the leanest and the hungriest
        loose = mp.plan_matmul(shapes, p, "float32")
        needs = sorted(max(o.extra_bytes) for o in loose.options.values())
        free = int(needs[0] + share * (needs[-1] - needs[0]))
    plan = mp.plan_matmul(shapes, p, "float32", device_memory=free)
    fitting = [o for o in plan.options.values() if free is None or max(o.extra_bytes) <= free]
    assert [o.fits for o in plan.options.values()].count(True) == len(fitting)
    fastest = min(o.predicted_time for o in fitting)
    chosen = plan.chosen
    assert chosen is not None and chosen in fitting
    assert chosen.predicted_time <= 1.05 * fastest
    near = [o for o in fitting if o.predicted_time <= 1.05 * fastest]
    assert max(chosen.peak_bytes) == min(max(o.peak_bytes) for o in near)


def test_a_faster_strategy_that_does_not_fit_is_passed_over():
    shapes, p, now = ((2000, 2000), (2000, 2000)), 4, (pl.Shard(1), pl.Shard(0))
    loose = mp.plan_matmul(shapes, p, "float32", placements=now)
    fastest = min(loose.options.values(), key=lambda o: o.predicted_time)
    free = max(fastest.extra_bytes) - 1
    assert any(max(o.extra_bytes) <= free for o in loose.options.values())  # some strategy still fits
    tight = mp.plan_matmul(shapes, p, "float32", device_memory=free, placements=now)
    assert not tight.options[fastest.strategy].fits and tight.options[fastest.strategy].short_rank is not None
    assert tight.strategy not in (None, fastest.strategy)
    assert max(tight.chosen.extra_bytes) <= free
