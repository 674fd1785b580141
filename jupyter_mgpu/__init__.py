"""jupyter_mgpu: several GPUs (or CPU virtual devices) usable and visible from one notebook.

``%load_ext jupyter_mgpu`` then ``%mgpu_init 4``; or from Python ``import jupyter_mgpu as mg;
s = mg.init(4)``.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu._version import __version__
from jupyter_mgpu.collectives.collective_bench import BenchResult, bench
from jupyter_mgpu.collectives.collective_run import CollectiveResult, collective
from jupyter_mgpu.comparison.compare_result import CompareResult
from jupyter_mgpu.comparison.compare_run import compare
from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.errors import (
    CollectiveHangError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    DeviceOutOfMemoryError,
    EngineDiedError,
    MgpuError,
    RankError,
)
from jupyter_mgpu.layout.mesh import Mesh as DeviceMesh
from jupyter_mgpu.layout.mesh import Partial
from jupyter_mgpu.layout.placement import Block2D, Replicate, Shard
from jupyter_mgpu.monitoring.memory_monitor import memory, memory_history, reset_peak
from jupyter_mgpu.monitoring.metrics_log import clear_metrics, metrics
from jupyter_mgpu.profiling.profile_run import Profile, profile
from jupyter_mgpu.session.core import Session
from jupyter_mgpu.session.lifecycle import current, init, shutdown
from jupyter_mgpu.session.pending import PendingResult
from jupyter_mgpu.tensors.dist_tensor import DistTensor
from jupyter_mgpu.tensors.dtensor_handle import DTensorHandle, from_dtensor
from jupyter_mgpu.tensors.factories import arange, empty_cache, ones, rand, randn, scatter, zeros
from jupyter_mgpu.tensors.io import from_numpy, from_pandas, load, save
from jupyter_mgpu.tensors.shard_map import map  # noqa: F401  (mg.map; left out of __all__ so a star import keeps the builtin)
from jupyter_mgpu.tensors.sharded_matmul import MatmulReport, matmul, plan_matmul
from jupyter_mgpu.tracing.capture import Trace, show, trace

__all__ = [
    "BenchResult",
    "Block2D",
    "CollectiveHangError",
    "CollectiveMismatchError",
    "CollectiveResult",
    "CollectiveTimeoutError",
    "CompareResult",
    "DTensorHandle",
    "DeviceInfo",
    "DeviceMesh",
    "DeviceOutOfMemoryError",
    "DistTensor",
    "EngineDiedError",
    "MatmulReport",
    "MemoryDashboard",
    "MgpuError",
    "Partial",
    "PendingResult",
    "Profile",
    "RankError",
    "Replicate",
    "Session",
    "Shard",
    "Trace",
    "__version__",
    "arange",
    "bench",
    "clear_metrics",
    "collective",
    "compare",
    "compare_values",
    "current",
    "dashboard",
    "empty_cache",
    "from_dtensor",
    "from_numpy",
    "from_pandas",
    "heal",
    "init",
    "load",
    "load_ipython_extension",
    "matmul",
    "memory",
    "memory_history",
    "metrics",
    "metrics_plot",
    "ones",
    "plan_matmul",
    "prewarm",
    "profile",
    "rand",
    "randn",
    "reset_peak",
    "restart",
    "save",
    "scatter",
    "show",
    "shutdown",
    "trace",
    "where",
    "zeros",
]


def compare_values(expr: str, session: Any = None) -> Any:
    """``expr`` (a name, or any expression) on every rank, compared: one row per distinct value with its
    ranks (the most first), a tensor's shape, dtype and norm, and where a tensor first differs from the
    first row's (``[2, 5]: 0.25 here, 0.5 on rank 0``), found from hashes so only two chunks travel."""
    from jupyter_mgpu.session.value_compare import compare_values as _compare

    return _compare(session or current(), expr)


def where(session: Any = None, dump: str | None = None, merge: bool = False) -> Any:
    """What every rank of the session does now, in rank order: ``state`` (``running``, ``collective`` or
    ``idle``), ``seconds`` in that state, ``collective`` (``"barrier #7"`` or None), ``line`` (the
    innermost line of your code) and ``stack`` (your frames). Answers while a cell runs, from any thread.
    ``dump``: also write every rank's c10d flight-recorder dump into that folder (``rank_<r>``), which
    torch's ``torchfrtrace <folder>`` reads. ``merge=True``: every rank's stack as one tree, each frame with
    the ranks in it (``ranks 0–59 (60)``) and what they do there — which ranks are somewhere else."""
    return (session or current()).where(dump=dump, merge=merge)


