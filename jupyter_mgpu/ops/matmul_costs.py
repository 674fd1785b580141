"""What one matmul strategy costs on each rank, predicted before anything runs: peak bytes, bytes moved, steps, time.

Pure (no torch): ``ops/matmul_plan.py`` asks :func:`strategy_plan` for every strategy and chooses among
them. Memory follows the textbook counts (1-D: ``MK/P + KN + MN/P`` words for ``row``; 2-D SUMMA /
ring: ``3N²/P`` plus panel buffers), computed exactly per rank from the shard tables, including
inputs that must be redistributed first; time is a rough model of flops and link speed per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops.matmul_chunks import RING_SLOTS, ring_chunk_cols, summa_panel, summa_panels

STRATEGIES = ("ring", "summa", "inner", "row", "col")
# Rough device speeds for the time prediction (per rank): flop/s, link bytes/s, per-step latency.
SPEED = {"cpu": (8e9, 2e9, 1e-4), "cuda": (3e13, 2e10, 2e-5)}
Placements = tuple[pl.Placement, pl.Placement, pl.Placement]  # A, B in; C out


@dataclass
class StrategyPlan:
    """What one strategy would cost on each rank (bytes), predicted before anything runs."""

    strategy: str
    placements: tuple[pl.Placement, pl.Placement, pl.Placement]  # A, B in; C out
    peak_bytes: list[int]  # inputs held + everything the op allocates
    extra_bytes: list[int]  # what the op allocates on top of the inputs already held
    bytes_moved: list[int]  # bytes received per rank (redistribution + the strategy's own traffic)
    steps: int
    predicted_time: float
    params: dict[str, Any] = field(default_factory=dict)
    fits: bool = True
    short_rank: int | None = None  # the first rank where it does not fit

    @property
    def out_placement(self) -> pl.Placement:
        return self.placements[2]


def required_placements(strategy: str, world_size: int, grid: tuple[int, int] | None = None) -> Placements:
    """The placements of A and B a strategy works on, and the placement of its result C."""
    if strategy == "row":
        return pl.Shard(0), pl.Replicate(), pl.Shard(0)
    if strategy == "col":
        return pl.Replicate(), pl.Shard(1), pl.Shard(1)
    if strategy == "inner":
        return pl.Shard(1), pl.Shard(0), pl.Shard(0)
    if strategy == "ring":
        return pl.Shard(0), pl.Shard(0), pl.Shard(0)
    if strategy == "summa":
        rows, cols = grid or pl.square_grid(world_size)
        g = pl.Block2D(rows, cols)
        return g, g, g
    raise ValueError(f"unknown matmul strategy {strategy!r}: use auto, {', '.join(STRATEGIES)}")


def _local(shape: tuple[int, ...], placement: pl.Placement, p: int) -> list[int]:
    return [s.numel for s in pl.shard_table(shape, placement, p)]


def _exchange_buffers(shape: tuple[int, ...], src: pl.Placement, dst: pl.Placement, p: int) -> list[int]:
    """Per rank, the most elements of temporary buffers alive at once while redistributing: at each step
    a copy of the piece it sends and a buffer for the piece it receives, each only where that piece is
    not one contiguous run of its local tensor (``shards.exchange`` sends and receives in place otherwise)."""
    mv = pl.moves(shape, src, dst, p)
    s_tab, d_tab = pl.shard_table(shape, src, p), pl.shard_table(shape, dst, p)
    out = []
    for r in range(p):
        peak = 0
        for d in range(1, p):
            to, frm = (r + d) % p, (r - d) % p
            step = 0
            send, recv = mv[r][to], mv[frm][r]
            if send is not None and not pl.box_is_contiguous(send, s_tab[r].ranges):
                step += pl.box_numel(send)
            if recv is not None and not pl.box_is_contiguous(recv, d_tab[r].ranges):
                step += pl.box_numel(recv)
            peak = max(peak, step)
        out.append(peak)
    return out


def _received(shape: tuple[int, ...], src: pl.Placement, dst: pl.Placement, p: int) -> list[int]:
    """Elements each rank receives to turn ``src`` into ``dst``."""
    if pl.normalize(src, len(shape), p) == pl.normalize(dst, len(shape), p):
        return [0] * p
    mv = pl.moves(shape, src, dst, p)
    return [sum(pl.box_numel(box) for s in range(p) if s != d and (box := mv[s][d]) is not None) for d in range(p)]


@dataclass
class _OwnWork:
    """A strategy's own work per rank, once its inputs are in place (elements, not bytes)."""

    flops: list[int]
    moved: list[int]  # elements the strategy's own traffic brings to each rank
    buffers: list[int]  # elements of the strategy's transient buffers
    steps: int = 1
    overlap: bool = False  # its traffic runs while it computes
    params: dict[str, Any] = field(default_factory=dict)


def _inner_work(m: int, k: int, n: int, p: int, c_tab: list[pl.ShardInfo]) -> _OwnWork:
    """``inner``: partial products of every C row block, reduced onto its owner (two block buffers)."""
    ks = pl.split(k, p)
    flops = [2 * m * (b - a) * n for a, b in ks]
    blk = max(s.numel for s in c_tab)
    return _OwnWork(flops, [(p - 1) * s.numel for s in c_tab], [2 * blk] * p, p, True)


