"""Baselines that ``mg.matmul`` is measured against, run on the ranks (benchmarks and the OOM demo).

- :func:`naive_concat`: the recipe people write by hand — each rank multiplies its row half of A
  by a replicated B, then one rank receives the other halves and ``torch.cat``s them (not in place:
  the halves and the concatenated copy are alive together).
- :func:`dtensor_mm`: ``torch.distributed.tensor`` (DTensor) ``torch.mm`` on the same process
  group and the same placements, with its default redistribution.
- :func:`single_mm`: ``torch.mm`` in one process (rank 0) with a given number of threads.
"""

from __future__ import annotations

import time
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.shards import shard_store as store


def _probe() -> Any:
    telemetry.reset_peak()
    base = telemetry._proc_status().get("VmRSS", 0)
    return lambda: telemetry._proc_status().get("VmHWM", 0) - base


def naive_concat(a_id: str, b_id: str, root: int = 0) -> dict[str, Any]:
    """``C_half = A_half @ B`` on every rank, then gather the halves on ``root`` and ``torch.cat`` them."""
    import torch
    import torch.distributed as dist

    st = rank_state.get()
    a, b = store.get(a_id), store.get(b_id)
    held = a.numel() * a.element_size() + b.numel() * b.element_size()
    dist.barrier()
    growth = _probe()
    start = time.perf_counter()
    part = torch.mm(a, b)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(st.world_size)]
    dist.all_gather(sizes, torch.tensor([part.shape[0]]))
    if st.rank == root:
        parts = []
        for r in range(st.world_size):
            if r == root:
                parts.append(part)
            else:
                buf = torch.empty((int(sizes[r]), part.shape[1]), dtype=part.dtype)
                dist.recv(buf, r)
                parts.append(buf)
        c = torch.cat(parts)  # the step that does not fit: halves + the full copy at once
        shape = tuple(c.shape)
        del c, parts
    else:
        dist.send(part, root)
        shape = None
    del part
    dist.barrier()
    elapsed = time.perf_counter() - start
    return {"peak_bytes": held + growth(), "time": elapsed, "shape": shape}


def dtensor_mm(a_id: str, b_id: str, a_shard: int, b_shard: int) -> dict[str, Any]:
    """``torch.mm`` of DTensors made from the stored shards (``Shard(a_shard)`` x ``Shard(b_shard)``).

    DTensor's default plan may leave C ``Partial``; it is then redistributed to ``Shard(0)`` so the
    result is finished and laid out like ring's (timed and measured with the rest).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    st = rank_state.get()
    a, b = store.get(a_id), store.get(b_id)
    held = a.numel() * a.element_size() + b.numel() * b.element_size()
    mesh = init_device_mesh(st.device.type, (st.world_size,))
    da = DTensor.from_local(a, mesh, [Shard(a_shard)], run_check=False)
    db = DTensor.from_local(b, mesh, [Shard(b_shard)], run_check=False)
    dist.barrier()
    growth = _probe()
    start = time.perf_counter()
    dc: DTensor = torch.mm(da, db)  # type: ignore[assignment]  # mm of DTensors is a DTensor; torch's stubs say Tensor
    if tuple(dc.placements) != (Shard(0),):  # finish in ring's output layout: C Shard(0), reduced
        dc = dc.redistribute(mesh, [Shard(0)])
    local = dc.to_local()
    dist.barrier()
    elapsed = time.perf_counter() - start
    out = {
        "peak_bytes": held + growth(),
        "time": elapsed,
        "placement": str(dc.placements),
        "local_shape": tuple(local.shape),
    }
    del dc, local, da, db
    store.trim()
    return out


def single_mm(n: int, k: int, m: int, threads: int, dtype: str = "float32") -> dict[str, Any]:
    """``torch.mm`` of one ``n x k`` by ``k x m`` in this process with ``threads`` threads (time, peak)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        dt = getattr(torch, dtype)
        a, b = torch.randn(n, k, dtype=dt), torch.randn(k, m, dtype=dt)
        growth = _probe()
        start = time.perf_counter()
        c = torch.mm(a, b)
        elapsed = time.perf_counter() - start
        held = (a.numel() + b.numel()) * a.element_size()
        del a, b, c
        store.trim()
        return {"time": elapsed, "peak_bytes": held + growth()}
    finally:
        torch.set_num_threads(old)
