"""Every torch.distributed collective, run for real on the ranks with its inputs and outputs captured.

The controller (``jupyter_mgpu.collectives.collective_run``) calls :func:`execute` on every rank, once: build the
input tensor, exchange its shape/dtype/device with the other ranks so bad input is refused by all of
them before any collective starts, run the collective, return CPU copies of what each rank held
before and holds afterwards.

What each rank holds after the collective ("after"):

============== ================================================================ =========================
collective     after                                                            needs
============== ================================================================ =========================
broadcast      ``src``'s tensor                                                 src
reduce         the reduction on ``src`` (the root); ``None`` elsewhere          op, src
all_reduce     the reduction, on every rank                                     op
all_gather     list of every rank's tensor (entry j from rank j)
reduce_scatter chunk r (dim 0 split in n) of the reduction                      op, dim 0 % n == 0
scatter        chunk r of ``src``'s tensor                                      src, dim 0 % n == 0
gather         list of every rank's tensor on ``src``; ``None`` elsewhere       src
all_to_all     list: entry j is chunk r of rank j's tensor                      dim 0 % n == 0
barrier        the input, unchanged (nothing moves; every rank waits for all)
send_recv      the tensor of rank r-1 (a ring shift: r sends to r+1)
============== ================================================================ =========================

Engine-side: imports torch, the runtime and the pure checks only.

The other half: ``collectives/collective_run.py``, its controller side.
"""

from __future__ import annotations

import time
from typing import Any

from jupyter_mgpu.ops.collective_checks import REDUCING as REDUCING  # read here by the views and tests
from jupyter_mgpu.ops.collective_checks import SPLITTING as SPLITTING
from jupyter_mgpu.ops.collective_schedule import chunks

COLLECTIVES = (
    "broadcast",
    "reduce",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "scatter",
    "gather",
    "all_to_all",
    "barrier",
    "send_recv",
)
ROOTED = ("broadcast", "reduce", "scatter", "gather")
LIST_AFTER = ("all_gather", "gather", "all_to_all")
OPS = ("sum", "product", "min", "max", "avg")
ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "ring_shift": "send_recv",
    "send": "send_recv",
    "recv": "send_recv",
    "bcast": "broadcast",
}
OP_ALIASES = {"prod": "product", "mean": "avg", "average": "avg", "minimum": "min", "maximum": "max"}
# (backend, op) pairs a backend refuses, with the reason. gloo (torch 2.13) and NCCL support all five
# ops on floating-point tensors; avg on integer or bool tensors fails in gloo ("result type Float can't
# be cast"), so the controller refuses avg on non-float dtypes before anything runs.
UNSUPPORTED_OPS: dict[tuple[str, str], str] = {}


def canonical_name(name: str) -> str:
    """The canonical collective name for ``name`` (``allreduce`` → ``all_reduce``); ValueError if unknown."""
    key = str(name).strip().lower().replace("-", "_")
    key = ALIASES.get(key.replace("_", ""), ALIASES.get(key, key))
    if key not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r}; choose one of {', '.join(COLLECTIVES)}")
    return key


def canonical_op(op: str | None) -> str:
    """The canonical reduce op name (``sum``, ``product``, ``min``, ``max``, ``avg``); ValueError if unknown."""
    key = "sum" if op is None else str(op).strip().lower()
    key = key.rsplit(".", 1)[-1]  # accept "ReduceOp.MAX"
    key = OP_ALIASES.get(key, key)
    if key not in OPS:
        raise ValueError(f"unknown reduce op {op!r}; choose one of {', '.join(OPS)}")
    return key


def check_backend_op(backend: str, op: str) -> None:
    """Refuse (with the reason) a reduce op the backend does not implement."""
    reason = UNSUPPORTED_OPS.get((backend, op))
    if reason:
        raise ValueError(f"the {backend} backend does not support reduce op {op}: {reason}")