def _ring_work(m: int, k: int, n: int, p: int, itemsize: int, c_tab: list[pl.ShardInfo]) -> _OwnWork:
    """``ring``: every other rank's rows of B travel past each rank, in column chunks."""
    width = ring_chunk_cols(m, k, n, p, itemsize)
    nch = max(1, math.ceil(n / width))
    ks = pl.split(k, p)
    flops = [2 * s.shape[0] * k * n for s in c_tab]
    buffers = [RING_SLOTS * math.ceil(k / p) * math.ceil(n / nch) if p > 1 else 0] * p
    own_moved = [(k - (b - a)) * n for a, b in ks]  # every other rank's rows of B
    return _OwnWork(flops, own_moved, buffers, p * nch, True, {"chunks": nch, "chunk_cols": math.ceil(n / nch)})


def _summa_work(
    m: int, k: int, n: int, p: int, g: tuple[int, int], itemsize: int, c_tab: list[pl.ShardInfo]
) -> _OwnWork:
    """``summa``: panels of A along grid rows and of B along grid columns, two buffers of each."""
    width = summa_panel(m, k, n, g, itemsize)
    panels = summa_panels(k, g, width)
    flops = [2 * s.shape[0] * k * s.shape[1] for s in c_tab]
    own_moved, buffers = [0] * p, [0] * p
    kc, kr = pl.split(k, g[1]), pl.split(k, g[0])
    for r, s in enumerate(c_tab):
        gi, gj = divmod(r, g[1])
        ml, nl = s.shape
        buffers[r] = 2 * (ml + nl) * width
        for a, b in panels:
            if not kc[gj][0] <= a < kc[gj][1]:
                own_moved[r] += ml * (b - a)
            if not kr[gi][0] <= a < kr[gi][1]:
                own_moved[r] += (b - a) * nl
    return _OwnWork(flops, own_moved, buffers, len(panels), True, {"grid": g, "panel": width, "panels": len(panels)})


def _own_work(
    name: str, m: int, k: int, n: int, p: int, itemsize: int, a_pl: pl.Placement, c_tab: list[pl.ShardInfo]
) -> _OwnWork:
    """The work of strategy ``name`` itself: ``row`` and ``col`` only compute, the others also talk."""
    if name == "row":
        return _OwnWork([2 * s.shape[0] * k * n for s in c_tab], [0] * p, [0] * p)
    if name == "col":
        return _OwnWork([2 * m * k * s.shape[1] for s in c_tab], [0] * p, [0] * p)
    if name == "inner":
        return _inner_work(m, k, n, p, c_tab)
    if name == "ring":
        return _ring_work(m, k, n, p, itemsize, c_tab)
    if name == "summa":
        assert isinstance(a_pl, pl.Block2D)  # required_placements gives SUMMA a Block2D grid
        return _summa_work(m, k, n, p, a_pl.grid(p), itemsize, c_tab)  # its rows and cols are both set
    return _OwnWork([0] * p, [0] * p, [0] * p)


def _predicted_time(work: _OwnWork, pre_moved: list[int], itemsize: int, kind: str, steps: int) -> float:
    """The slowest rank's time: redistribution first, then compute and own traffic (overlapped or not)."""
    rate, bw, lat = SPEED.get(kind, SPEED["cpu"])
    times = []
    for r in range(len(pre_moved)):
        comp = work.flops[r] / rate
        own = work.moved[r] * itemsize / bw
        pre = pre_moved[r] * itemsize / bw
        times.append(pre + (max(comp, own) if work.overlap else comp + own))
    return max(times) + steps * lat


def strategy_plan(
    name: str,
    m: int,
    k: int,
    n: int,
    p: int,
    itemsize: int,
    current: tuple[Any, Any] | None,
    grid: tuple[int, int] | None,
    kind: str,
) -> StrategyPlan:
    """Strategy ``name`` for ``(m x k) @ (k x n)`` on ``p`` ranks, with A and B now in ``current``
    (None: already where the strategy wants them)."""
    a_pl, b_pl, c_pl = required_placements(name, p, grid)
    cur_a, cur_b = current or (a_pl, b_pl)
    a_held, b_held = _local((m, k), cur_a, p), _local((k, n), cur_b, p)
    a_need, b_need, c_loc = _local((m, k), a_pl, p), _local((k, n), b_pl, p), _local((m, n), c_pl, p)
    moved_a, moved_b = _received((m, k), cur_a, a_pl, p), _received((k, n), cur_b, b_pl, p)
    redist_a = pl.normalize(cur_a, 2, p) != pl.normalize(a_pl, 2, p)
    redist_b = pl.normalize(cur_b, 2, p) != pl.normalize(b_pl, 2, p)
    work = _own_work(name, m, k, n, p, itemsize, a_pl, pl.shard_table((m, n), c_pl, p))
    # phases in the order ops/matmul.run runs them; their transient buffers are freed before the next:
    # A redistributed (new shard + send/receive buffers), then B, then C and the strategy's buffers
    box_a = _exchange_buffers((m, k), cur_a, a_pl, p) if redist_a else [0] * p
    box_b = _exchange_buffers((k, n), cur_b, b_pl, p) if redist_b else [0] * p
    new_a = a_need if redist_a else [0] * p
    new_b = b_need if redist_b else [0] * p
    extra = [
        max(new_a[r] + box_a[r], new_a[r] + new_b[r] + box_b[r], new_a[r] + new_b[r] + c_loc[r] + work.buffers[r])
        * itemsize
        for r in range(p)
    ]
    peak = [(a_held[r] + b_held[r]) * itemsize + extra[r] for r in range(p)]
    moved = [(moved_a[r] + moved_b[r] + work.moved[r]) * itemsize for r in range(p)]
    steps = work.steps + (p - 1) * (int(redist_a) + int(redist_b))
    pre_moved = [moved_a[r] + moved_b[r] for r in range(p)]
    time = _predicted_time(work, pre_moved, itemsize, kind, steps)
    return StrategyPlan(name, (a_pl, b_pl, c_pl), peak, extra, moved, steps, time, work.params)
