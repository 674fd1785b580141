"""``Session.run_script`` / ``%mgpu_run``: a script or module run on the ranks as torchrun runs it on
its workers, its output streamed rank-prefixed; the rank side is ``engine/program/script_run.py``.

Each run starts as a fresh program on the session's ranks (``engine/program/fresh_program.py``); with
``fresh=True`` it runs on brand-new engine processes instead, started for the run (from the spare
``%load_ext`` keeps warm) and stopped after it, the session's ranks untouched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.program import script_run
from jupyter_mgpu.errors import MgpuError

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session


def output_shows_colour() -> bool:
    """Whether what the ranks print ends where colour shows: a notebook front end or a terminal."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
        return True
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def stale_line(reports: list[Any]) -> str | None:
    """One line naming the cells' names that still refer to a module the run imported afresh."""
    stale: dict[str, str] = {}
    for report in reports:
        if isinstance(report, dict):
            stale.update(report.get("stale") or {})
    if not stale:
        return None
    modules = sorted(set(stale.values()))
    copies = "copy" if len(modules) == 1 else "copies"
    return (
        f"mgpu: the run imported {', '.join(modules)} afresh; the cells' {', '.join(stale)} still "
        f"refer{'s' if len(stale) == 1 else ''} to the {copies} the cells imported"
    )


def run_script(
    s: Session,
    target: str,
    args: Sequence[Any] = (),
    targets: Any = None,
    *,
    module: bool = False,
    timeout: float | None = None,
    fresh: bool = False,
    breaks: Any = None,
) -> None:
    """Check the request here, then run it on ``targets`` (every rank by default); ``breaks``: the debugger
    panel's breakpoints in files (``engine/execution/panel_breaks.py``)."""
    if not isinstance(target, (str, os.PathLike)) or not str(target).strip():
        raise MgpuError(f"run_script needs a script path or module name, got {target!r}")
    if isinstance(args, (str, bytes)):
        raise MgpuError(f"run_script takes its arguments as a list, got the string {args!r}")
    target = os.fspath(target)
    local = set(getattr(s.cluster, "local_ranks", range(s.world_size)))
    if not module and not os.path.isfile(target) and local:  # ranks on this host read the same file
        raise MgpuError(f"{target} is not a file (working directory {os.getcwd()})")
    if fresh:
        _run_on_new_processes(s, target, args, targets, module, timeout)
        return
    what = f"-m {target}" if module else os.path.basename(target)
    reports = s.run(
        script_run.run_script,
        target,
        [str(a) for a in args],
        module,
        output_shows_colour(),
        breaks,
        targets=targets,
        stream=True,
        timeout=timeout,
        label=f"%mgpu_run {what}",
    )
    text = stale_line(reports)
    if text:
        print(text)


def _run_on_new_processes(
    s: Session, target: str, args: Sequence[Any], targets: Any, module: bool, timeout: float | None
) -> None:
    """The run on a new cluster like the session's (same devices, backend, budget, timeout), stopped
    after it; the next such run finds a spare started meanwhile."""
    from jupyter_mgpu.cluster.local import Cluster
    from jupyter_mgpu.cluster.spare import prewarm

    if not isinstance(s.cluster, Cluster):
        raise MgpuError(
            "--fresh starts new engines on this host, but this session's engines came from ipyparallel's "
            "launchers; run the script without --fresh (each run already starts as a fresh program)"
        )
    other = type(s)(Cluster.start(s.cluster.spec))
    try:
        run_script(other, target, args, targets, module=module, timeout=timeout)
    finally:
        other.shutdown()
        try:
            prewarm()
        except Exception:  # a spare is a speed-up only
            pass
