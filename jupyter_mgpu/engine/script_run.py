"""Rank side of ``%mgpu_run`` / ``Session.run_script``: run a script (or ``-m`` module) in this engine
as ``python script.py args`` runs in each torchrun worker.

``__name__ == "__main__"``, ``sys.argv`` is ``[script, *args]`` and the script's directory is first on
``sys.path``, as for ``python script.py``; the script gets fresh globals, so the rank's namespace is
left as it was; ``sys.argv`` and ``sys.path`` are put back afterwards. ``sys.exit(0)`` (or no code)
is a normal end; another exit code is an error.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys


class ScriptExit(RuntimeError):
    """The script ended with ``sys.exit(code)`` for a code other than 0 or None."""


def run_script(target: str, args: list[str], module: bool = False) -> None:
    """Run ``target`` (a path, or a module name with ``module``) with ``args`` as its command line."""
    from jupyter_mgpu.engine import state as rank_state

    saved_argv, saved_path = sys.argv, list(sys.path)
    if module:
        sys.argv = [target, *args]  # runpy puts the module's file in argv[0]

        def run() -> None:
            runpy.run_module(target, run_name="__main__", alter_sys=True)

    else:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{target} is not a file on {socket.gethostname()} (rank {rank_state.get().rank}, "
                f"working directory {os.getcwd()})"
            )
        sys.argv = [target, *args]
        sys.path.insert(0, os.path.dirname(path))

        def run() -> None:
            runpy.run_path(path, run_name="__main__")

    try:
        run()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise ScriptExit(f"{target} exited with status {exc.code}") from None
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
