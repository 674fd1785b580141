"""``%%mgpu`` (a cell on every rank), ``%%local`` (a cell in the kernel) and ``%mgpu_auto``.

A ``%%mgpu`` cell feels like a notebook cell: output streams live by rank, progress bars redraw,
the last value of each rank renders as the notebook would render it (``session/cell_values.py``),
notebook values it reads travel with it (``session/cell_names.py``), ``--show`` picks whose output
shows and ``--local`` runs it in the kernel too.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from jupyter_mgpu.magics.arguments import argument, magic_arguments, parse_line
from jupyter_mgpu.magics.auto_mode import AUTO, set_auto
from jupyter_mgpu.magics.debug_panel import body_first_line, running_cell
from jupyter_mgpu.session import cell_names, rank_debugging
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.session.cell_values import RankValues
from jupyter_mgpu.session.targets import parse_targets


@magics_class
class CellMagics(Magics):
    """The cell magics ``%load_ext jupyter_mgpu`` registers."""

    @property
    def _user_ns(self) -> dict[str, Any]:
        assert self.shell is not None
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    @magic_arguments()
    @argument("--targets", "-t", default=None, help="ranks to run on, e.g. 0,2 or 1:3 (default: all)")
    @argument("--show", default=None, help="ranks whose output shows, e.g. 0 or 0,2 (the others' folded)")
    @argument("--local", action="store_true", help="run the cell in the kernel too (imports, helpers)")
    @argument("--block", dest="block", action="store_true", default=True, help="wait for the result (default)")
    @argument("--noblock", dest="block", action="store_false", help="return at once with a PendingResult")
    @argument("--stream", dest="stream", action="store_true", default=True, help="stream output live (default)")
    @argument("--no-stream", dest="stream", action="store_false", help="print output when the cell ends")
    @argument("--profile", action="store_true", help="profile the cell on every rank (kept in _mgpu_profile)")
    @cell_magic
    def mgpu(self, line: str, cell: str) -> Any:
        """Run the cell on every rank (``rank``, ``world_size``, ``device``, ``torch``, ``dist`` defined);
        its value is the list of each rank's last value, shown labelled by rank."""
        args = parse_line(self.mgpu, line)
        s = sessmod.current()
        from jupyter_mgpu.tensors.dist_tensor import (
            bind_handles,  # DistTensors the cell names become usable: mgpu.local(A)
        )

        ranks = parse_targets(args.targets, s.world_size)
        show = None if args.show is None else parse_targets(args.show, s.world_size)
        if show is not None and not set(show) & set(ranks):
            raise UsageError(f"--show {args.show} names none of the ranks the cell runs on ({args.targets or 'all'})")
        bound = bind_handles(self._user_ns, cell, s)
        lent = cell_names.lent_values(s, TransformerManager().transform_cell(cell), self._user_ns, ranks, bound)
        first = body_first_line(running_cell(getattr(self.shell, "kernel", None)))  # the editor's line numbers
        if not args.block:
            if args.profile:
                raise UsageError("--profile waits for the cell: leave out --noblock")
            # rich: .get() gives the ranks' values themselves, as a blocking cell's _ does, not their reprs
            return s.run_cell(
                cell, targets=ranks, block=False, stream=args.stream, lent=lent, rich=True, show=show, first_line=first
            )
        panel = rank_debugging.panel  # JupyterLab's debugger panel: its gutter breakpoints stop the ranks
        breaks = panel.cell_breaks(cell) if panel is not None else None
        try:
            with self._profiled(args.profile):  # lines live, and they stay where they were shown
                reports = s.run_cell(
                    cell,
                    targets=ranks,
                    block=True,
                    stream=True,
                    lent=lent,
                    rich=True,
                    show=show,
                    breaks=breaks or None,
                    first_line=first,
                )
        finally:
            if breaks:
                panel.cell_ended()
        if args.local:
            self._run_here(cell)
        if all(report is None for report in reports):
            return None
        return RankValues(ranks, reports, show)

    def _profiled(self, on: bool) -> Any:
        """``--profile``: the cell inside ``mg.profile()``, the result in ``_mgpu_profile``, a line saying so."""
        import contextlib

        if not on:
            return contextlib.nullcontext()
        from jupyter_mgpu.profiling.profile_run import profile

        p = profile()
        self._user_ns["_mgpu_profile"] = p

        @contextlib.contextmanager
        def around() -> Any:
            with p:
                yield
            print("mgpu: profiled on every rank: _mgpu_profile.summary(), .collectives(), .timeline()")

        return around()

    def _run_here(self, cell: str) -> None:
        """Run ``cell`` in the kernel's namespace (its last value not shown: the ranks' is)."""
        assert self.shell is not None
        with AUTO.in_kernel():
            source = self.shell.transform_cell(cell)
        self.shell.ex(source)

    @cell_magic
    def local(self, line: str, cell: str) -> None:
        """Run the cell in the kernel, as a plain cell (what it is for: auto mode's exceptions)."""
        if line.strip():
            raise UsageError(f"%%local takes no arguments, got {line.strip()!r}")
        assert self.shell is not None
        with AUTO.in_kernel():
            self.shell.run_cell(cell, store_history=False)

    @line_magic
    def mgpu_auto(self, line: str = "") -> None:
        """``%mgpu_auto on``: every following code cell runs on the ranks (cells starting with a magic,
        ``%%local`` among them, stay in the kernel); ``%mgpu_auto off`` ends it."""
        word = line.strip().lower()
        if word not in ("on", "off", ""):
            raise UsageError(f"%mgpu_auto takes on or off, got {line.strip()!r}")
        on = (not AUTO.on) if not word else word == "on"
        if on:
            sessmod.current()  # one sentence now if no session runs, not one per cell later
        assert self.shell is not None
        set_auto(self.shell, on)
        print(
            "mgpu: auto mode on: code cells run on every rank (%%local or any magic runs in the kernel)"
            if on
            else "mgpu: auto mode off: code cells run in the kernel"
        )
