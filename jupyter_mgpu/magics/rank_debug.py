"""``%mgpu_debug [--rank R]``: pdb on a rank's frames of the last failure, through the notebook's input
box; and IPython's own post-mortem (``%debug``, ``%pdb on``) reaching the ranks when what failed last
was a ``%%mgpu`` cell, an ``mg.*`` call or a script. The prompts are served by
``session/rank_debugging.py``."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_mgpu.errors import MgpuError, RankError
from jupyter_mgpu.magics.arguments import argument, magic_arguments, parse_line, rank_number
from jupyter_mgpu.session import lifecycle, rank_debugging


@magics_class
class DebugMagics(Magics):
    """``%mgpu_debug``."""

    @magic_arguments()
    @argument("--rank", "-r", default=None, help="the rank to debug (default: the lowest that failed)")
    @argument("--all", action="store_true", help="every rank that keeps a failure at once (:all casts to them)")
    @argument(
        "--release",
        action="store_true",
        help="let the last failure's frames go instead (every rank, or --rank), giving back the memory they hold",
    )
    @line_magic
    def mgpu_debug(self, line: str = "") -> None:
        """Open pdb on a rank's frames of the last failure on the ranks (a ``%%mgpu`` cell, an ``mg.*`` call,
        a ``%mgpu_run`` script): ``p``, ``l``, ``w``, ``u``/``d`` there; ``q`` or ``c`` ends it.
        ``--release`` lets those frames go, and the memory they hold, without debugging."""
        args = parse_line(self.mgpu_debug, line)
        rank = rank_number(args.rank)
        s = lifecycle.current()
        if args.release:
            print(f"mgpu: {rank_debugging.release(s, rank)}")
            return
        if args.all:
            if rank is not None:
                raise UsageError("%mgpu_debug takes --all or --rank, not both")
            rank_debugging.post_mortem_all(s)
            return
        if rank is None and s.last_error is None:
            print(f"mgpu: {rank_debugging.NO_FAILURE}")
            return
        rank_debugging.post_mortem(s, rank)


def rank_failure_shown_last() -> RankError | None:
    """The failure on the ranks, when it is the last error the notebook showed (``sys.last_value``)."""
    shown = getattr(sys, "last_value", None)
    return shown if isinstance(shown, RankError) else None


def debug_rank_failure(err: RankError) -> None:
    """Post-mortem on the lowest rank that failed on its own in ``err`` (IPython's ``%debug`` and ``%pdb``)."""
    s = lifecycle.current(required=False)
    if s is None or not s.alive:
        print("mgpu: the session whose ranks failed has ended: nothing to debug")
        return
    try:
        rank_debugging.post_mortem(s, rank_debugging.default_rank(err))
    except MgpuError as exc:
        print(f"mgpu: {exc}")


def install(ipython: Any) -> None:
    """Register ``%mgpu_debug``; make ``%debug`` and ``%pdb on`` open the rank's frames after a failure on
    the ranks (every other failure keeps IPython's own debugger)."""
    ipython.register_magics(DebugMagics)
    from jupyter_mgpu.magics import debug_panel

    debug_panel.install(ipython)  # JupyterLab's debugger panel: gutter breakpoints in %%mgpu cells
    if getattr(ipython.debugger, "_mgpu", False):
        return
    original = ipython.debugger

    def debugger(force: bool = False) -> None:
        err = rank_failure_shown_last()
        if err is not None and (force or ipython.call_pdb):
            debug_rank_failure(err)
            return
        original(force)

    debugger._mgpu = True  # type: ignore[attr-defined]
    ipython.debugger = debugger
