"""DistTensor: a controller-side handle to a tensor whose shards live in the engines' shard stores.

``mg.randn(30000, 30000, placement=mg.Shard(0), seed=0)`` creates the shards on the ranks (never
on the controller); the global tensor is the same whatever the world size. ``mg.scatter`` and
``dt.gather`` move data by the paths in ``transfer_paths``, never through ipyparallel.

The other half: ``ops/dist_tensor.py``, its rank side.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.errors import EngineDiedError, MgpuError, rank_list
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout.dtensor_layout import itemsize_of
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import shard_exchange
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.tensors import transfer_paths
from jupyter_mgpu.tensors.handles import check_out, placement_of, queue_free, run_creating
from jupyter_mgpu.units import format_bytes

_ids = itertools.count(1)
# operators implemented where their operation lives (``tensors/sharded_matmul.py`` registers "matmul"
# when it is imported, as the package's API always does): the handle never imports its operations
OPERATORS: dict[str, Callable[..., Any]] = {}


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
        self._lost_on: list[int] = []  # ranks started again since this tensor was made: their shards are gone
        self._in_blocks = False  # made by scatter: its shards are blocks the kernel can read directly
        session.handles[handle_id] = self

    # -- facts ----------------------------------------------------------------------------
    @property
    def dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def itemsize(self) -> int:
        return itemsize_of(self.dtype_name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def world_size(self) -> int:
        size: int = self.session.world_size
        return size

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
        if self._lost_on:
            state = f", shard lost on {rank_list(self._lost_on)} (restarted)"
        head = (
            f"DistTensor(shape={self.shape}, dtype={self.dtype_name}, placement={self.placement.label}, "
            f"{self.world_size} ranks{state})"
        )
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
            raise MgpuError(
                f"tensor {self.handle_id} belongs to a session that was shut down; "
                "its shards are gone — create it again in the current session"
            )
        if self._lost_on:
            raise MgpuError(
                f"tensor {self.handle_id} lost its shard on {rank_list(self._lost_on)} when "
                f"{'it was' if len(self._lost_on) == 1 else 'they were'} started again (mg.restart); make it again: "
                "the cell that made it, or mg.load from a file saved with mg.save"
            )
        dead = self.session.cluster.exits()
        if dead:  # never hand out partial or stale data
            from jupyter_mgpu.cluster.local import describe_exit

            rank = min(dead)
            raise EngineDiedError(
                f"shard lost on rank {rank} of tensor {self.handle_id}: "
                f"{describe_exit(rank, dead[rank])}, then create the tensor again",
                ranks=sorted(dead),
            )

    def _lose(self, ranks: list[int]) -> None:
        """Called by ``mg.restart``: the shards on ``ranks`` died with their old engines."""
        if self._state == "live":
            self._lost_on = sorted(set(self._lost_on) | set(ranks))

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
            self.session.run(rank_tensor.free, [self.handle_id], label="free")

    def __del__(self) -> None:
        # only queued: the shards go with the session's next call, or when the cell ends. A finalizer
        # that made the round trip itself would swallow a stop pressed meanwhile (Python ignores what
        # ``__del__`` raises), and ``for ...: Z = mg.matmul(X, Y); del Z`` then ran on to its end
        try:
            if self._state != "live" or sys.is_finalizing() or not self.session.alive:
                return
            self._state = "freed"
            queue_free(self.session, self.handle_id)
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
        check_out(out, self.shape, self.dtype_name)
        return transfer_paths.fetch(self, out)

    def redistribute(self, placement: Any) -> DistTensor:
        """The same global tensor in another placement (a new handle; this one is unchanged)."""
        self.check()
        target = placement_of(placement, self.ndim, self.world_size)
        if target == self.placement:
            return self
        new = new_handle(self.session, self.shape, self.dtype_name, target)
        run_creating(
            new,
            shard_exchange.redistribute,
            self.handle_id,
            new.handle_id,
            self.shape,
            self.placement,
            target,
            label="redistribute",
        )
        return new

    def __matmul__(self, other: DistTensor) -> DistTensor:
        product: DistTensor = OPERATORS["matmul"](self, other)
        return product

    def to_dtensor(self, name: str, mesh: Any = None, placements: Any = None) -> Any:
        """Bind ``name`` on every rank to a torch DTensor of this tensor; returns its ``mg.from_dtensor`` handle.

        ``mesh``: ``None`` (a 1-D mesh of every rank; 2-D for Block2D), an ``mg.DeviceMesh``, a shape or
        torch's DeviceMesh; ``placements``: one per mesh dim (default: this tensor's split). Where our split
        and DTensor's agree, the DTensor's local tensors are these shards (no copy).
        """
        return OPERATORS["to_dtensor"](self, name, mesh, placements)

    def local(self, rank: int = 0) -> Any:
        """A CPU copy of rank ``rank``'s shard (for inspection of small tensors)."""
        self.check()
        return self.session.run(rank_tensor.local_copy, self.handle_id, targets=rank, label="local")[0]


def new_handle(session: Any, shape: tuple[int, ...], dtype: str, placement: pl.Placement) -> DistTensor:
    """A handle with a fresh id (its shards are made by the caller, see ``run_creating``)."""
    return DistTensor(session, f"t{session.id}.{next(_ids)}", shape, dtype, placement)


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
    assert s is not None  # a tensor has its session; current() raises when no session is running
    if session is not None and s is not session:
        raise MgpuError("this tensor belongs to another session than the one given")
    s.check_alive()
    return s


def bind_handles(user_ns: dict[str, Any], code: str, session: Any) -> list[str]:
    """Make the DistTensors a ``%%mgpu`` cell names usable there (``mgpu.local(A)``); returns the names."""
    import re

    refs = {}
    for name in set(re.findall(r"\b[A-Za-z_]\w*\b", code)):
        value = user_ns.get(name)
        if isinstance(value, DistTensor) and value.session is session and value._state == "live":
            refs[name] = (value.handle_id, value.shape, value.placement.label)
    if refs:
        from jupyter_mgpu.engine.shards import shard_store as store

        session.run(store.bind_names, refs, label="bind names")
    return sorted(refs)
