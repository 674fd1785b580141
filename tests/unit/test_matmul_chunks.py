"""Ring chunks and SUMMA panels (``ops/matmul_chunks.py``): buffers under the memory share, panels that tile K once."""

from __future__ import annotations

import math

import pytest

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import matmul_chunks as mc

SHAPES = [(1, 1, 1), (7, 5, 3), (64, 64, 64), (300, 1000, 20), (1000, 8, 900), (4096, 4096, 4096), (513, 257, 129)]


def _ring_share(m: int, k: int, n: int, p: int, itemsize: int) -> tuple[float, int]:
    """What a rank's A + B + C shards allow the ring's buffers (bytes), and the bytes of one column of them."""
    kb = math.ceil(k / p)
    shards = (math.ceil(m / p) * k + kb * n + math.ceil(m / p) * n) * itemsize
    return mc.BUFFER_SHARE * shards, mc.RING_SLOTS * kb * itemsize


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("p", [1, 2, 3, 8])
@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_ring_chunks_are_the_widest_whose_buffers_stay_under_the_share(m, k, n, p, itemsize):
    cols = mc.ring_chunk_cols(m, k, n, p, itemsize)
    assert 1 <= cols <= n
    share, per_col = _ring_share(m, k, n, p, itemsize)
    if cols > 1:  # one column is the least a message can carry, whatever the share
        assert cols * per_col <= share
    if cols < n:  # and one more column would pass it
        assert (cols + 1) * per_col > share


def test_ring_chunks_widen_as_b_and_c_grow():
    widths = [mc.ring_chunk_cols(512, 512, n, 4, 4) for n in (64, 256, 1024, 4096, 16384)]
    assert widths == sorted(widths) and widths[-1] > widths[0]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("grid", [(1, 1), (1, 2), (2, 2), (2, 3), (4, 2)])
@pytest.mark.parametrize("itemsize", [2, 4])
def test_summa_panels_are_the_widest_whose_four_buffers_stay_under_the_share(m, k, n, grid, itemsize):
    width = mc.summa_panel(m, k, n, grid, itemsize)
    assert 1 <= width <= k
    r, c = grid
    ml, nl = math.ceil(m / r), math.ceil(n / c)
    share = mc.BUFFER_SHARE * (ml * math.ceil(k / c) + math.ceil(k / r) * nl + ml * nl) * itemsize
    per_col = 2 * (ml + nl) * itemsize  # two A panels (ml x w) and two B panels (w x nl)
    if width > 1:
        assert width * per_col <= share
    if width < k:
        assert (width + 1) * per_col > share


@pytest.mark.parametrize("k", [1, 2, 5, 10, 97, 1000])
@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (2, 3), (3, 2), (4, 5)])
@pytest.mark.parametrize("width", [1, 3, 16, 10_000])
def test_summa_panels_cover_the_inner_dimension_exactly_once(k, grid, width):
    panels = mc.summa_panels(k, grid, width)
    covered = [i for a, b in panels for i in range(a, b)]
    assert covered == list(range(k))  # in order, no gap, no overlap
    assert all(0 < b - a <= width for a, b in panels)


@pytest.mark.parametrize("k", [7, 10, 64, 1001])
@pytest.mark.parametrize("grid", [(2, 3), (3, 2), (4, 4), (1, 5)])
def test_each_summa_panel_lies_in_one_a_column_block_and_one_b_row_block(k, grid):
    rows, cols = grid
    a_blocks, b_blocks = pl.split(k, cols), pl.split(k, rows)  # A's K is split over grid columns, B's over rows
    for a, b in mc.summa_panels(k, grid, 4):
        assert sum(lo <= a and b <= hi for lo, hi in a_blocks) == 1
        assert sum(lo <= a and b <= hi for lo, hi in b_blocks) == 1


def test_summa_panels_are_no_more_than_the_block_edges_require():
    k, grid, width = 1000, (2, 3), 10_000
    edges = {b for _, b in pl.split(k, grid[1])} | {b for _, b in pl.split(k, grid[0])}
    assert len(mc.summa_panels(k, grid, width)) == len(edges)  # one panel between two consecutive edges
    assert len(mc.summa_panels(k, (1, 1), 7)) == math.ceil(k / 7)
