"""The pure matmul planner: per strategy, predicted peak bytes, bytes moved and steps per rank.

No torch and no engines: ``plan_matmul(((M, K), (K, N)), world_size, "float32", device_memory)``
works before anything is allocated, so a matmul that cannot fit is refused with the smallest
world size or memory that would fit. Memory follows the textbook counts (1-D: ``MK/P + KN + MN/P``
words for ``row``; 2-D SUMMA / ring: ``3N²/P`` plus panel buffers), computed exactly per rank
from the shard tables, including inputs that must be redistributed first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.units import format_bytes as _fmt

STRATEGIES = ("ring", "summa", "inner", "row", "col")
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
# Rough device speeds for the time prediction (per rank): flop/s, link bytes/s, per-step latency.
SPEED = {"cpu": (8e9, 2e9, 1e-4), "cuda": (3e13, 2e10, 2e-5)}
# ring chunks and SUMMA panels are sized so their buffers stay below this share of A + B + C shards
BUFFER_SHARE = 0.15
RING_SLOTS = 4  # ring chunk buffers per rank
RING_LOOKAHEAD = 2  # receives a ring rank posts ahead (a sender may run this many chunks in front)
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


@dataclass
class MatmulPlan:
    """Every strategy's prediction and the one chosen (``strategy``), or why none fits."""

    shapes: tuple[tuple[int, int], tuple[int, int]]
    world_size: int
    dtype: str
    free_bytes: list[int] | None
    options: dict[str, StrategyPlan]
    strategy: str | None
    reason: str

    @property
    def chosen(self) -> StrategyPlan | None:
        return self.options.get(self.strategy) if self.strategy else None

    def __getattr__(self, name: str) -> Any:  # plan.peak_bytes etc. read the chosen strategy
        if name in (
            "peak_bytes",
            "extra_bytes",
            "bytes_moved",
            "steps",
            "predicted_time",
            "placements",
            "params",
            "out_placement",
        ):
            chosen = self.__dict__.get("options", {}).get(self.__dict__.get("strategy") or "")
            if chosen is not None:
                return getattr(chosen, name)
        raise AttributeError(name)

    def table(self) -> str:
        """A text table of every strategy's prediction."""
        (m, k), (_, n) = self.shapes
        lines = [
            f"matmul plan: ({m}x{k}) @ ({k}x{n}) {self.dtype} on {self.world_size} ranks — {self.reason}",
            f"  {'strategy':8} {'A,B -> C':24} {'peak/rank (max)':>16} {'moved/rank':>12} {'steps':>6} "
            f"{'pred. time':>10}  fits",
        ]
        for name, o in self.options.items():
            mark = "*" if name == self.strategy else " "
            pls = ",".join(p.label for p in o.placements[:2]) + " -> " + o.placements[2].label
            lines.append(
                f"{mark} {name:8} {pls:24} {_fmt(max(o.peak_bytes)):>16} {_fmt(max(o.bytes_moved)):>12} "
                f"{o.steps:>6} {o.predicted_time * 1e3:>8.1f}ms  {'yes' if o.fits else 'no (rank %s)' % o.short_rank}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()


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


def ring_chunk_cols(m: int, k: int, n: int, p: int, itemsize: int) -> int:
    """Columns of B per ring message: RING_SLOTS (K/P x cols) buffers stay under BUFFER_SHARE of the shards."""
    kb = math.ceil(k / p)
    base = (math.ceil(m / p) * k + kb * n + math.ceil(m / p) * n) * itemsize
    cols = int(BUFFER_SHARE * base / (RING_SLOTS * max(1, kb) * itemsize))
    return max(1, min(n, cols))


def summa_panel(m: int, k: int, n: int, grid: tuple[int, int], itemsize: int) -> int:
    """SUMMA panel width: two A panels and two B panels stay under BUFFER_SHARE of the shards."""
    r, c = grid
    ml, nl = math.ceil(m / r), math.ceil(n / c)
    base = (ml * math.ceil(k / c) + math.ceil(k / r) * nl + ml * nl) * itemsize
    width = int(BUFFER_SHARE * base / (2 * (ml + nl) * itemsize)) if ml + nl else k
    return max(1, min(k, width))


def summa_panels(k: int, grid: tuple[int, int], width: int) -> list[tuple[int, int]]:
    """The k-ranges of SUMMA panels: inside one A column block and one B row block, ≤ width wide."""
    rows, cols = grid
    cuts = sorted({b for a, b in pl.split(k, cols)} | {b for a, b in pl.split(k, rows)} | {0})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        for s in range(a, b, width):
            out.append((s, min(b, s + width)))
    return out


def _strategy(
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
    a_pl, b_pl, c_pl = required_placements(name, p, grid)
    cur_a, cur_b = current or (a_pl, b_pl)
    a_held, b_held = _local((m, k), cur_a, p), _local((k, n), cur_b, p)
    a_need, b_need, c_loc = _local((m, k), a_pl, p), _local((k, n), b_pl, p), _local((m, n), c_pl, p)
    moved_a, moved_b = _received((m, k), cur_a, a_pl, p), _received((k, n), cur_b, b_pl, p)
    redist_a = pl.normalize(cur_a, 2, p) != pl.normalize(a_pl, 2, p)
    redist_b = pl.normalize(cur_b, 2, p) != pl.normalize(b_pl, 2, p)
    flops, own_moved, buffers = [0] * p, [0] * p, [0] * p
    steps, overlap = 1, False
    params: dict[str, Any] = {}
    c_tab = pl.shard_table((m, n), c_pl, p)
    if name == "row":
        flops = [2 * s.shape[0] * k * n for s in c_tab]
    elif name == "col":
        flops = [2 * m * k * s.shape[1] for s in c_tab]
    elif name == "inner":
        ks = pl.split(k, p)
        flops = [2 * m * (b - a) * n for a, b in ks]
        blk = max(s.numel for s in c_tab)
        buffers = [2 * blk] * p
        own_moved = [(p - 1) * s.numel for s in c_tab]
        steps, overlap = p, True
    elif name == "ring":
        width = ring_chunk_cols(m, k, n, p, itemsize)
        nch = max(1, math.ceil(n / width))
        ks = pl.split(k, p)
        flops = [2 * s.shape[0] * k * n for s in c_tab]
        buffers = [RING_SLOTS * math.ceil(k / p) * math.ceil(n / nch) if p > 1 else 0] * p
        own_moved = [(k - (b - a)) * n for a, b in ks]  # every other rank's rows of B
        steps, overlap, params = p * nch, True, {"chunks": nch, "chunk_cols": math.ceil(n / nch)}
    elif name == "summa":
        assert isinstance(a_pl, pl.Block2D)  # required_placements gives SUMMA a Block2D grid
        g = a_pl.grid(p)  # its rows and cols are both set, so this is (rows, cols)
        width = summa_panel(m, k, n, g, itemsize)
        panels = summa_panels(k, g, width)
        flops = [2 * s.shape[0] * k * s.shape[1] for s in c_tab]
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
        steps, overlap, params = len(panels), True, {"grid": g, "panel": width, "panels": len(panels)}
    # phases in the order ops/matmul.run runs them; their transient buffers are freed before the next:
    # A redistributed (new shard + send/receive buffers), then B, then C and the strategy's buffers
    box_a = _exchange_buffers((m, k), cur_a, a_pl, p) if redist_a else [0] * p
    box_b = _exchange_buffers((k, n), cur_b, b_pl, p) if redist_b else [0] * p
    new_a = a_need if redist_a else [0] * p
    new_b = b_need if redist_b else [0] * p
    extra = [
        max(new_a[r] + box_a[r], new_a[r] + new_b[r] + box_b[r], new_a[r] + new_b[r] + c_loc[r] + buffers[r]) * itemsize
        for r in range(p)
    ]
    peak = [(a_held[r] + b_held[r]) * itemsize + extra[r] for r in range(p)]
    moved = [(moved_a[r] + moved_b[r] + own_moved[r]) * itemsize for r in range(p)]
    rate, bw, lat = SPEED.get(kind, SPEED["cpu"])
    times = []
    for r in range(p):
        comp = flops[r] / rate
        own = own_moved[r] * itemsize / bw
        pre = (moved_a[r] + moved_b[r]) * itemsize / bw
        times.append(pre + (max(comp, own) if overlap else comp + own))
    redist_steps = (p - 1) * (int(redist_a) + int(redist_b))
    return StrategyPlan(
        name,
        (a_pl, b_pl, c_pl),
        peak,
        extra,
        moved,
        steps + redist_steps,
        max(times) + (steps + redist_steps) * lat,
        params,
    )


def _free_list(device_memory: Any, p: int) -> list[int] | None:
    if device_memory is None:
        return None
    if isinstance(device_memory, (int, float)):
        return [int(device_memory)] * p
    free = [int(x) for x in device_memory]
    if len(free) != p:
        raise ValueError(f"device_memory has {len(free)} entries for {p} ranks")
    return free


def _fits(extra: list[int], free: list[int] | None) -> tuple[bool, int | None]:
    if free is None:
        return True, None
    for r, (e, f) in enumerate(zip(extra, free)):
        if e > f:
            return False, r
    return True, None


def plan_matmul(
    shapes: Sequence[Sequence[int]],
    world_size: int,
    dtype: str = "float32",
    device_memory: Any = None,
    *,
    strategy: str = "auto",
    placements: tuple[Any, Any] | None = None,
    grid: tuple[int, int] | None = None,
    device_kind: str = "cpu",
) -> MatmulPlan:
    """Predict every strategy for ``A @ B`` with ``shapes = ((M, K), (K, N))`` on ``world_size`` ranks.

    ``device_memory``: free bytes per rank (one number for all, or a list); None means unlimited.
    ``placements``: where A and B are now (redistribution is then counted); default: already right.
    ``strategy="auto"`` chooses the fastest predicted strategy that fits every rank (within 5 %
    of the fastest, the one with the lowest peak); a named one is
    checked. Raises ``ValueError`` for bad input; a plan with ``strategy=None`` explains a misfit.
    """
    (m, k), (k2, n) = (tuple(int(x) for x in s) for s in shapes)
    if k != k2:
        raise ValueError(f"inner dimensions do not match: A is {m}x{k}, B is {k2}x{n}")
    if dtype not in ITEMSIZE:
        raise ValueError(f"matmul supports {', '.join(ITEMSIZE)}, not {dtype}")
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if strategy != "auto" and strategy not in STRATEGIES:
        raise ValueError(f"unknown matmul strategy {strategy!r}: use auto, {', '.join(STRATEGIES)}")
    if grid is not None:
        given = tuple(grid)
        if len(given) != 2 or given[0] * given[1] != world_size:
            raise ValueError(f"grid {given} is not rows x cols = {world_size} ranks")
        grid = (given[0], given[1])
    free = _free_list(device_memory, world_size)
    itemsize = ITEMSIZE[dtype]
    names = STRATEGIES if strategy == "auto" else (strategy,)
    options = {}
    for name in names:
        o = _strategy(name, m, k, n, world_size, itemsize, placements, grid, device_kind)
        o.fits, o.short_rank = _fits(o.extra_bytes, free)
        options[name] = o
    fitting = [o for o in options.values() if o.fits]
    if fitting:
        # the time model is rough: strategies within 5 % of the fastest count as equally fast,
        # and among those the one with the lowest peak memory wins
        fastest = min(o.predicted_time for o in fitting)
        close = [o for o in fitting if o.predicted_time <= 1.05 * fastest]
        best = min(close, key=lambda o: (max(o.peak_bytes), o.predicted_time))
        reason = "chosen: fastest predicted that fits" if strategy == "auto" else "fits"
        return MatmulPlan(((m, k), (k, n)), world_size, dtype, free, options, best.strategy, reason)
    assert free is not None  # with no memory limit every strategy fits, so a misfit has one
    return MatmulPlan(
        ((m, k), (k, n)),
        world_size,
        dtype,
        free,
        options,
        None,
        misfit_message(options, free, m, k, n, world_size, itemsize, grid, device_kind),
    )


MAX_SUGGESTED_DEVICES = 1024  # a misfit names a device count up to this, else "more devices"


def misfit_message(
    options: dict[str, StrategyPlan],
    free: list[int],
    m: int,
    k: int,
    n: int,
    p: int,
    itemsize: int,
    grid: Any,
    kind: str,
) -> str:
    """One sentence: what is short, and the smallest world size or memory per device that would fit."""
    lean = min(options.values(), key=lambda o: max(o.extra_bytes))
    r = lean.short_rank if lean.short_rank is not None else 0
    need = max(lean.extra_bytes)
    per_device = min(free)

    def ring_fits(q: int) -> bool:  # ring's per-rank need shrinks like 1/P; it is the yardstick
        return max(_strategy("ring", m, k, n, q, itemsize, None, None, kind).extra_bytes) <= per_device

    bigger = None
    if p < MAX_SUGGESTED_DEVICES and ring_fits(MAX_SUGGESTED_DEVICES):
        lo, bigger = p, MAX_SUGGESTED_DEVICES  # bisect: the need falls (near) monotonically with P
        while bigger - lo > 1:
            mid = (lo + bigger) // 2
            lo, bigger = (lo, mid) if ring_fits(mid) else (mid, bigger)
    more = f"at least {bigger} devices with this much free memory" if bigger else "more devices"
    return (
        f"no matmul strategy fits: the leanest ({lean.strategy}) needs {_fmt(need)} on rank {r}, "
        f"which has {_fmt(free[r])} free; use {more}, or at least {_fmt(need)} free per device"
    )


EPS = {"float64": 2.2e-16, "float32": 1.2e-7, "bfloat16": 7.8e-3, "float16": 9.8e-4}


def tolerance(dtype: str, k: int) -> float:
    """Max abs error allowed against ``torch.mm`` of unit-normal inputs with inner size ``k``.

    Entries of C reach about ``4 sqrt(k)``; each rounding costs ``eps`` of that, and sharded
    strategies accumulate partial products in the output dtype a few dozen times (factor 8).
    """
    return float(32 * EPS[dtype] * max(1, k) ** 0.5)
