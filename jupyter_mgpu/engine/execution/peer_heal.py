"""Rank side of ``mg.heal``: a restarted rank gets named values from a live peer through the process group,
and DDP models are made again on every rank, so that training resumes with equal weights everywhere.

Two steps, so that nothing can hang half-way: :func:`pack` runs on the peer alone and pickles the values
(cloudpickle: a class or function defined in a cell travels by value; values pickled together keep sharing
what they shared, so an optimizer still steps the model's own parameters), refusing sharded state, which no
single peer holds whole; then :func:`heal` runs on every rank: the peer sends the bytes, the new rank binds
them, and each rank wraps the DDP models again (DDP's constructor broadcasts rank 0's weights).
"""

from __future__ import annotations

import io
import pickle
import types
from typing import Any

from jupyter_mgpu.engine.state import user_ns

_packed: dict[str, bytes] = {}  # the peer's pickled values, kept between pack() and heal()
DDP_OPTIONS = ("device_ids", "broadcast_buffers", "find_unused_parameters", "gradient_as_bucket_view", "static_graph")


def _is_ddp(value: Any) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(value, DistributedDataParallel)


def _ddp_options(ns: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    """The constructor options of the DDP models ``names`` in ``ns`` (those this rank holds), to make them again."""
    return {n: {k: getattr(ns[n], k) for k in DDP_OPTIONS if hasattr(ns[n], k)} for n in names if n in ns}


def _sharded(value: Any) -> str | None:
    """How ``value`` is sharded across ranks (a DTensor, an FSDP2 module), or None."""
    import torch

    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # an older torch
        return None
    if isinstance(value, DTensor):
        return "a DTensor"
    if isinstance(value, torch.nn.Module):
        if any(type(m).__name__.startswith("FSDP") for m in value.modules()):
            return "an FSDP module"
        if any(isinstance(p, DTensor) for p in value.parameters()):
            return "a module with DTensor parameters"
    return None


def pack(names: list[str]) -> dict[str, Any]:
    """On the peer: pickle ``names`` for the new rank; what is missing, sharded or not picklable, or the
    ``bytes`` and which names are DDP models."""
    import cloudpickle

    ns = user_ns()
    missing = [n for n in names if n not in ns]
    if missing:
        return {"missing": missing}
    sharded = {n: how for n in names if (how := _sharded(ns[n].module if _is_ddp(ns[n]) else ns[n]))}
    if sharded:
        return {"sharded": sharded}
    ddp = sorted(n for n in names if _is_ddp(ns[n]))
    values = {n: ns[n].module if n in ddp else ns[n] for n in names}
    # functions defined in cells read the rank's namespace: bound to the new rank's on arrival
    cells = [n for n in names if isinstance(ns[n], types.FunctionType) and ns[n].__globals__ is ns]

    class Pickler(cloudpickle.Pickler):
        def persistent_id(self, obj: Any) -> str | None:
            return "ddp" if _is_ddp(obj) else None  # a DDP model a function refers to: the rank's own, later

    stream = io.BytesIO()
    try:
        Pickler(stream).dump({"values": values, "options": _ddp_options(ns, ddp), "cells": cells})
    except Exception as exc:
        return {"unpicklable": f"{type(exc).__name__}: {exc}"}
    data = stream.getvalue()
    _packed["heal"] = data
    return {"bytes": len(data), "ddp": ddp}


def heal(src: int, dsts: list[int], ddp: list[str]) -> list[str]:
    """On every rank: ``src`` sends what :func:`pack` kept to each of ``dsts``, which bind it; then every rank
    makes its DDP models (``ddp``) again in the current process group. The names this rank now defines anew."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from jupyter_mgpu.engine import state as rank_state

    ns, me = user_ns(), rank_state.get().rank
    options: dict[str, dict[str, Any]] = {}
    bound: list[str] = []
    if me == src:
        options = _ddp_options(ns, ddp)
        data = _packed.pop("heal")
        for dst in dsts:
            dist.send(torch.tensor([len(data)], dtype=torch.int64), dst)
            dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst)
    elif me in dsts:
        size = torch.zeros(1, dtype=torch.int64)
        dist.recv(size, src)
        buffer = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.recv(buffer, src)
        got = _Unpickler(io.BytesIO(buffer.numpy().tobytes())).load()
        ns.update(got["values"])
        for n in got["cells"]:
            ns[n] = _in_namespace(ns[n], ns)
        options, bound = got["options"], sorted(got["values"])
    else:
        options = _ddp_options(ns, ddp)
    for n in ddp:  # in one order on every rank: each constructor is a collective
        module = ns[n].module if _is_ddp(ns[n]) else ns[n]
        ns[n] = DistributedDataParallel(module, **options.get(n, {}))
    return bound


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        return None  # a DDP model a function referred to: the function reads the rank's own once rebound


def _in_namespace(fn: types.FunctionType, ns: dict[str, Any]) -> types.FunctionType:
    """``fn`` reading ``ns`` as its globals, as a function defined in a cell of this rank does."""
    out = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__, out.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    out.__dict__.update(fn.__dict__)
    out.__annotations__ = dict(getattr(fn, "__annotations__", {}) or {})
    return out
