"""The pure matmul planner: every strategy's predicted peak bytes, bytes moved and steps per rank, and the choice.

No torch and no engines: ``plan_matmul(((M, K), (K, N)), world_size, "float32", device_memory)``
works before anything is allocated, so a matmul that cannot fit is refused with the smallest
world size or memory that would fit. Each strategy's prediction is ``ops/matmul_costs.py``'s; this
module checks the input, chooses the fastest strategy that fits, says why none does, and gives the
error a strategy's result may have (:func:`tolerance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# re-exported: read as ``matmul_plan.<name>`` by the controller, the tests and the placement notebook's tour
from jupyter_mgpu.ops.matmul_chunks import summa_panels as summa_panels
from jupyter_mgpu.ops.matmul_costs import STRATEGIES as STRATEGIES
from jupyter_mgpu.ops.matmul_costs import StrategyPlan, strategy_plan
from jupyter_mgpu.ops.matmul_costs import required_placements as required_placements
from jupyter_mgpu.units import format_bytes as _fmt

ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


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
        o = strategy_plan(name, m, k, n, world_size, itemsize, placements, grid, device_kind)
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
        return max(strategy_plan("ring", m, k, n, q, itemsize, None, None, kind).extra_bytes) <= per_device

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
