"""Every torch.distributed collective, run for real on the ranks with its inputs and outputs captured.

The controller (``jupyter_mgpu.collective``) calls :func:`prepare` on every rank (build the input
tensor, report its shape/dtype/device so bad input is refused before any collective starts), then
:func:`execute` (run the collective, return CPU copies of what each rank holds afterwards).

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

Engine-side: imports torch and the runtime only.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable

COLLECTIVES = ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter", "scatter", "gather",
               "all_to_all", "barrier", "send_recv")
REDUCING = ("reduce", "all_reduce", "reduce_scatter")
ROOTED = ("broadcast", "reduce", "scatter", "gather")
SPLITTING = ("reduce_scatter", "scatter", "all_to_all")  # split dim 0 into world_size chunks
LIST_AFTER = ("all_gather", "gather", "all_to_all")
OPS = ("sum", "product", "min", "max", "avg")
ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "sendrecv": "send_recv", "ring_shift": "send_recv", "send": "send_recv",
    "recv": "send_recv", "bcast": "broadcast",
}
OP_ALIASES = {"prod": "product", "mean": "avg", "average": "avg", "minimum": "min", "maximum": "max"}
# (backend, op) pairs a backend refuses, with the reason. gloo (torch 2.13) and NCCL support all five
# ops on floating-point tensors; avg on integer or bool tensors fails in gloo ("result type Float can't
# be cast"), so the controller refuses avg on non-float dtypes before anything runs.
UNSUPPORTED_OPS: dict[tuple[str, str], str] = {}

_prepared: dict[int, Any] = {}
_tokens = itertools.count(1)


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

    return {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}[op]


def chunks(x: Any, n: int) -> list[Any]:
    """``x`` split along dim 0 into ``n`` equal chunks (the caller checked divisibility)."""
    return list(x.chunk(n, dim=0)) if x.shape[0] else [x] * n


def before_entries(name: str, x: Any, rank: int, src: int, world_size: int) -> Any:
    """What a rank contributes, as drawn in the "before" column: a tensor, a list of chunks, or None."""
    if x is None:
        return None
    if name == "scatter":
        return chunks(x, world_size) if rank == src else None
    if name in ("reduce_scatter", "all_to_all"):
        return chunks(x, world_size)
    return x


def can_function(fn: Callable) -> Any:
    """``fn`` made picklable for the ranks, notebook functions and lambdas included (ipyparallel canning)."""
    from ipyparallel.serialize.canning import can

    return can(fn)


def _uncan_function(canned: Any) -> Callable:
    """The function back on a rank; globals of notebook functions come from the engine's namespace."""
    from ipyparallel.serialize.canning import CannedFunction, uncan

    if not isinstance(canned, CannedFunction):
        return canned
    try:
        from IPython import get_ipython

        shell = get_ipython()
        user_ns = shell.user_ns if shell is not None else None
    except Exception:
        user_ns = None
    if user_ns is None:
        import sys

        user_ns = sys.modules["__main__"].__dict__
    try:
        return uncan(canned, user_ns)
    except ImportError:  # defined in a module the ranks cannot import: resolve its globals here
        canned.module = "__main__"
        return uncan(canned, user_ns)


# -- rank side ---------------------------------------------------------------------------------------
def _build(spec: tuple, rank: int, device: Any) -> Any:
    import torch

    from . import demo_inputs

    kind = spec[0]
    if kind == "demo":
        _, shape, dtype = spec
        return demo_inputs.demo_tensor(rank, shape, getattr(torch, dtype), device)
    if kind == "fn":
        return _uncan_function(spec[1])(rank)
    if kind == "value":  # one tensor per rank, sent from the controller
        return spec[1][rank]
    if kind == "shard":  # a DistTensor's local shard from the engine's shard store (not copied)
        from ..engine import store

        return store.get(spec[1])
    raise ValueError(f"unknown input kind {kind!r}")


def prepare(spec: tuple, capture: bool = True, max_bytes: int | None = None) -> dict[str, Any]:
    """Build this rank's input for a collective and keep it for :func:`execute`; report what it is.

    Returns ``token`` (pass it to execute), ``type`` (``Tensor`` or the type found), ``shape``,
    ``dtype``, ``device``, ``expected_device``, ``nbytes`` and, with ``capture``, ``before`` (a CPU copy).
    Inputs on the wrong device or over ``max_bytes`` are reported but not kept.
    """
    import torch

    from ..engine import runtime

    st = runtime.state()
    x = _build(spec, st.rank, st.device)
    info: dict[str, Any] = {"type": type(x).__name__, "expected_device": str(st.device),
                            "backend": st.backend}
    if not isinstance(x, torch.Tensor):
        return info
    info.update(shape=tuple(x.shape), dtype=str(x.dtype).replace("torch.", ""), device=str(x.device))
    info["nbytes"] = x.numel() * x.element_size()
    if x.device.type != st.device.type or (x.device.type == "cuda" and x.device != st.device):
        return info  # refused by the controller; nothing kept
    if max_bytes is not None and info["nbytes"] > max_bytes:
        return info  # too large to capture and draw; refused by the controller
    token = next(_tokens)
    _prepared.clear()  # at most one prepared input per rank: a refused one must not linger
    _prepared[token] = x
    info["token"] = token
    if capture:
        info["before"] = x.detach().to("cpu", copy=True)
    return info


def discard() -> None:
    """Forget a prepared input (after the controller refused it)."""
    _prepared.clear()


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
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x.contiguous(), (rank + 1) % n),
                                       dist.P2POp(dist.irecv, out, (rank - 1) % n)])
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


def execute(tokens: list[int], name: str, op: str = "sum", src: int = 0, capture: bool = True) -> dict[str, Any]:
    """Run collective ``name`` on the input :func:`prepare` kept under ``tokens[rank]``.

    Returns ``after`` (CPU copies of what this rank holds afterwards, see the module table) and
    ``seconds`` (this rank's time for the collective alone, after a barrier).
    """
    import torch.distributed as dist

    from ..engine import runtime

    st = runtime.state()
    x = _prepared.pop(tokens[st.rank], None)
    if x is None:
        raise RuntimeError("this rank has no prepared input for the collective (prepare it first)")
    from ..engine import trace as etrace

    tracing = etrace.active()
    if tracing:
        from . import collective_trace

        tag = f"{name}#{tokens[0]}"
        collective_trace.begin(name, x, tag, op)
    dist.barrier()
    _sync(st.device)
    t0 = time.perf_counter()
    after = run_collective(name, x, op, src)
    _sync(st.device)
    seconds = time.perf_counter() - t0
    if tracing:
        collective_trace.end(name, x, tag, src)
    return {"after": _to_cpu(after) if capture else None, "seconds": seconds}