def reduce_op(op: str) -> Any:
    import torch.distributed as dist

    return {
        "sum": dist.ReduceOp.SUM,
        "product": dist.ReduceOp.PRODUCT,
        "min": dist.ReduceOp.MIN,
        "max": dist.ReduceOp.MAX,
        "avg": dist.ReduceOp.AVG,
    }[op]


# -- rank side ---------------------------------------------------------------------------------------
def _build(spec: tuple[Any, ...], rank: int, device: Any) -> Any:
    import torch

    from jupyter_mgpu.ops import demo_inputs

    kind = spec[0]
    if kind == "demo":
        _, shape, dtype = spec
        return demo_inputs.demo_tensor(rank, shape, getattr(torch, dtype), device)
    if kind == "fn":
        return spec[1](rank)  # a ShippedFunction: the notebook function, loaded here
    if kind == "value":  # one tensor per rank, sent from the controller
        return spec[1][rank]
    if kind == "shard":  # a DistTensor's local shard from the engine's shard store (not copied)
        from jupyter_mgpu.engine.shards import shard_store as store

        return store.get(spec[1])
    raise ValueError(f"unknown input kind {kind!r}")


def describe(x: Any, expected_device: Any) -> dict[str, Any]:
    """What the checks need to know of one rank's input: its type and, for a tensor, shape/dtype/device/bytes."""
    import torch

    info: dict[str, Any] = {"type": type(x).__name__, "expected_device": str(expected_device)}
    if isinstance(x, torch.Tensor):
        info.update(
            shape=tuple(x.shape),
            dtype=str(x.dtype).replace("torch.", ""),
            device=str(x.device),
            nbytes=x.numel() * x.element_size(),
        )
    return info


def _sync(device: Any) -> None:
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


