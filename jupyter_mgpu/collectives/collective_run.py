"""``mg.collective``: run one torch.distributed collective on every rank and see it.

``r = mg.collective("all_reduce", op="max")`` runs the real collective on the engines — on demo
tensors (rank r holds a disk/square/ring/… of value r+1), on a function ``rank -> tensor``, or on a
``DistTensor`` (each rank's local shard) — and returns a :class:`CollectiveResult` whose ``before`` /
``after`` lists (one entry per rank) were captured on the ranks. It shows itself as the
before/after figure (SVG, also the static image of an exported notebook); ``r.animation()`` is the
step-by-step logical schedule. Bad input is refused with one sentence before any collective starts
(names, ops and ranks here; the inputs the ranks built by the ranks themselves, all agreeing, in the
same round trip that runs the collective), so the process group stays usable.

The other half: ``ops/collective_run.py``, its rank side.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from jupyter_mgpu.engine.execution.shipped_function import ship
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.ops import collective_run as coll
from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.ops import demo_inputs
from jupyter_mgpu.ops.holdings import holdings_equal
from jupyter_mgpu.session import lifecycle as sessmod

MAX_CAPTURE_BYTES = 64 << 20  # per rank: the view copies inputs and outputs to the notebook
_run_ids = itertools.count(1)  # names each run in the ranks' traces
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int16", "int8", "uint8")


SENDING_ROOT = ("broadcast", "scatter")  # torch names their root src; reduce and gather name it dst


def _check_name_op_root(name: str, op: Any, src: Any, dst: Any, world_size: int) -> tuple[str, str, int]:
    """Canonical name and op, and the root rank, accepting torch's names for it: ``src`` for
    broadcast/scatter, ``dst`` for reduce/gather (``src`` stays accepted for every collective)."""
    try:
        name = coll.canonical_name(name)
        op = coll.canonical_op(op)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None
    if dst is not None and name in SENDING_ROOT:
        raise MgpuError(f"{name} takes its root as src (torch.distributed.{name}(..., src=0)), not dst")
    if dst is not None and src is not None and dst != src:
        raise MgpuError(f"give the root of {name} once: src={src!r} and dst={dst!r} differ")
    key, root = ("dst", dst) if dst is not None else ("src", 0 if src is None else src)
    if isinstance(root, bool) or not isinstance(root, int):
        raise MgpuError(f"{key} must be a rank number, got {root!r}")
    if not 0 <= root < world_size:
        raise MgpuError(f"{key} rank {root} is out of range: this session has ranks 0-{world_size - 1}")
    return name, op, root


def _input_spec(inputs: Any, shape: Any, dtype: str, s: Any) -> tuple[tuple[Any, ...], str]:
    """The rank-side description of ``inputs`` and a short text naming it."""
    if inputs is None:
        try:
            dims = demo_inputs.parse_shape(shape)
        except ValueError as exc:
            raise MgpuError(str(exc)) from None
        if dtype not in DTYPES:
            raise MgpuError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return ("demo", dims, dtype), f"demo shapes {'x'.join(map(str, dims))}"
    try:
        from jupyter_mgpu.tensors.dist_tensor import DistTensor

        is_handle = isinstance(inputs, DistTensor)
    except ImportError:  # pragma: no cover - tensor handles are part of the package
        is_handle = False
    if is_handle:
        inputs.check()
        if inputs.session is not s:
            raise MgpuError(
                f"tensor {inputs.handle_id} belongs to another session than the one running this collective"
            )
        return ("shard", inputs.handle_id), f"local shards of {inputs.handle_id}"
    if callable(inputs):
        return ("fn", ship(inputs)), f"{getattr(inputs, '__name__', 'function')}(rank)"
    if isinstance(inputs, (list, tuple)):
        if len(inputs) != s.world_size:
            raise MgpuError(f"a list of inputs needs one tensor per rank ({s.world_size}), got {len(inputs)}")
        return ("value", list(inputs)), "tensors from the notebook"
    raise MgpuError(
        f"inputs must be a function rank -> tensor, a DistTensor or one tensor per rank, got {type(inputs).__name__}"
    )


class CollectiveResult:
    """One collective run: ``before``/``after`` (one entry per rank, captured on the ranks), timing, views.

    An entry is a tensor, a list of tensors (list-valued collectives: all_gather's output, the chunks
    reduce_scatter/all_to_all/scatter split the input into), or ``None`` where a rank receives or sends
    nothing (non-root ranks of reduce and gather, non-root ranks before scatter).
    """

    def __init__(
        self,
        name: str,
        op: str | None,
        src: int | None,
        inputs: list[Any],
        before: list[Any],
        after: list[Any],
        seconds: float,
        backend: str,
        what: str,
    ):
        self.name, self.op, self.src = name, op, src
        self.inputs, self.before, self.after = inputs, before, after
        self.seconds, self.backend, self.what = seconds, backend, what
        self._svg: str | None = None  # drawn once: a notebook shows it as SVG and as HTML
        self._passes: Any = None  # the tracked schedule, shared by the figure and the player

    @property
    def world_size(self) -> int:
        return len(self.inputs)

    def __repr__(self) -> str:
        op = f", op={self.op}" if self.op else ""
        key = "src" if self.name in SENDING_ROOT else "dst"
        src = f", {key}={self.src}" if self.src is not None else ""
        shape = tuple(self.inputs[0].shape) if self.inputs else ()
        return (
            f"<CollectiveResult {self.name}{op}{src} on {self.world_size} ranks, inputs {shape} "
            f"{str(self.inputs[0].dtype).replace('torch.', '') if self.inputs else ''}, "
            f"{self.seconds * 1e3:.2f} ms>"
        )

    # -- pictures ---------------------------------------------------------------------------
    def svg(self) -> str:
        """The before/after figure as an SVG document (also the static image for exported notebooks)."""
        from jupyter_mgpu.widgets.collective_view import before_after_svg

        if self._svg is None:
            self._svg = before_after_svg(
                self.name, self.op, self.src, self.inputs, self.after, self.backend, self.seconds, self._tracked()
            )
        return self._svg

    def _tracked(self) -> Any:
        """The logical schedule on tracked inputs (run once)."""
        from jupyter_mgpu.widgets.collective_view import tracked_passes

        if self._passes is None:
            self._passes = tracked_passes(self.name, self.op, self.src, self.inputs)
        return self._passes

    def _repr_svg_(self) -> str:
        return self.svg()

    def _repr_html_(self) -> str:
        return f"<div class='mgpu-collective' style='overflow-x:auto'>{self.svg()}</div>"

    def save(self, path: str) -> str:
        """Write the before/after figure to ``path`` (SVG) and return the path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.svg())
        return path

    def schedule(self) -> list[sched.Frame]:
        """The logical schedule: frame 0 is the inputs, each later frame one step of data movement."""
        return sched.schedule(self.name, self.inputs, self.op or "sum", self.src or 0)

    def schedule_matches(self) -> bool:
        """Whether the logical schedule ends with exactly what the real collective produced."""
        return holdings_equal(self.schedule()[-1].holdings, self.after)

    def animation(self, interval_ms: int = 900) -> Any:
        """A player (play/pause/step) of the logical schedule, labelled as such. Its frames carry only
        what each step changed (``widgets/rank_grid.py``), so it stays light at 64 ranks."""
        from jupyter_mgpu.widgets.collective_view import schedule_series
        from jupyter_mgpu.widgets.player import DiffFramePlayer

        series, captions = schedule_series(self.name, self.op, self.src, self.inputs, self._tracked())
        if not self.schedule_matches():
            captions[-1] += " (differs from the real result: see the before/after figure)"
        return DiffFramePlayer(
            series,
            captions,
            title=f"{self.name} on {self.world_size} ranks",
            badge="logical schedule (not the backend's real algorithm)",
            interval_ms=interval_ms,
            show_captions=False,
        )  # each frame draws its caption

    def show(self, animate: bool = True) -> None:
        """Display the before/after figure and (``animate``) the logical-schedule player."""
        from IPython.display import display

        display(self)
        if animate:
            display(self.animation())


