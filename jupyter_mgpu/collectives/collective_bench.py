"""``mg.bench``: time collectives on the ranks with the conventions of nccl-tests.

``mg.bench(["all_reduce", "all_gather"], sizes="1K:16M", iters=20)`` runs every collective at every
size on the engines (warm-up iterations, a barrier before each timed iteration, the slowest rank's
time, algbw, busbw, ``#wrong``) and returns a :class:`BenchResult`: its repr is the nccl-tests style
table, ``.figure()`` the plotly busbw-vs-size plot. See ``ops/collective_bench.py`` for the
definitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.ops import collective_bench as cb
from jupyter_mgpu.ops import collective_run as coll
from jupyter_mgpu.session import lifecycle as sessmod

BENCH_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")


class BenchResult:
    """Rows of a benchmark run (one per collective and size) with their table and plot."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        world_size: int,
        backend: str,
        dtype: str,
        op: str,
        root: int,
        iters: int,
        warmup: int,
    ):
        self.rows, self.world_size, self.backend = rows, world_size, backend
        self.dtype, self.op, self.root, self.iters, self.warmup = dtype, op, root, iters, warmup

    @property
    def wrong(self) -> int:
        """Wrong result elements over every row (0 when every collective was correct)."""
        return sum(r["wrong"] for r in self.rows)

    def table(self) -> str:
        """The nccl-tests style text table."""
        from jupyter_mgpu.widgets.bench_table import table_text

        return table_text(self)

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        from jupyter_mgpu.widgets.bench_table import table_html

        return table_html(self)

    def figure(self) -> Any:
        """A plotly figure of busbw (GB/s) against size, one line per collective."""
        from jupyter_mgpu.widgets.bench_table import busbw_figure

        return busbw_figure(self)

    def svg(self) -> str:
        """The busbw plot as plain SVG (the static image of exported notebooks; no kaleido needed)."""
        from jupyter_mgpu.widgets.bench_table import busbw_svg

        return busbw_svg(self)

    def show(self, plot: bool = True) -> None:
        """Display the table and (``plot``) the busbw plot: interactive plotly, with an SVG fallback."""
        import json

        from IPython.display import display

        display(self)
        if plot:
            fig = json.loads(self.figure().to_json())
            fig["config"] = {"displaylogo": False}
            display(
                {
                    "application/vnd.plotly.v1+json": fig,
                    "image/svg+xml": self.svg(),
                    "text/plain": f"<busbw plot of {len(self.rows)} rows>",
                },
                raw=True,
            )


def _names(collectives: Any) -> list[str]:
    if isinstance(collectives, str):
        collectives = collectives.replace(",", " ").split()
    names = []
    for c in collectives:
        try:
            name = coll.canonical_name(c)
        except ValueError as exc:
            raise MgpuError(str(exc)) from None
        if name not in cb.BENCHMARKS:
            raise MgpuError(f"no benchmark for {name}; choose from {', '.join(cb.BENCHMARKS)}")
        names.append(name)
    if not names:
        raise MgpuError("name at least one collective to benchmark, such as all_reduce")
    return list(dict.fromkeys(names))


def _whole(value: Any, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise MgpuError(f"{what} must be a whole number ≥ {low}, got {value!r}")
    return value


def bench(
    collectives: Iterable[str] | str = ("all_reduce",),
    sizes: Any = "1K:1M",
    *,
    factor: float = 2,
    iters: int = 20,
    warmup: int = 5,
    dtype: str = "float32",
    op: str = "sum",
    root: int = 0,
    session: Any = None,
    corrupt: int | None = None,
) -> BenchResult:
    """Benchmark ``collectives`` at ``sizes`` (``"1K:256M"`` doubles from 1 KiB to 256 MiB) on every rank.

    ``corrupt=r`` damages one result element on rank r before the check (to see ``#wrong`` work).
    """
    s = session or sessmod.current()
    n = s.world_size
    names = _names(collectives)
    try:
        size_list = cb.size_range(sizes, factor)
        op = coll.canonical_op(op)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None
    _whole(iters, "iters", 1)
    _whole(warmup, "warmup", 0)
    if dtype not in BENCH_DTYPES:
        raise MgpuError(f"unknown dtype {dtype!r}; choose one of {', '.join(BENCH_DTYPES)}")
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < n:
        raise MgpuError(f"root rank {root!r} is out of range: this session has ranks 0-{n - 1}")
    if corrupt is not None and (isinstance(corrupt, bool) or not isinstance(corrupt, int) or not 0 <= corrupt < n):
        raise MgpuError(f"corrupt must be a rank 0-{n - 1}, got {corrupt!r}")
    if op == "avg" and dtype.startswith("int"):
        raise MgpuError("op avg needs a floating-point dtype; use --dtype float32")
    try:
        coll.check_backend_op(s.backend, op)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None
    per_rank = s.run(cb.bench_rank, names, size_list, iters, warmup, dtype, op, root, corrupt, label="mgpu_bench")
    elem = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2}[dtype]
    rows = []
    for i, rec in enumerate(per_rank[0]):
        row = cb.summarize(
            rec["name"],
            rec["size"],
            rec["count"],
            elem,
            n,
            [recs[i]["times"] for recs in per_rank],
            [recs[i]["wrong"] for recs in per_rank],
        )
        row.update(
            dtype=dtype,
            redop=op if rec["name"] in coll.REDUCING else "none",
            root=root if rec["name"] in coll.ROOTED else -1,
        )
        rows.append(row)
    return BenchResult(rows, n, s.backend, dtype, op, root, iters, warmup)
