"""``mg.matmul(A, B)``: plan, check the memory of every rank, run a strategy, report what it cost.

Everything that can be refused is refused here, on the controller, before any rank allocates:
mismatched shapes, dtypes, sessions, unknown strategies, and a multiplication that fits nowhere.

The other half: ``ops/sharded_matmul.py``, its rank side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import matmul_plan as mp
from jupyter_mgpu.ops import sharded_matmul as mm
from jupyter_mgpu.tensors import dist_tensor
from jupyter_mgpu.tensors.dist_tensor import DistTensor, new_handle, session_of
from jupyter_mgpu.tensors.handles import dtype_name, run_creating
from jupyter_mgpu.units import format_bytes

STRATEGY_NAMES = ("auto",) + mp.STRATEGIES


@dataclass
class MatmulReport:
    """Measured cost of one matmul, per rank, next to the plan's prediction.

    ``peak_bytes[r]``: bytes of the input shards rank ``r`` held before the op plus the growth of
    its peak memory during the op (CPU: peak RSS reset with ``/proc/self/clear_refs``, VmHWM after
    minus RSS before; GPU: allocator peak). ``time``: slowest rank, between barriers.
    """

    strategy: str
    peak_bytes: list[int]
    predicted_peak_bytes: list[int]
    time: float
    bytes_moved: list[int]
    predicted_bytes_moved: list[int]
    steps: int
    predicted_time: float
    flops: int

    @property
    def gflops(self) -> float:
        return self.flops / self.time / 1e9 if self.time > 0 else float("nan")

    def __repr__(self) -> str:
        lines = [
            f"matmul report: {self.strategy}, {self.time * 1e3:.1f} ms ({self.gflops:.1f} GFLOP/s), "
            f"{self.steps} steps; peak = input shards + measured peak growth",
            f"  {'rank':>4} {'peak (measured)':>16} {'peak (predicted)':>17} {'moved (measured)':>17} "
            f"{'moved (predicted)':>18}",
        ]
        for r, (pk, pp, bm, bp) in enumerate(
            zip(self.peak_bytes, self.predicted_peak_bytes, self.bytes_moved, self.predicted_bytes_moved)
        ):
            lines.append(
                f"  {r:>4} {format_bytes(pk):>16} {format_bytes(pp):>17} {format_bytes(bm):>17} {format_bytes(bp):>18}"
            )
        return "\n".join(lines)


def plan_matmul(
    shapes: Any, world_size: int, dtype: Any = "float32", device_memory: Any = None, **kwargs: Any
) -> mp.MatmulPlan:
    """Predict per-rank peak bytes, bytes moved and steps of every strategy (see ``ops.matmul_plan``).

    ``device_memory`` is free bytes per rank (a number, a list, or a size string such as "2GiB").
    """
    from jupyter_mgpu.units import parse_size

    if isinstance(device_memory, str):
        device_memory = parse_size(device_memory)
    try:
        return mp.plan_matmul(shapes, world_size, dtype_name(dtype), device_memory, **kwargs)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None


def _validate(
    A: Any, B: Any, strategy: str, grid: Any
) -> tuple[Any, tuple[tuple[int, int], tuple[int, int]], tuple[int, int] | None]:
    s = session_of(A, B)
    if A.ndim != 2 or B.ndim != 2:
        raise MgpuError(f"matmul needs two 2-D tensors, got {A.ndim}-D and {B.ndim}-D")
    (m, k), (k2, n) = A.shape, B.shape
    if k != k2:
        raise MgpuError(f"inner dimensions do not match: A is {m}x{k}, B is {k2}x{n}")
    if A.dtype_name != B.dtype_name:
        raise MgpuError(f"dtypes differ: A is {A.dtype_name}, B is {B.dtype_name}; convert one first")
    if A.dtype_name not in mp.ITEMSIZE:
        raise MgpuError(f"matmul supports {', '.join(mp.ITEMSIZE)}, not {A.dtype_name}")
    if A.dtype_name == "float16" and s.device_kind != "cuda":
        raise MgpuError("float16 matmul needs GPUs; on CPU virtual devices use bfloat16 or float32")
    if strategy not in STRATEGY_NAMES:
        raise MgpuError(f"unknown matmul strategy {strategy!r}: use one of {', '.join(STRATEGY_NAMES)}")
    if grid is not None:
        try:
            rows, cols = (int(x) for x in grid)
        except (TypeError, ValueError):
            raise MgpuError(f"grid must be (rows, cols), got {grid!r}") from None
        if rows * cols != s.world_size or rows < 1:
            raise MgpuError(f"grid {rows}x{cols} does not have {s.world_size} ranks")
        grid = (rows, cols)
    return s, ((m, k), (k, n)), grid


def matmul(A: DistTensor, B: DistTensor, strategy: str = "auto", *, grid: Any = None) -> DistTensor:
    """``A @ B`` over the ranks; ``C.plan`` is the prediction, ``C.report`` the measurement.

    ``strategy``: ``auto`` (fastest predicted that fits every rank's free memory), ``row``,
    ``col``, ``inner``, ``ring`` or ``summa`` (``grid=(rows, cols)``, default most square).
    Inputs in other placements are redistributed first (counted in the plan and the report).
    """
    s, shapes, grid = _validate(A, B, strategy, grid)
    free = [st["free"] for st in s.run(rank_tensor.memory_status, label="memory")]
    plan = plan_matmul(
        shapes,
        s.world_size,
        A.dtype_name,
        free,
        strategy=strategy,
        placements=(A.placement, B.placement),
        grid=grid,
        device_kind=s.device_kind,
    )
    if plan.strategy is None:
        raise MgpuError(plan.reason)
    chosen = plan.chosen
    assert chosen is not None  # a plan with a strategy has it among its options
    (m, k), (_, n) = shapes
    C = new_handle(s, (m, n), A.dtype_name, chosen.out_placement)
    results = run_creating(
        C,
        mm.run,
        chosen.strategy,
        A.handle_id,
        A.placement,
        B.handle_id,
        B.placement,
        C.handle_id,
        shapes,
        chosen.params,
        label=f"matmul:{chosen.strategy}",
    )
    C.plan = plan
    C.report = MatmulReport(
        strategy=chosen.strategy,
        peak_bytes=[r["peak_bytes"] for r in results],
        predicted_peak_bytes=list(chosen.peak_bytes),
        time=max(r["time"] for r in results),
        bytes_moved=[r["bytes_moved"] for r in results],
        predicted_bytes_moved=list(chosen.bytes_moved),
        steps=max(r["steps"] for r in results),
        predicted_time=chosen.predicted_time,
        flops=2 * m * k * n,
    )
    return C


dist_tensor.OPERATORS["matmul"] = matmul  # ``A @ B``


def max_error(C: DistTensor, a_seed: int, b_seed: int) -> float:
    """Max abs error of ``C`` against ``torch.mm`` of ``randn`` inputs with these seeds (on the ranks)."""
    (m, n) = C.shape
    k = C.plan.shapes[0][1]
    errs: list[float] = C.session.run(
        mm.check_against, C.handle_id, ((m, k), (k, n)), C.placement, a_seed, b_seed, C.dtype_name, label="check"
    )
    return max(errs)
