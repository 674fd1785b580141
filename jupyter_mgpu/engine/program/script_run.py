"""Rank side of ``%mgpu_run`` / ``Session.run_script`` (controller side: ``session/scripts.py``): run a
script (or ``-m`` module) in this engine as ``python script.py args`` runs in each torchrun worker.

``__name__ == "__main__"``, ``sys.argv`` is ``[script, *args]`` and the script's directory is first on
``sys.path``, as for ``python script.py``; the script gets fresh globals and starts as a fresh program
(``engine/program/fresh_program.py``: the user modules, settings, seeds and library state earlier runs left are
gone), so the rank's namespace and settings are left as they were. ``sys.exit(0)`` (or no code) is a
normal end; another exit code is an error. A failure names the script's (or module's) own lines.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import socket
import sys
from typing import Any

from jupyter_mgpu.engine.execution import calls, rank_debugger
from jupyter_mgpu.engine.program import fresh_program
from jupyter_mgpu.engine.state import user_ns


class ScriptExit(RuntimeError):
    """The script ended with ``sys.exit(code)`` for a code other than 0 or None."""


def _module_file(target: str) -> str | None:
    """The file ``python -m target`` runs (a package's ``__main__``), or None when it cannot be found."""
    try:
        spec = importlib.util.find_spec(target)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(target + ".__main__")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


def run_script(
    target: str, args: list[str], module: bool = False, colour: bool = True, breaks: Any = None
) -> dict[str, Any]:
    """Run ``target`` (a path, or a module name with ``module``) with ``args`` as its command line, as a
    fresh program; ``colour``: whether its output is shown where colour shows (a notebook, a terminal);
    ``breaks``: the debugger panel's breakpoints in files (the script's own, the modules it imports).
    Returns what the controller says once: the cells' names that refer to a module the run imported afresh."""
    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    if not module:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{target} is not a file on {socket.gethostname()} (rank {st.rank}, working directory {os.getcwd()})"
            )
    env = fresh_program.run_environment(colour, st.rank, st.rundir)
    with fresh_program.FreshRun(env, user_ns()) as fresh:
        sys.argv = [target, *args]  # for -m, runpy puts the module's file in argv[0]
        if module:
            entry = _module_file(target)
        else:
            entry = path
            sys.path.insert(0, os.path.dirname(path))
        try:
            with rank_debugger.breakpoints("<script>", breaks):
                if module:
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise ScriptExit(f"{target} exited with status {exc.code}") from None
        except BaseException as exc:
            if entry:  # the script's own lines are the user's, even in site-packages
                setattr(exc, calls.ENTRY_ATTRIBUTE, entry)
            raise
    return {"stale": fresh.stale}