def restart(ranks: Any = None, session: Any = None) -> Any:
    """Start dead ranks (``ranks``, default every dead one) again on their devices, in a new engine each
    joined to a rebuilt process group; every other rank keeps its variables, shards and tensors. Says the
    names a new rank lacks that its peers define. ``%mgpu_init --restart`` still starts every rank afresh."""
    from jupyter_mgpu.session.rank_restart import restart as _restart

    return _restart(session or current(), None if ranks is None else [int(r) for r in ranks])


def heal(ranks: Any, names: Any, from_rank: int = 0, session: Any = None) -> Any:
    """Give restarted ``ranks`` (one or a list) the values ``names`` from the live ``from_rank``, through the
    process group (a model, its optimizer, data, cell-defined functions; pickled together, so they keep sharing
    what they share). A DDP model is made again on every rank with rank 0's weights. Sharded state is refused.
    After a rank died in the middle of a DDP step the survivors may be a step apart: heal them all from one."""
    from jupyter_mgpu.session.rank_heal import heal as _heal

    return _heal(session or current(), ranks, names if isinstance(names, str) else list(names), from_rank)


def dashboard(session: Any = None, refresh_rate: float | None = None) -> Any:
    """The live memory dashboard of the current session (a widget; display it anywhere, views stay in sync)."""
    from jupyter_mgpu.widgets.memory_dashboard import dashboard as _dashboard

    return _dashboard(session, refresh_rate)


def metrics_plot(names: Any = None, session: Any = None, interval: float = 0.25) -> Any:
    """A live plotly plot of the logged metrics (``names``, default all), per rank and averaged.

    It updates from a background thread while cells run and stops when the session shuts down
    (or with ``.stop()``).
    """
    from jupyter_mgpu.widgets.metrics_plot import MetricsPlot

    return MetricsPlot(session or current(), names=names, interval=interval)


def __getattr__(name: str) -> Any:
    if name == "MemoryDashboard":  # imported on first use: anywidget is not needed to drive the ranks
        from jupyter_mgpu.widgets.memory_dashboard import MemoryDashboard

        return MemoryDashboard
    raise AttributeError(f"module 'jupyter_mgpu' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_mgpu``: register the ``%mgpu_*`` magics."""
    import os

    from jupyter_mgpu.magics.rank_completion import install as install_rank_completion
    from jupyter_mgpu.magics.session_magics import register

    register(ipython)
    _register_pictures(ipython)
    install_rank_completion(ipython)  # Tab and Shift-Tab in %%mgpu cells answered by rank 0
    from jupyter_mgpu.session.idle_prompts import install as install_idle_prompts

    install_idle_prompts(ipython)  # a --noblock call's pdb prompts served before the next cell runs
    from jupyter_mgpu.tensors.handles import free_after_each_cell

    free_after_each_cell(ipython)  # a cell's dropped tensors freed when it ends
    if not os.environ.get("JUPYTER_MGPU_NO_PREWARM") and current(required=False) is None:
        prewarm()
    if getattr(ipython, "kernel", None) is not None:  # a notebook: the first tensor or figure shows at once
        from jupyter_mgpu.session.cell_values import warm_first_use

        warm_first_use()  # while %mgpu_init waits for the engines, not while the next cells run


def _register_pictures(ipython: Any) -> None:
    """A DTensor layout that comes back from the ranks (``mgpu.show(dt)`` in a cell) is drawn here as
    ``mg.show`` draws it; on the ranks it is text."""
    from jupyter_mgpu.layout.dtensor_layout import DTensorLayout
    from jupyter_mgpu.widgets.placement import layout_html

    ipython.display_formatter.formatters["text/html"].for_type(DTensorLayout, lambda v: layout_html(v, v.label))


def prewarm() -> None:
    """Start a spare controller and supervisor in the background (torch imported once) so the next
    ``init`` only forks the engines; also starts compiling the CPU budget shim if it is missing."""
    from jupyter_mgpu.cluster.spare import prewarm as _prewarm

    _prewarm()


def unload_ipython_extension(ipython: Any) -> None:
    from jupyter_mgpu.cluster.spare import discard_spare

    shutdown()
    discard_spare()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-mgpu"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyter_mgpu.server"}]