def collective(
    name: str,
    inputs: Any = None,
    op: str = "sum",
    src: int | None = None,
    shape: Any = None,
    dtype: str = "float32",
    *,
    dst: int | None = None,
    session: Any = None,
    max_bytes: int = MAX_CAPTURE_BYTES,
) -> CollectiveResult:
    """Run collective ``name`` on every rank for real and capture each rank's data before and after.

    ``inputs``: None (demo shapes of ``shape``, default 11x11, value rank+1, ``dtype``), a function
    ``rank -> tensor`` run on each rank, a :class:`~jupyter_mgpu.tensors.dist_tensor.DistTensor` (its local
    shards) or a list of one tensor per rank. ``op`` (sum, product, min, max, avg) is used by
    reduce, all_reduce and reduce_scatter. The root (default 0) is named as torch names it: ``src`` for
    broadcast and scatter, ``dst`` for reduce and gather (``src`` is accepted for those too).
    Every rank's data comes back to the notebook to be drawn, so inputs over ``max_bytes`` per rank
    (64 MiB) are refused; time large sizes with :func:`jupyter_mgpu.collectives.collective_bench`.
    """
    s = session or sessmod.current()
    n = s.world_size
    name, op, src = _check_name_op_root(name, op, src, dst, n)
    if name in coll.REDUCING:
        try:
            coll.check_backend_op(s.backend, op)
        except ValueError as exc:
            raise MgpuError(str(exc)) from None
    spec, what = _input_spec(inputs, shape, dtype, s)
    if spec[0] == "demo" and name in coll.SPLITTING and spec[1][0] % n:
        dims = spec[1]
        good = "x".join(map(str, (math.ceil(dims[0] / n) * n,) + dims[1:]))
        raise MgpuError(
            f"{name} splits dim 0 into {n} equal chunks (one per rank), but the demo shape "
            f"{'x'.join(map(str, dims))} has {dims[0]} rows; use a first dimension that is a "
            f"multiple of {n}, such as shape {good}"
        )
    results = s.run(coll.execute, spec, name, op, src, True, max_bytes, what, next(_run_ids), label=name)
    if results[0].get("problem"):
        raise MgpuError(results[0]["problem"])
    inputs_cpu = [res["before"] for res in results]
    before = [sched.before_entries(name, x, r, src, n) for r, x in enumerate(inputs_cpu)]
    after = [res["after"] for res in results]
    return CollectiveResult(
        name,
        op if name in coll.REDUCING else None,
        src if name in coll.ROOTED else None,
        inputs_cpu,
        before,
        after,
        max(res["seconds"] for res in results),
        s.backend,
        what,
    )


def reference(name: str, inputs: list[Any], op: str = "sum", src: int = 0) -> list[Any]:
    """What every rank should hold after ``name`` on ``inputs`` (the logical schedule's final state)."""
    name = coll.canonical_name(name)
    return sched.final_holdings(name, inputs, coll.canonical_op(op), src)
