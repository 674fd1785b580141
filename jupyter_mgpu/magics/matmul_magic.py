"""``%mgpu_matmul M [K N] [--strategy] [--dtype] [--check] [--gather]``: create, multiply, verify, report."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import matmul_plan as mp
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.tensors.factories import randn
from jupyter_mgpu.tensors.handles import dtype_name
from jupyter_mgpu.tensors.sharded_matmul import matmul, max_error, plan_matmul


def _sizes(values: list[str]) -> tuple[int, int, int]:
    try:
        nums = [int(v.replace("_", "")) for v in values]
    except ValueError:
        raise UsageError(f"sizes must be whole numbers, got {' '.join(values)!r}") from None
    if len(nums) == 1:
        nums = nums * 3
    if len(nums) != 3 or any(n < 1 for n in nums):
        raise UsageError("give M (square) or M K N, each at least 1")
    return nums[0], nums[1], nums[2]


def _grid(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        rows, cols = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--grid takes rows x cols such as 2x2, got {text!r}") from None
    return rows, cols


def run_matmul_magic(args: Any, user_ns: dict[str, Any]) -> Any:
    """Plan first (refusing what cannot fit), create A and B in the chosen layout, multiply, report."""
    m, k, n = _sizes(args.sizes)
    try:
        seed = int(args.seed)
    except ValueError:
        raise UsageError(f"--seed takes a whole number, got {args.seed!r}") from None
    s = sessmod.current()
    dt = dtype_name(args.dtype)
    grid = _grid(args.grid)
    free = [st["free"] for st in s.run(rank_tensor.memory_status, label="memory")]
    # plan with A and B in each strategy's own layout: the matmul is measured, not a redistribution
    plan = plan_matmul(
        ((m, k), (k, n)), s.world_size, dt, free, strategy=args.strategy, grid=grid, device_kind=s.device_kind
    )
    print(plan.table())
    if plan.strategy is None:
        from jupyter_mgpu.errors import MgpuError

        raise MgpuError(plan.reason)
    chosen = plan.chosen
    assert chosen is not None  # a plan with a strategy has it among its options
    a_pl, b_pl, _ = chosen.placements
    A = randn(m, k, placement=a_pl, dtype=dt, seed=seed, session=s)
    B = randn(k, n, placement=b_pl, dtype=dt, seed=seed + 1, session=s)
    try:
        C = matmul(A, B, plan.strategy, grid=grid)
    finally:
        A.free()
        B.free()
    print(repr(C.report))
    if args.check:
        err = max_error(C, seed, seed + 1)
        tol = mp.tolerance(dt, k)
        verdict = "ok" if err <= tol else "TOO LARGE"
        print(f"check against torch.mm: max abs error {err:.3g} (tolerance {tol:.3g} for {dt}, K={k}): {verdict}")
    if args.gather:
        user_ns["_mgpu_C"] = C.gather()
        print(f"gathered C {tuple(C.shape)} into _mgpu_C")
    return C
