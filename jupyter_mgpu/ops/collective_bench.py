"""Collective benchmark with the conventions of nccl-tests: sizes, algbw, busbw, ``#wrong``.

* ``size`` is the bytes of the whole array: the buffer of all_reduce/broadcast/reduce, the gathered
  output of all_gather/gather, the input of reduce_scatter/scatter and of all_to_all (its element
  count is rounded down to a multiple of the world size, as nccl-tests does).
* ``time`` is, per timed iteration, the slowest rank's time (every iteration starts after a barrier),
  averaged over the iterations, after ``warmup`` untimed iterations.
* ``algbw = size / time``; ``busbw = algbw × factor`` with the factors of nccl-tests
  (:data:`BUS_FACTORS`): 2(n−1)/n for all_reduce, (n−1)/n for all_gather, reduce_scatter,
  all_to_all, gather and scatter, 1 for broadcast, reduce and send_recv.
* ``#wrong``: the number of result elements that differ from the expected values (summed over the
  ranks), checked after the last iteration; inputs are small integers, so every op is exact.

:func:`bench_rank` runs on the ranks; the rest is pure and used by the controller too.

The other half: ``collectives/collective_bench.py``, its controller side.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.ops.collective_run import reduce_op

BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    "barrier": lambda n: 0.0,
}
BENCHMARKS = tuple(BUS_FACTORS)
_WHOLE_ARRAY = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
}


def bus_factor(name: str, world_size: int) -> float:
    """busbw / algbw for collective ``name`` on ``world_size`` ranks (nccl-tests' factors)."""
    if name not in BUS_FACTORS:
        raise ValueError(f"no benchmark for {name!r}; choose from {', '.join(BENCHMARKS)}")
    return BUS_FACTORS[name](world_size)


def parse_size(text: Any) -> int:
    """``"1K"`` → 1024, ``"256M"`` → 268435456, ``4096`` → 4096 (binary units, as nccl-tests)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size must not be negative, got {text}")
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read the size {text!r}; use a number of bytes with K, M or G, such as 64K or 16M")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def size_range(spec: Any, factor: float = 2) -> list[int]:
    """Sizes named by ``"1K:256M"`` (×``factor`` each step, like nccl-tests -b/-e/-f), ``"1K,1M"`` or a list."""
    if isinstance(spec, (list, tuple)):
        sizes = [parse_size(s) for s in spec]
    elif isinstance(spec, str) and ":" in spec:
        lo_text, hi_text = spec.split(":", 1)
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if factor <= 1:
            raise ValueError(f"the size factor must be greater than 1, got {factor}")
        if lo > hi:
            raise ValueError(f"the size range {spec!r} starts above its end")
        sizes = []
        s: float = max(lo, 1)
        while s <= hi:
            sizes.append(int(s))
            s *= factor
        if lo == 0:
            sizes.insert(0, 0)
    else:
        sizes = [parse_size(s) for s in str(spec).split(",") if s.strip()]
    if not sizes:
        raise ValueError(f"no sizes in {spec!r}")
    return sizes


def element_count(name: str, size: int, elem_size: int, world_size: int) -> int:
    """Elements of the whole array for ``size`` bytes (a multiple of the world size where it is split)."""
    count = size // elem_size
    if name in _WHOLE_ARRAY:
        count -= count % world_size
    return count


def summarize(
    name: str,
    size: int,
    count: int,
    elem_size: int,
    world_size: int,
    per_rank_times: list[list[float]],
    per_rank_wrong: list[int],
) -> dict[str, Any]:
    """One table row from every rank's per-iteration times: slowest rank per iteration, then the mean
    (``slowest`` keeps the per-iteration times, seconds, for a closer look at their spread)."""
    iters = min(len(t) for t in per_rank_times) if per_rank_times else 0
    slowest = [max(t[i] for t in per_rank_times) for i in range(iters)]
    seconds = sum(slowest) / iters if iters else float("nan")
    nbytes = count * elem_size
    algbw = nbytes / seconds / 1e9 if seconds and seconds == seconds and seconds > 0 else 0.0
    return {
        "collective": name,
        "size": nbytes,
        "count": count,
        "time_us": seconds * 1e6,
        "algbw": algbw,
        "busbw": algbw * bus_factor(name, world_size),
        "wrong": int(sum(per_rank_wrong)),
        "iters": iters,
        "slowest": slowest,
    }


# -- rank side ---------------------------------------------------------------------------------------
def pattern(rank: int, count: int, dtype: Any, device: Any, offset: int = 0) -> Any:
    """Rank ``rank``'s benchmark data: small integers 1…5, different per rank and position (exact in any op)."""
    import torch

    idx = torch.arange(offset, offset + count, device=device, dtype=torch.int64)
    return ((idx * 7 + rank * 3) % 5 + 1).to(dtype)


def _expected_reduction(op: str, n: int, count: int, dtype: Any, device: Any, offset: int = 0) -> Any:
    from jupyter_mgpu.ops.collective_schedule import combine, finish

    acc = pattern(0, count, dtype, device, offset)
    for j in range(1, n):
        acc = combine(op, acc, pattern(j, count, dtype, device, offset))
    return finish(op, acc, n)


def _wrong(got: Any, want: Any) -> int:
    import torch

    if got.is_floating_point():
        tol = 1e-2 if got.dtype in (torch.float16, torch.bfloat16) else 1e-5
        bad = ~torch.isclose(got.float(), want.float(), rtol=tol, atol=tol)
    else:
        bad = got != want
    return int(bad.sum().item())


def _one(
    name: str,
    count: int,
    n: int,
    rank: int,
    op: str,
    root: int,
    dtype: Any,
    device: Any,
    iters: int,
    warmup: int,
    corrupt: int | None,
) -> tuple[list[float], int]:
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.ops.collective_run import _sync

    part = count // n if name in _WHOLE_ARRAY else count
    rop = reduce_op(op)
    src_data = pattern(
        rank,
        count
        if name in ("all_reduce", "broadcast", "reduce", "reduce_scatter", "all_to_all", "send_recv", "scatter")
        else part,
        dtype,
        device,
    )
    buf = torch.empty_like(src_data)
    out = None
    if name in ("all_gather", "gather", "all_to_all"):
        out = torch.empty(count, dtype=dtype, device=device)
    elif name in ("reduce_scatter", "scatter"):
        out = torch.empty(part, dtype=dtype, device=device)
    elif name == "send_recv":
        out = torch.empty(count, dtype=dtype, device=device)

    def step() -> None:
        if name == "all_reduce":
            dist.all_reduce(buf, op=rop)
        elif name == "broadcast":
            dist.broadcast(buf, src=root)
        elif name == "reduce":
            dist.reduce(buf, dst=root, op=rop)
        elif name == "all_gather":
            dist.all_gather_single(out, buf)
        elif name == "reduce_scatter":
            dist.reduce_scatter_single(out, buf, op=rop)
        elif name == "all_to_all":
            dist.all_to_all_single(out, buf)
        elif name == "gather":
            assert out is not None  # gather, scatter and send_recv have an output buffer (above)
            dist.gather(buf, list(out.chunk(n)) if rank == root else None, dst=root)
        elif name == "scatter":
            assert out is not None
            dist.scatter(out, list(buf.chunk(n)) if rank == root else None, src=root)
        elif name == "send_recv":
            assert out is not None
            if n > 1:
                for req in dist.batch_isend_irecv(
                    [dist.P2POp(dist.isend, buf, (rank + 1) % n), dist.P2POp(dist.irecv, out, (rank - 1) % n)]
                ):
                    req.wait()
            else:
                out.copy_(buf)
        elif name == "barrier":
            dist.barrier()

    times = []
    for i in range(warmup + iters):
        buf.copy_(src_data)  # in-place collectives start from the same data every iteration
        dist.barrier()
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    result = buf if name in ("all_reduce", "broadcast", "reduce") else out
    if corrupt is not None and corrupt == rank and result is not None and result.numel():
        result.view(-1)[0] += 1  # test hook: make the checker see a wrong element
    return times, _check(name, result, count, part, n, rank, op, root, dtype, device)


def _check(
    name: str, got: Any, count: int, part: int, n: int, rank: int, op: str, root: int, dtype: Any, device: Any
) -> int:
    import torch

    if name == "barrier" or got is None:
        return 0
    if name == "all_reduce" or (name == "reduce" and rank == root):
        return _wrong(got, _expected_reduction(op, n, count, dtype, device))
    if name == "reduce":
        return 0
    if name == "broadcast":
        return _wrong(got, pattern(root, count, dtype, device))
    if name == "reduce_scatter":
        return _wrong(got, _expected_reduction(op, n, part, dtype, device, offset=rank * part))
    if name in ("all_gather", "gather"):
        if name == "gather" and rank != root:
            return 0
        want = torch.cat([pattern(j, part, dtype, device) for j in range(n)])
        return _wrong(got, want)
    if name == "scatter":
        return _wrong(got, pattern(root, count, dtype, device)[rank * part : (rank + 1) * part])
    if name == "all_to_all":
        want = torch.cat([pattern(j, count, dtype, device)[rank * part : (rank + 1) * part] for j in range(n)])
        return _wrong(got, want)
    if name == "send_recv":
        return _wrong(got, pattern((rank - 1) % n, count, dtype, device))
    return 0


def bench_rank(
    names: list[str],
    sizes: list[int],
    iters: int = 20,
    warmup: int = 5,
    dtype: str = "float32",
    op: str = "sum",
    root: int = 0,
    corrupt: int | None = None,
) -> list[dict[str, Any]]:
    """Time every collective in ``names`` at every size on this rank; one record per (name, size).

    Each record has ``name``, ``size``, ``count``, ``times`` (seconds of each timed iteration on this
    rank) and ``wrong`` (wrong elements on this rank). ``corrupt=r`` adds 1 to rank r's first result
    element before the check — a hook that shows the ``#wrong`` column can catch a bad result.
    """
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    rank, n = dist.get_rank(), dist.get_world_size()
    tdtype = getattr(torch, dtype)
    elem = torch.empty((), dtype=tdtype).element_size()
    records = []
    for name in names:
        for size in [0] if name == "barrier" else sizes:  # a barrier moves no data: one row
            count = element_count(name, size, elem, n)
            times, wrong = _one(name, count, n, rank, op, root, tdtype, st.device, iters, warmup, corrupt)
            records.append({"name": name, "size": size, "count": count, "times": times, "wrong": wrong})
    return records