def run_collective(name: str, x: Any, op: str, src: int) -> Any:
    """Run collective ``name`` on this rank's tensor ``x``; return what this rank holds afterwards."""
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    if name == "broadcast":
        y = x.clone()
        dist.broadcast(y, src=src)
        return y
    if name == "reduce":
        y = x.clone()
        dist.reduce(y, dst=src, op=reduce_op(op))
        return y if rank == src else None
    if name == "all_reduce":
        y = x.clone()
        dist.all_reduce(y, op=reduce_op(op))
        return y
    if name == "all_gather":
        out = x.new_empty((n * x.shape[0],) + tuple(x.shape[1:]))
        dist.all_gather_single(out, x.contiguous())
        return chunks(out, n)
    if name == "reduce_scatter":
        out = x.new_empty((x.shape[0] // n,) + tuple(x.shape[1:]))
        dist.reduce_scatter_single(out, x.contiguous(), op=reduce_op(op))
        return out
    if name == "scatter":
        out = x.new_empty((x.shape[0] // n,) + tuple(x.shape[1:]))
        parts = [c.contiguous() for c in chunks(x, n)] if rank == src else None
        dist.scatter(out, parts, src=src)
        return out
    if name == "gather":
        parts = [x.new_empty(x.shape) for _ in range(n)] if rank == src else None
        dist.gather(x.contiguous(), parts, dst=src)
        return parts
    if name == "all_to_all":
        out = x.new_empty(x.shape)
        dist.all_to_all_single(out, x.contiguous())
        return chunks(out, n)
    if name == "barrier":
        dist.barrier()
        return x.clone()
    if name == "send_recv":
        if n == 1:
            return x.clone()
        out = x.new_empty(x.shape)
        reqs = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, x.contiguous(), (rank + 1) % n), dist.P2POp(dist.irecv, out, (rank - 1) % n)]
        )
        for req in reqs:
            req.wait()
        return out
    raise ValueError(f"unknown collective {name!r}")


def _to_cpu(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [v.detach().to("cpu", copy=True) for v in value]
    return value.detach().to("cpu", copy=True)


def _fingerprint(info: dict[str, Any], max_bytes: int | None) -> tuple[int, int]:
    """(1 if this input can take part as it is, else 0; a 56-bit digest of its shape and dtype)."""
    import hashlib

    from jupyter_mgpu.ops.collective_checks import usable

    ok = usable(info, max_bytes)
    key = repr((tuple(info.get("shape", ())), info.get("dtype"))).encode()
    return int(ok), int.from_bytes(hashlib.blake2b(key, digest_size=7).digest(), "little")


def _exchange(info: dict[str, Any], max_bytes: int | None, device: Any) -> list[dict[str, Any]]:
    """Every rank's input description, in rank order, as every rank sees it.

    The common case costs one small all_reduce: when every input is usable and all have the same
    shape and dtype, every description equals this rank's (as far as the checks look). Only when
    they differ do the ranks gather the full descriptions (``all_gather_object``, ~10 ms on 2 cores)
    to name what differs where.
    """
    import torch
    import torch.distributed as dist

    ok, digest = _fingerprint(info, max_bytes) if info["type"] != "failed" else (0, 0)
    flags = torch.tensor([ok, digest, -digest], dtype=torch.int64, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    n = dist.get_world_size()
    if int(flags[0]) == 1 and int(flags[1]) == -int(flags[2]):
        return [info] * n
    metas: list[Any] = [None] * n
    dist.all_gather_object(metas, info)
    return metas


def execute(
    spec: tuple[Any, ...],
    name: str,
    op: str = "sum",
    src: int = 0,
    capture: bool = True,
    max_bytes: int | None = None,
    what: str = "the input",
    run_id: int = 0,
) -> dict[str, Any]:
    """Build this rank's input from ``spec``, agree with every rank that the inputs are valid, run ``name``.

    The ranks exchange one description of their input each and all run the same checks
    (:func:`~jupyter_mgpu.ops.collective_checks.problem`), so either every rank runs the collective or
    every rank returns ``{"problem": sentence}`` and nothing started. A rank whose input could not be
    built still joins the exchange (nobody waits for it) and then raises its own error. Otherwise
    returns ``before`` (a CPU copy of the input, with ``capture``), ``after`` (CPU copies of what this
    rank holds afterwards, see the module table) and ``seconds`` (this rank's time for the collective
    alone, after a barrier). ``run_id`` (from the notebook, the same on every rank) names the run in traces.
    The exchange doubles as the barrier before the timed collective: it returns on a rank only once
    every rank has entered it.
    """
    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.ops import collective_checks

    st = rank_state.get()
    before = None
    failure: BaseException | None = None
    try:
        x = _build(spec, st.rank, st.device)
        info = describe(x, st.device)
        if capture and collective_checks.usable(info, max_bytes):
            before = x.detach().to("cpu", copy=True)
    except Exception as exc:  # reported below, after the exchange, so no rank waits for this one
        failure, x, info = exc, None, {"type": "failed"}
    metas = _exchange(info, max_bytes, st.device)
    if failure is not None:
        raise failure
    failed = [r for r, m in enumerate(metas) if m["type"] == "failed"]
    if failed:
        return {"problem": None, "failed": failed}  # those ranks raise their own errors
    sentence = collective_checks.problem(name, op, metas, what, max_bytes)
    if sentence is not None:
        return {"problem": sentence}
    return {"before": before, **_run_and_capture(name, x, op, src, capture, run_id, st.device)}


def _run_and_capture(name: str, x: Any, op: str, src: int, capture: bool, run_id: int, device: Any) -> dict[str, Any]:
    from jupyter_mgpu.engine.records import trace as etrace

    tracing = etrace.active()
    if tracing:
        from jupyter_mgpu.ops import collective_trace

        tag = f"{name}#{run_id}"
        collective_trace.begin(name, x, tag, op)
    _sync(device)  # the exchange was the barrier: every rank has arrived
    t0 = time.perf_counter()
    after = run_collective(name, x, op, src)
    _sync(device)
    seconds = time.perf_counter() - t0
    if tracing:
        collective_trace.end(name, x, tag, src)
    return {"after": _to_cpu(after) if capture else None, "seconds": seconds}
