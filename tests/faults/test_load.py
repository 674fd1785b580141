"""Load: many cells and big collectives without memory growth; 16 ranks on a 2-core machine.

The bounds are printed with the measured growth (pytest -s shows them). What they catch: a cell that
keeps 120 KiB (24 MiB over 200 cells) and a 64 MiB collective that keeps 1 MiB (over 25; a kept buffer
of its own size at once). 100 collectives would catch 0.25 MiB each, for 45 s more on 2 cores."""

from __future__ import annotations

import gc

import psutil
import pytest
from processes import cluster_pids, wait_gone

import jupyter_mgpu as mg

pytestmark = pytest.mark.cluster

MiB = 2**20
CONTROLLER_BOUND = 16 * MiB
ENGINE_BOUND = 24 * MiB


def _rss(pids):
    return [psutil.Process(p).memory_info().rss for p in pids]


def _all_reduce_64mib() -> float:
    import torch
    import torch.distributed as dist

    x = torch.ones(16 * MiB)  # 64 MiB of float32
    dist.all_reduce(x)
    return float(x[0])


@pytest.mark.slow
def test_200_cells_and_25_collectives_of_64mib_do_not_grow_memory(s4):
    me = psutil.Process()
    engines = [s4.cluster.engine_pids[r] for r in range(4)]
    for _ in range(20):  # warm up caches, allocator pools, ipyparallel buffers
        s4.run_cell("y = torch.ones(1000)\ndist.all_reduce(y)\nprint(rank, y[0].item())", stream=True)
    s4.run(_all_reduce_64mib)
    gc.collect()
    c0, e0 = me.memory_info().rss, _rss(engines)
    for i in range(200):
        s4.run_cell(f"y = torch.ones(1000) * {i}\ndist.all_reduce(y)\nprint(rank, y[0].item())", stream=True)
    for _ in range(25):
        assert s4.run(_all_reduce_64mib) == [4.0] * 4
    gc.collect()
    c1, e1 = me.memory_info().rss, _rss(engines)
    growth = [b - a for a, b in zip(e0, e1)]
    print(
        f"\ncontroller RSS growth {(c1 - c0) / MiB:.1f} MiB (bound {CONTROLLER_BOUND / MiB:.0f} MiB); "
        f"engine RSS growth {[round(g / MiB, 1) for g in growth]} MiB (bound {ENGINE_BOUND / MiB:.0f} MiB)"
    )
    assert c1 - c0 < CONTROLLER_BOUND
    assert max(growth) < ENGINE_BOUND


def test_16_ranks_start_all_reduce_and_stop():
    import jupyter_mgpu.session.lifecycle as sm

    saved = sm._current
    sm._current = None
    s = mg.init(16, cpu=True, timeout=30, mem_per_device="1GiB")
    try:
        pids = cluster_pids(s)
        assert len(pids) >= 18
        out = s.run_cell("x = torch.full((4,), float(rank)); dist.all_reduce(x); x[0].item()")
        assert out == [repr(float(sum(range(16))))] * 16
    finally:
        s.shutdown()
        sm._current = saved
    assert wait_gone(pids) == []
