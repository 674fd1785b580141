"""DistTensor: a controller-side handle to a tensor whose shards live in the engines' shard stores.

``mg.randn(30000, 30000, placement=mg.Shard(0), seed=0)`` creates the shards on the ranks (never
on the controller); the global tensor is the same whatever the world size. ``mg.scatter`` and
``dt.gather`` move data through shared memory (see ``transfer``), not through ipyparallel.
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
import threading
from typing import Any, Sequence

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.tensors import process_copy as remote_copy
from jupyter_mgpu.tensors import shared_blocks as transfer
from jupyter_mgpu.session import core as sessmod
from jupyter_mgpu.devices import format_bytes
from jupyter_mgpu.errors import EngineDiedError, MgpuError
from jupyter_mgpu.ops import dist_tensor as shards
from jupyter_mgpu.tensors import sockets as remote_streams

_ids = itertools.count(1)
DTYPES = ("float64", "float32", "bfloat16", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def dtype_name(dtype: Any, default: str = "float32") -> str:
    """``torch.float32`` / ``"float32"`` / ``"fp32"`` -> ``"float32"``; a clear error for anything else."""
    if dtype is None:
        return default
    name = str(dtype).replace("torch.", "")
    name = {"fp32": "float32", "fp64": "float64", "double": "float64", "float": "float32", "bf16": "bfloat16",
            "fp16": "float16", "half": "float16", "long": "int64", "int": "int32"}.get(name, name)
    if name not in DTYPES:
        raise MgpuError(f"unsupported dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return name


def _shape(shape: Sequence[Any]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise MgpuError(f"shape must be whole numbers, got {shape!r}") from None
    if any(isinstance(s, bool) or int(s) != s for s in shape) or any(s < 0 for s in out):
        raise MgpuError(f"shape must be non-negative whole numbers, got {shape!r}")
    return out


def _placement(placement: Any, ndim: int, world_size: int) -> pl.Placement:
    if placement is None:
        placement = pl.Shard(0) if ndim else pl.Replicate()
    try:
        return pl.normalize(placement, ndim, world_size)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None


class DistTensor:
    """A handle to a global tensor split over the ranks of one session (see ``placement``)."""

    def __init__(self, session: Any, handle_id: str, shape: tuple[int, ...], dtype: str, placement: pl.Placement):
        self.session = session
        self.handle_id = handle_id
        self.shape = tuple(shape)
        self.dtype_name = dtype
        self.placement = placement
        self.plan: Any = None
        self.report: Any = None
        self._state = "live"
        self._in_blocks = False  # made by scatter: its shards are blocks the kernel can read directly
        session.handles[handle_id] = self

    # -- facts ----------------------------------------------------------------------------
    @property
    def dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def itemsize(self) -> int:
        return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2,
                "int16": 2}.get(self.dtype_name, 1)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def world_size(self) -> int:
        return self.session.world_size

    @property
    def table(self) -> list[pl.ShardInfo]:
        """The shard table: per rank its index ranges and local shape."""
        return pl.shard_table(self.shape, self.placement, self.world_size)

    @property
    def local_shapes(self) -> list[tuple[int, ...]]:
        return [s.shape for s in self.table]

    @property
    def bytes_per_rank(self) -> list[int]:
        return [s.numel * self.itemsize for s in self.table]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def __repr__(self) -> str:
        state = "" if self._state == "live" else f", {self._state}"
        head = (f"DistTensor(shape={self.shape}, dtype={self.dtype_name}, placement={self.placement.label}, "
                f"{self.world_size} ranks{state})")
        rows = [f"  rank {s.rank}: local {s.shape}, {format_bytes(b)}" for s, b in zip(self.table, self.bytes_per_rank)]
        return "\n".join([head] + rows)

    def _repr_html_(self) -> str:
        """The notebook repr: the placement diagram (blocks coloured by rank) above the text summary."""
        from jupyter_mgpu.widgets.placement import tensor_html

        return tensor_html(self)

    # -- lifetime -------------------------------------------------------------------------
    def check(self) -> None:
        """Raise a clear error if this handle can no longer be used."""
        if self._state == "freed":
            raise MgpuError(f"tensor {self.handle_id} was freed; create it again")
        if self._state == "invalid" or not self.session.alive:
            raise MgpuError(f"tensor {self.handle_id} belongs to a session that was shut down; "
                            "its shards are gone — create it again in the current session")
        dead = self.session.cluster.exits()
        if dead:  # never hand out partial or stale data
            from jupyter_mgpu.cluster.local import describe_exit

            rank = min(dead)
            raise EngineDiedError(f"shard lost on rank {rank} of tensor {self.handle_id}: "
                                  f"{describe_exit(rank, dead[rank])}, then create the tensor again", ranks=sorted(dead))

    def _invalidate(self) -> None:
        """Called at session shutdown: the shards died with the engines."""
        if self._state == "live":
            self._state = "invalid"

    def free(self) -> None:
        """Free every shard on the ranks now (``del`` does this too)."""
        if self._state != "live":
            return
        self._state = "freed"
        if self.session.alive:
            self.session.run(shards.free, [self.handle_id], label="free")

    def __del__(self) -> None:
        try:
            if self._state != "live" or sys.is_finalizing() or not self.session.alive:
                return
            self._state = "freed"
            pending = self.session.__dict__.setdefault("_mgpu_pending_free", [])
            pending.append(self.handle_id)
            if threading.current_thread() is threading.main_thread():
                flush_frees(self.session, block=False)
        except Exception:  # never raise from a finalizer
            pass

    # -- data movement --------------------------------------------------------------------
    def gather(self, out: Any = None) -> Any:
        """The global tensor on the controller, each shard copied once into its place (no concatenation).

        On CPU virtual devices the kernel reads every shard in place on its rank, into a new tensor or
        into ``out`` (a contiguous CPU tensor of the right shape and dtype). Elsewhere the ranks write
        into one shared buffer, which becomes the result (without ``out``) or is copied into ``out``.
        """
        self.check()
        if out is not None:
            import torch

            if not isinstance(out, torch.Tensor) or tuple(out.shape) != self.shape or out.dtype != self.dtype \
                    or out.device.type != "cpu" or not out.is_contiguous():
                raise MgpuError(f"out= must be a contiguous CPU tensor of shape {self.shape} and dtype "
                                f"{self.dtype_name}, got {getattr(out, 'shape', type(out).__name__)}")
        flush_frees(self.session)
        streamed = remote_streams.streamed_ranks(self.session)
        if streamed:  # ranks on other hosts: their shards come over sockets (tensors/sockets.py)
            return remote_streams.gather(self, out, streamed)
        numel = math.prod(self.shape)
        nbytes = numel * self.itemsize
        traced = False
        if remote_copy.usable(self.session):  # each shard read in place, straight into its place in the result
            where = self.session.run(shards.gather_address, self.handle_id, self.shape, self.placement,
                                     label="gather")
            traced = True
            if all(w is not None for w in where):
                result = out if out is not None else transfer.new_tensor(self.shape, self.dtype)
                try:
                    remote_copy.read([(w["pid"], w["addr"], result[info.index])
                                      for info, w in zip(self.table, where) if w])
                    return result
                except remote_copy.Denied:
                    remote_copy.disable(self.session)
        where = self.session.run(shards.gather_locate, self.handle_id, self.shape, self.placement,
                                 label="gather", trace=not traced) if self._in_blocks else [None]
        if all(w is not None for w in where):  # every shard lies in a block the kernel can read
            result = out if out is not None else transfer.new_tensor(self.shape, self.dtype)
            maps = transfer.rank_blocks(self.session)
            for info, meta in zip(self.table, where):
                if meta:
                    result[info.index].copy_(maps.view(info.rank, meta, self.dtype, info.shape, meta["offset"]))
            return result
        traced = traced or self._in_blocks  # gather_address / gather_locate traced this gather already
        if out is None:  # the ranks write into fresh shared pages that become the result
            with transfer.one_off(nbytes) as buf:
                self.session.run(shards.gather_to_file, self.handle_id, buf.path, self.shape, self.placement,
                                 not traced, label="gather")
                flat = buf.tensor(numel, self.dtype)
            return flat.view(self.shape)
        with transfer.staging(nbytes) as buf:  # warm pages, then one copy into out
            self.session.run(shards.gather_to_file, self.handle_id, buf.path, self.shape, self.placement,
                             not traced, label="gather")
            out.copy_(buf.tensor(numel, self.dtype).view(self.shape))
        return out

    def redistribute(self, placement: Any) -> "DistTensor":
        """The same global tensor in another placement (a new handle; this one is unchanged)."""
        self.check()
        target = _placement(placement, self.ndim, self.world_size)
        if target == self.placement:
            return self
        flush_frees(self.session)
        new = _new_handle(self.session, self.shape, self.dtype_name, target)
        _run_creating(new, shards.redistribute, self.handle_id, new.handle_id, self.shape, self.placement, target,
                      label="redistribute")
        return new

    def __matmul__(self, other: "DistTensor") -> "DistTensor":
        from jupyter_mgpu.tensors.sharded_matmul import matmul

        return matmul(self, other)

    def local(self, rank: int = 0) -> Any:
        """A CPU copy of rank ``rank``'s shard (for inspection of small tensors)."""
        self.check()
        return self.session.run(shards.local_copy, self.handle_id, targets=rank, label="local")[0]


