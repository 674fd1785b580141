"""Sharded matmul on the ranks: :func:`run` one strategy (row, col, inner, ring or summa) and measure it.

The controller (``jupyter_mgpu/tensors/sharded_matmul.py``) plans first, then calls :func:`run` on every
rank with handle ids. ``run`` redistributes inputs that are not in the strategy's layout, allocates
the output shard once, runs the strategy with ``torch.mm(out=)`` / in-place ``addmm_``, frees
temporaries at once and measures peak memory and time. The strategies themselves are
``ops/matmul_strategies.py`` (row, col, inner, and the :class:`Steps` recorder through which every strategy
reports its steps: step index, action, block, the hook the trace recorder uses), ``ops/ring_matmul.py``
and ``ops/summa_matmul.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import matmul_trace, shard_exchange
from jupyter_mgpu.ops.matmul_costs import required_placements
from jupyter_mgpu.ops.matmul_strategies import Steps, _nbytes, col, inner, row
from jupyter_mgpu.ops.ring_matmul import ring
from jupyter_mgpu.ops.summa_matmul import summa

STRATEGY_FUNCTIONS = {"row": row, "col": col, "inner": inner, "ring": ring, "summa": summa}


def _peak_probe() -> Callable[[], int]:
    """Reset the peak and return a function giving the growth of peak memory since then (bytes)."""
    st = rank_state.get()
    telemetry.reset_peak()
    if st.device_kind == "cuda":
        import torch

        base = torch.cuda.memory_allocated(st.device)
        return lambda: int(torch.cuda.max_memory_allocated(st.device) - base)
    from jupyter_mgpu.engine.shards import allocator_budget, budget

    if budget.mode() == "allocator":  # the budget's own count: tensor bytes, exact
        base = allocator_budget.allocated()
        return lambda: int(allocator_budget.peak() - base)
    base = telemetry._proc_status().get("VmRSS", 0)
    return lambda: int(telemetry._proc_status().get("VmHWM", 0) - base)


def run(
    strategy: str,
    a_id: str,
    a_pl: pl.Placement,
    b_id: str,
    b_pl: pl.Placement,
    c_id: str,
    shapes: tuple[tuple[int, int], tuple[int, int]],
    params: dict[str, Any],
) -> dict[str, Any]:
    """Run ``strategy`` on this rank: store C as ``c_id``; returns measured peak, time, bytes, steps.

    ``peak_bytes`` = bytes of the input shards this rank held before the op + the growth of its
    peak memory during the op (the allocator's peak minus what was allocated before: torch's on GPU,
    the budget's count on CPU virtual devices; VmHWM minus RSS where that count is not kept).
    """
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    (m, k), (_, n) = shapes
    a, b = store.get(a_id), store.get(b_id)
    held = _nbytes(a) + _nbytes(b)
    need_a, need_b, c_pl = required_placements(strategy, st.world_size, params.get("grid"))
    dist.barrier()
    growth = _peak_probe()
    start = time.perf_counter()
    steps = Steps()
    tracer = matmul_trace.start(
        strategy, a_id, a_pl, b_id, b_pl, c_id, shapes, params, (need_a, need_b, c_pl), a.element_size()
    )  # None unless mg.trace() is on
    redistribution_steps = 0
    if pl.normalize(a_pl, 2, st.world_size) != need_a:
        a, got = shard_exchange.exchange(
            a, (m, k), a_pl, need_a, tracer.exchange_names("a") if tracer is not None else None, 1
        )
        steps.received += got
        redistribution_steps += st.world_size - 1
    if pl.normalize(b_pl, 2, st.world_size) != need_b:
        b, got = shard_exchange.exchange(
            b, (k, n), b_pl, need_b, tracer.exchange_names("b") if tracer is not None else None, st.world_size
        )
        steps.received += got
        redistribution_steps += st.world_size - 1
    me = pl.shard_table((m, n), c_pl, st.world_size)[st.rank]
    c = torch.empty(me.shape, dtype=a.dtype, device=a.device)
    if tracer is not None:
        tracer.allocated()
        Steps.hook = tracer.on_step
    try:
        STRATEGY_FUNCTIONS[strategy](a, b, c, shapes, params, steps)
    finally:
        if tracer is not None:
            Steps.hook = None
    del a, b
    if tracer is not None:
        tracer.finish(steps.count)
    if st.device_kind == "cuda":
        torch.cuda.synchronize(st.device)
    compute_done = time.perf_counter()
    peak = held + growth()  # before the barrier: its own scratch (a byte on gloo, now and then) is not the op's
    dist.barrier()
    elapsed = time.perf_counter() - start
    store.put(c_id, c)
    store.trim()
    return {
        "peak_bytes": peak,
        "time": elapsed,
        "compute_time": compute_done - start,
        "bytes_moved": steps.received,
        "steps": steps.count + redistribution_steps,
        "held_bytes": held,
    }


def check_against(c_id: str, shapes: Any, c_pl: pl.Placement, a_seed: int, b_seed: int, dtype: str) -> float:
    """Max abs error of this rank's C shard against ``torch.mm`` of the same seeded global inputs.

    Each rank rebuilds only the rows/cols of A and B its C block needs (counter-based seeding) and
    compares in blocks of 256 rows, so the check fits wherever C fits.
    """
    import torch

    from jupyter_mgpu.engine.shards import seeding

    st = rank_state.get()
    (m, k), (_, n) = shapes
    me = pl.shard_table((m, n), c_pl, st.world_size)[st.rank]
    (r0, r1), (c0, c1) = me.ranges
    c = store.get(c_id)
    dt = rank_tensor.dtype_of(dtype)
    calc = torch.float64 if dt == torch.float64 else torch.float32
    a = seeding.fill(torch.empty((r1 - r0, k), dtype=dt, device=c.device), "randn", (m, k), ((r0, r1), (0, k)), a_seed)
    b = seeding.fill(torch.empty((k, c1 - c0), dtype=dt, device=c.device), "randn", (k, n), ((0, k), (c0, c1)), b_seed)
    b = b.to(calc)
    worst = 0.0
    for lo in range(0, c.shape[0], 256):  # row blocks: the check never needs a second copy of C
        ref = torch.mm(a[lo : lo + 256].to(calc), b)
        worst = max(worst, float((c[lo : lo + 256].to(calc) - ref).abs().max()) if ref.numel() else 0.0)
    return worst
