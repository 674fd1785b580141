"""``mg.map``: run one function on every rank's aligned shards — data-parallel math without training.

``mg.map(F.cosine_similarity, a, b, dim=1)`` calls ``F.cosine_similarity(a_r, b_r, dim=1)`` on each
rank ``r`` with that rank's rows of ``a`` and ``b``, and returns the per-row results as a new
DistTensor sharded the same way. Inputs are re-sharded to one placement first when they differ;
replicated inputs reach every rank whole (weights, a query vector). Functions that return one
small value per rank (a partial sum, a count) come back as a list, or reduced with
``reduce="sum" | "mean" | "concat"``.

The other half: ``ops/shard_map.py``, its rank side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.execution.shipped_function import ShippedFunction, function_name
from jupyter_mgpu.errors import MgpuError, RankError
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import shard_map as rank_map
from jupyter_mgpu.tensors.dist_tensor import DistTensor, new_handle, session_of
from jupyter_mgpu.tensors.handles import dtype_name

REDUCTIONS = (None, "sum", "mean", "concat")


def _target(tensors: tuple[DistTensor, ...], placement: Any) -> pl.Shard:
    if placement is not None:
        if not isinstance(placement, pl.Shard):
            raise MgpuError(f"mg.map runs on shards: placement must be Shard(dim), got {placement!r}")
        return placement
    for t in tensors:
        if isinstance(t.placement, pl.Shard):
            return t.placement
    if all(isinstance(t.placement, pl.Replicate) for t in tensors):
        raise MgpuError(
            "every input of mg.map is replicated, so each rank would do the same work; "
            "shard one of them (mg.load(..., placement=mg.Shard(0)) or t.redistribute(mg.Shard(0)))"
        )
    return pl.Shard(0)


def _check_lengths(tensors: tuple[DistTensor, ...], dim: int) -> int:
    length = None
    for i, t in enumerate(tensors, 1):
        if t.ndim <= dim:
            raise MgpuError(f"argument {i} of mg.map is {t.ndim}-D and cannot be split along dim {dim}")
        if length is None:
            length, first = t.shape[dim], i
        elif t.shape[dim] != length:
            what = "rows" if dim == 0 else f"entries along dim {dim}"
            raise MgpuError(
                f"mg.map needs inputs of the same length along dim {dim}: argument {first} has "
                f"{length} {what} but argument {i} has {t.shape[dim]}"
            )
    return length or 0


def _rows(table: list[pl.ShardInfo], rank: int, dim: int) -> str:
    a, b = table[rank].ranges[dim]
    what = "rows" if dim == 0 else f"indices along dim {dim}"
    return f"no {what}" if a == b else f"{what} {a}–{b - 1}"


def _failure(name: str, failures: dict[int, dict[str, Any]], table: list[pl.ShardInfo], dim: int) -> RankError:
    r = min(failures)
    f = failures[r]
    others = sorted(x for x in failures if x != r)
    also = f"; rank{'s' if len(others) > 1 else ''} {', '.join(str(x) for x in others)} failed too" if others else ""
    if f["stage"] == "unpickle":
        msg = (
            f"{name} cannot be loaded on rank {r} ({f['ename']}: {f['message']}); define it in the notebook "
            f"or make its module importable on the engines{also}"
        )
    else:
        msg = f"{name} raised {f['ename']} on rank {r} ({_rows(table, r, dim)}): {f['message']}{f['line']}{also}"
    return RankError(msg, sorted(failures), failures)


def _reduce(values: list[Any], how: str | None, weights: list[int]) -> Any:
    import numpy as np
    import torch

    if how is None:
        return values
    if how == "concat":
        if all(isinstance(v, torch.Tensor) for v in values):
            return torch.cat([v.reshape(1) if v.dim() == 0 else v for v in values])
        if all(isinstance(v, np.ndarray) for v in values):
            return np.concatenate([np.atleast_1d(v) for v in values])
        if all(isinstance(v, (list, tuple)) for v in values):
            return [x for v in values for x in v]
        return list(values)
    pairs = [(v, w) for v, w in zip(values, weights) if w > 0] or list(zip(values, weights))
    try:
        total = pairs[0][0]
        if how == "sum":
            for v, _ in pairs[1:]:
                total = total + v
            return total
        n = sum(w for _, w in pairs) or 1
        total = pairs[0][0] * pairs[0][1]
        for v, w in pairs[1:]:
            total = total + v * w
        return total / n
    except TypeError as exc:
        raise MgpuError(
            f"reduce={how!r} cannot combine the per-rank results ({exc}); "
            "return numbers or tensors, or use reduce='concat'"
        ) from None


def map(
    fn: Callable[..., Any], *tensors: DistTensor, reduce: str | None = None, placement: Any = None, **kwargs: Any
) -> Any:
    """Call ``fn(*local_shards, **kwargs)`` on every rank (under ``torch.no_grad()``); a DistTensor of the
    results, or their values.

    Sharded inputs must have the same length along the shard dim and are re-sharded to one
    placement (``placement``, else the first sharded input's) when they differ; replicated inputs
    are sliced the same way when they are as long as the sharded ones, else passed whole (a weight,
    a query vector). If every rank returns a tensor whose pieces form one evenly split tensor, the
    result is a DistTensor sharded the same way (nothing moves to the controller). Otherwise, or with
    ``reduce``, the per-rank values come back: ``None`` → a list in rank order, ``"sum"``,
    ``"mean"`` (weighted by each rank's rows: right for per-shard means) or ``"concat"``.
    """
    if reduce not in REDUCTIONS:
        raise MgpuError(f"reduce must be None, 'sum', 'mean' or 'concat', got {reduce!r}")
    if not tensors:
        raise MgpuError("mg.map needs at least one DistTensor to map over")
    for i, t in enumerate(tensors, 1):
        if not isinstance(t, DistTensor):
            raise MgpuError(
                f"argument {i} of mg.map is a {type(t).__name__}, not a DistTensor; distribute it "
                "with mg.scatter / mg.from_numpy, or pass plain values as keyword arguments"
            )
    for k, v in kwargs.items():
        if isinstance(v, DistTensor):
            raise MgpuError(f"keyword {k}= is a DistTensor; pass DistTensors as positional arguments")
    s = session_of(*tensors)
    name = function_name(fn)
    if not callable(fn):
        raise MgpuError(f"mg.map needs a function to call on each rank's shards, got {type(fn).__name__}")
    shipped = ShippedFunction(fn)
    target = _target(tensors, placement)
    sharded = [t for t in tensors if not isinstance(t.placement, pl.Replicate)]
    first = sharded[0] if sharded else tensors[0]
    target = pl.Shard(target.dim + first.ndim if target.dim < 0 else target.dim)
    length = _check_lengths(tuple(sharded), target.dim)
    # a replicated input as long as the sharded ones is aligned too; any other is passed whole
    aligned = {
        id(t)
        for t in tensors
        if not isinstance(t.placement, pl.Replicate) or (t.ndim > target.dim and t.shape[target.dim] == length)
    }
    table = pl.shard_table(first.shape, target, s.world_size)
    temporary: list[DistTensor] = []
    inputs = []
    try:
        for t in tensors:
            if id(t) not in aligned or t.placement == target:
                inputs.append(t)
            else:
                moved = t.redistribute(target)
                temporary.append(moved)
                inputs.append(moved)
        out = new_handle(s, (0,), "float32", target)
        keep = reduce is None
        ids = [t.handle_id for t in inputs]
        try:
            results = s.run(rank_map.apply, shipped, ids, out.handle_id, keep, kwargs, label=f"mg.map {name}")
        except BaseException:
            out._state = "freed"
            s.run(rank_tensor.free, [out.handle_id], label="free")
            raise
        failures = {r: res for r, res in enumerate(results) if not res["ok"]}
        if failures:
            out._state = "freed"
            s.run(rank_tensor.free, [out.handle_id], label="free")
            raise _failure(name, failures, table, target.dim)
        handle = _as_tensor(out, results, target, name) if keep else None
        if handle is not None:
            return handle
        out._state = "freed"
        values = [res["value"] for res in results]
        stored = [r for r, res in enumerate(results) if keep and res["result"]["kind"] == "tensor"]
        if stored:
            taken = s.run(rank_map.take, out.handle_id, targets=stored, label="mg.map results")
            for r, v in zip(stored, taken):
                values[r] = v
        return _reduce(values, reduce, [info.shape[target.dim] if info.shape else 0 for info in table])
    finally:
        for t in temporary:
            t.free()


def _as_tensor(out: DistTensor, results: list[dict[str, Any]], target: pl.Shard, name: str) -> DistTensor | None:
    """Turn the stored per-rank results into ``out`` if they form one evenly split tensor, else None."""

    infos = [res["result"] for res in results]
    if any(i["kind"] != "tensor" for i in infos):
        return None
    shapes = [tuple(i["shape"]) for i in infos]
    dtypes = {i["dtype"] for i in infos}
    if len(dtypes) > 1 or len({len(sh) for sh in shapes}) > 1:
        raise_uneven(out, name, shapes, dtypes)
    # pieces join along the input's shard dim; a result with fewer dims (a reduction) along its last
    d = target.dim if len(shapes[0]) > target.dim else len(shapes[0]) - 1
    target = pl.Shard(d)
    rest = {sh[:d] + sh[d + 1 :] for sh in shapes}
    if len(rest) > 1:
        raise_uneven(out, name, shapes, dtypes)
    total = sum(sh[d] for sh in shapes)
    shape = shapes[0][:d] + (total,) + shapes[0][d + 1 :]
    expected = [i.shape for i in pl.shard_table(shape, target, len(shapes))]
    if expected != shapes:
        raise_uneven(out, name, shapes, dtypes)
    out.shape = shape
    out.placement = target
    out.dtype_name = dtype_name(dtypes.pop())
    return out


def raise_uneven(out: DistTensor, name: str, shapes: list[tuple[Any, ...]], dtypes: set[str]) -> None:
    out._state = "freed"
    out.session.run(rank_tensor.free, [out.handle_id], label="free")
    detail = ", ".join(f"{sh}" for sh in shapes)
    kinds = f" and dtypes {', '.join(sorted(dtypes))}" if len(dtypes) > 1 else ""
    raise MgpuError(
        f"{name} returned pieces of shapes {detail}{kinds} on ranks 0–{len(shapes) - 1}, which do not "
        "form one evenly split tensor; pass reduce='concat' to collect them in the controller"
    )