def flush_frees(session: Any, block: bool = True) -> None:
    """Free shards of handles that were garbage-collected (queued by ``__del__``)."""
    pending = session.__dict__.get("_mgpu_pending_free")
    if not pending or not session.alive:
        return
    ids = list(pending)
    del pending[:]
    try:
        session.run(shards.free, ids, block=block, label="free")
    except Exception:
        pass


def _new_handle(session: Any, shape: tuple[int, ...], dtype: str, placement: pl.Placement) -> DistTensor:
    return DistTensor(session, f"t{session.id}.{next(_ids)}", shape, dtype, placement)


def _run_creating(handle: DistTensor, fn: Any, *args: Any, label: str) -> list[Any]:
    """Run a rank function that stores ``handle``'s shards; on any failure free what was made."""
    try:
        return handle.session.run(fn, *args, label=label)
    except BaseException:
        handle._state = "freed"
        try:
            handle.session.run(shards.free, [handle.handle_id], label="free")
        except Exception:
            pass
        raise


def session_of(*tensors: Any, session: Any = None) -> Any:
    """The one live session all ``tensors`` belong to; clear errors for mixed or dead sessions."""
    for t in tensors:
        if not isinstance(t, DistTensor):
            raise MgpuError(f"expected a DistTensor, got {type(t).__name__}; use mg.scatter(tensor) to distribute it")
        t.check()
    sessions = {id(t.session): t.session for t in tensors}
    if len(sessions) > 1:
        raise MgpuError("these tensors belong to different sessions; create them in one session")
    s = tensors[0].session if tensors else (session or sessmod.current())
    if session is not None and s is not session:
        raise MgpuError("this tensor belongs to another session than the one given")
    s.check_alive()
    return s


def _split_args(args: Sequence[Any], placement: Any, dtype: Any, seed: Any) -> tuple:
    """Accept ``(3, 4)``, ``((3, 4),)`` and ``((3, 4), placement, dtype, seed)`` positionally, like torch."""
    args = tuple(args)
    if args and isinstance(args[0], (tuple, list)):
        shape, rest = args[0], args[1:]
    else:
        n = 0
        while n < len(args) and isinstance(args[n], numbers.Integral) and not isinstance(args[n], bool):
            n += 1
        shape, rest = args[:n], args[n:]
    if len(rest) > 3:
        raise MgpuError(f"too many positional arguments: {rest!r}; use shape, placement, dtype, seed")
    named = [placement, dtype, seed]
    for i, value in enumerate(rest):
        if named[i] is not None and i != 2:
            raise MgpuError(f"{('placement', 'dtype', 'seed')[i]} given twice")
        named[i] = value
    if rest and not isinstance(named[0], (pl.Shard, pl.Replicate, pl.Block2D)):
        raise MgpuError(f"shape must be whole numbers, got {args!r}")
    return (tuple(shape), *named)


def _create(kind: str, shape: Sequence[Any], placement: Any, dtype: Any, seed: int | None,
            session: Any, default_dtype: str = "float32") -> DistTensor:
    shape, placement, dtype, seed = _split_args(shape, placement, dtype, seed)
    s = session or sessmod.current()
    s.check_alive()
    shape = _shape(shape)
    dt = dtype_name(dtype, default_dtype)
    if kind in ("randn", "rand") and not dt.startswith(("float", "bfloat")):
        raise MgpuError(f"{kind} makes floating-point tensors, not {dt}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise MgpuError(f"seed must be a non-negative whole number, got {seed!r}")
    target = _placement(placement, len(shape), s.world_size)
    flush_frees(s)
    h = _new_handle(s, shape, dt, target)
    _run_creating(h, shards.create, h.handle_id, kind, shape, target, dt, seed, label=f"mg.{kind}")
    return h


def randn(*shape: Any, placement: Any = None, dtype: Any = None, seed: int = 0, session: Any = None) -> DistTensor:
    """A standard-normal tensor made on the ranks; the same global values for any world size."""
    return _create("randn", shape, placement, dtype, seed, session)


def rand(*shape: Any, placement: Any = None, dtype: Any = None, seed: int = 0, session: Any = None) -> DistTensor:
    """A uniform [0, 1) tensor made on the ranks; the same global values for any world size."""
    return _create("rand", shape, placement, dtype, seed, session)


def zeros(*shape: Any, placement: Any = None, dtype: Any = None, session: Any = None) -> DistTensor:
    """A tensor of zeros made on the ranks."""
    return _create("zeros", shape, placement, dtype, None, session)


def ones(*shape: Any, placement: Any = None, dtype: Any = None, session: Any = None) -> DistTensor:
    """A tensor of ones made on the ranks."""
    return _create("ones", shape, placement, dtype, None, session)


def arange(*shape: Any, placement: Any = None, dtype: Any = None, session: Any = None) -> DistTensor:
    """Each element holds its flat (row-major) global index; int64 unless ``dtype`` says otherwise."""
    return _create("arange", shape, placement, dtype, None, session, default_dtype="int64")


def scatter(tensor: Any, placement: Any = None, session: Any = None) -> DistTensor:
    """Distribute a controller tensor (torch or numpy) to the ranks through shared memory."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        try:
            tensor = torch.as_tensor(tensor)
        except Exception:
            raise MgpuError(f"scatter needs a torch tensor or an array, got {type(tensor).__name__}") from None
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    s = session or sessmod.current()
    s.check_alive()
    dt = dtype_name(tensor.dtype)
    target = _placement(placement, tensor.dim(), s.world_size)
    flush_frees(s)
    h = _new_handle(s, tuple(tensor.shape), dt, target)
    table = pl.shard_table(h.shape, target, s.world_size)
    streamed = remote_streams.streamed_ranks(s)
    if streamed:  # ranks on other hosts get their slices over sockets (tensors/sockets.py)
        return remote_streams.scatter(h, tensor, table, streamed)
    if remote_copy.usable(s) and all(remote_copy.direct_ok(tensor[info.index]) for info in table):
        # the ranks make their shards on private blocks; the kernel writes each slice straight in
        where = _run_creating(h, shards.scatter_place, h.handle_id, h.shape, target, dt, label="scatter")
        try:
            remote_copy.write([(m["pid"], m["addr"], tensor[info.index]) for info, m in zip(table, where) if m])
        except remote_copy.Denied:  # this system forbids copies by address: shared blocks from now on
            h.free()
            remote_copy.disable(s)
            return scatter(tensor, placement, s)
        except BaseException:
            if s.alive:
                try:
                    h.free()
                except Exception:
                    pass
            raise
        h._in_blocks = True
        return h
    if s.device_kind == "cpu":  # one copy, straight into the ranks' shared shard blocks
        try:
            blocks = s.run(shards.scatter_reserve, h.shape, target, dt, label="scatter")
            maps = transfer.rank_blocks(s)
            for info, meta in zip(table, blocks):
                if meta:
                    maps.view(info.rank, meta, tensor.dtype, info.shape).copy_(tensor[info.index])
        except BaseException:
            if s.alive:
                try:
                    s.run(shards.scatter_abandon, label="scatter")
                except Exception:
                    pass
            raise
        ids = [b["id"] if b else None for b in blocks]
        _run_creating(h, shards.scatter_adopt, h.handle_id, ids, h.shape, target, dt, label="scatter")
        h._in_blocks = True
        return h
    with transfer.staging(tensor.numel() * tensor.element_size()) as buf:
        buf.tensor(tensor.numel(), tensor.dtype).view(tensor.shape).copy_(tensor)
        _run_creating(h, shards.scatter_from_file, h.handle_id, buf.path, h.shape, target, dt, label="scatter")
    return h


def empty_cache(session: Any = None) -> int:
    """Free the shard blocks the ranks keep for reuse (like ``torch.cuda.empty_cache``); bytes released."""
    s = session or sessmod.current()
    s.check_alive()
    done = s.run(shards.empty_cache, label="empty_cache")
    maps = transfer.rank_blocks(s)
    for rank, d in enumerate(done):
        maps.forget(rank, d["evicted"])
    return sum(d["released"] for d in done)


def bind_handles(user_ns: dict, code: str, session: Any) -> list[str]:
    """Make the DistTensors a ``%%mgpu`` cell names usable there (``mgpu.local(A)``); returns the names."""
    import re

    refs = {}
    for name in set(re.findall(r"\b[A-Za-z_]\w*\b", code)):
        value = user_ns.get(name)
        if isinstance(value, DistTensor) and value.session is session and value._state == "live":
            refs[name] = (value.handle_id, value.shape, value.placement.label)
    if refs:
        from jupyter_mgpu.engine import shard_store as store

        session.run(store.bind_names, refs, label="bind names")
    return sorted(refs)
