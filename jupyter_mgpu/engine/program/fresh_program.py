"""Each ``%mgpu_run`` starts as a fresh program, as a torchrun worker does, while the rank's ``%%mgpu``
cells keep their namespace and their process-wide state (the controller side is ``session/scripts.py``).

Around a run, :class:`FreshRun`:

- takes out of ``sys.modules``, for the run, every user module the engine did not have at start (a
  helper a cell imported: anything outside the standard library, site-packages and this package), so
  the script imports its own folder's files as they are on disk now; after the run the modules it
  imported go and the cells' come back, so one run's helpers never reach a cell or the next run. Library
  modules stay loaded — importing torch or accelerate twice in one process is unsafe (registered ops,
  C extensions) — and the state the supported libraries keep for the whole process is emptied instead
  (``engine/program/library_state.py``). It says which of the cells' names refer to a module the run imported
  afresh;
- gives the run the settings a new Python process has (``engine/program/process_settings.py``: torch's
  defaults, warnings, logging, signals, rebound globals as at engine start) and fresh random seeds;
- lets it inherit the cells' environment variables, working directory and ``sys.path``, as a child
  process inherits its parent's, plus torchrun's per-run variables (``TORCHELASTIC_ERROR_FILE``) and
  colour variables only where the output is a notebook or a terminal;
- afterwards gives the cells back every setting, seed, variable, directory and library state they had,
  and ends the process groups the run made and left (a torchrun worker's die with it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import signal
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_mgpu.engine import rank_traceback
from jupyter_mgpu.engine.program import library_state, process_settings

COLOUR_VARIABLES = {"TERM": "xterm-color", "CLICOLOR": "1", "FORCE_COLOR": "1", "CLICOLOR_FORCE": "1"}
_start: dict[str, Any] = {}


def remember_start() -> None:
    """Note what the engine has at start: its modules and process-wide settings (once, at engine start)."""
    if not _start:
        _start["modules"] = frozenset(sys.modules)
        _start["settings"] = process_settings.capture()


def _module_file(module: types.ModuleType) -> str | None:
    file = getattr(module, "__file__", None)
    if not file:
        paths = list(getattr(module, "__path__", None) or [])  # a namespace package
        file = paths[0] if paths else None
    return file if isinstance(file, str) else None


def is_user_module(name: str, module: Any) -> bool:
    """Whether ``module`` is the user's own code loaded since the engine started (not a library's,
    not ours, not a compiled extension, which cannot be loaded twice)."""
    if name in _start.get("modules", ()) or name in ("__main__", "__mp_main__") or module is None:
        return False
    file = _module_file(module)
    if file is None or file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return False
    return not rank_traceback.is_internal(file) and rank_traceback.library_root(file) is None


def take_user_modules() -> dict[str, types.ModuleType]:
    """Remove the user's modules from ``sys.modules`` and return them (name -> module)."""
    taken = {name: module for name, module in list(sys.modules.items()) if is_user_module(name, module)}
    for name in taken:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()  # files written since the last import are found
    return dict(sorted(taken.items()))


def names_referring_to(user_ns: dict[str, Any], modules: list[str]) -> dict[str, str]:
    """The cells' names whose value is one of ``modules`` or comes from one (a function, class or
    instance), each with that module's name."""
    gone = set(modules)
    found = {}
    for key, value in list(user_ns.items()):
        if key.startswith("_"):
            continue
        home: Any
        if isinstance(value, types.ModuleType):
            home = value.__name__
        elif isinstance(value, (types.FunctionType, type)):
            home = getattr(value, "__module__", None)
        else:
            home = getattr(type(value), "__module__", None)
        if home in gone:
            found[key] = str(home)
    return dict(sorted(found.items()))


def run_environment(colour: bool, rank: int, rundir: str) -> dict[str, str | None]:
    """Variables a run gets on top of the cells' (``None`` removes one): torchrun's error file, and the
    colour variables ipykernel sets only where colour will be shown."""
    error_dir = Path(rundir) / "torchelastic" / f"rank{rank}"
    error_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    env: dict[str, str | None] = {"TORCHELASTIC_ERROR_FILE": str(error_dir / "error.json")}
    if colour:
        env.update(COLOUR_VARIABLES)
    else:
        env.update({"TERM": "dumb", "CLICOLOR": None, "FORCE_COLOR": None, "CLICOLOR_FORCE": None})
    return env


def _set_environment(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        elif os.environ.get(key) != value:
            os.environ[key] = value


def _groups() -> set[Any]:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return set()
    from torch.distributed import distributed_c10d as c10d

    return set(c10d._world.pg_map)


def end_groups(groups: set[Any]) -> None:
    """End the process groups in ``groups`` that still exist (never the session's own)."""
    from torch.distributed import distributed_c10d as c10d

    from jupyter_mgpu.engine.group import user_process_group

    for group in groups & _groups():
        if group is not c10d.GroupMember.WORLD:
            try:
                user_process_group.destroy_group(group)
            except Exception:  # an already broken group: the next rebuild ends it
                pass


class FreshRun:
    """``with FreshRun(env, user_ns) as run:`` the block runs as a new program would; ``run.stale`` maps
    the cells' names that refer to a module the run imported afresh to that module."""

    def __init__(self, env: dict[str, str | None], user_ns: dict[str, Any]) -> None:
        self.env = env
        self.user_ns = user_ns
        self.stale: dict[str, str] = {}

    def __enter__(self) -> FreshRun:
        remember_start()
        self.cells_settings = process_settings.capture()
        self.cells_random = process_settings.save_random()
        self.cells_environ = dict(os.environ)
        self.cells_cwd = os.getcwd()
        self.cells_argv, self.cells_path = list(sys.argv), list(sys.path)
        self.cells_streams = (sys.stdout, sys.stderr, sys.stdin, sys.excepthook, sys.displayhook)
        self.groups_before = _groups()
        self.cells_modules = take_user_modules()
        self.libraries = library_state.save_and_reset()
        start = dict(_start["settings"])  # the stop button's SIGINT handling stays as this call has it
        start["signals"] = {
            **start["signals"],
            **{s: h for s, h in self.cells_settings["signals"].items() if s == signal.SIGINT},
        }
        process_settings.apply(start)
        process_settings.fresh_random()
        _set_environment(self.env)
        error_file = self.env.get("TORCHELASTIC_ERROR_FILE")
        if error_file and os.path.exists(error_file):
            os.remove(error_file)
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:  # after a failure the session's rebuild ends every group
            end_groups(_groups() - self.groups_before)
        imported = take_user_modules()
        self.stale = names_referring_to(self.user_ns, [m for m in imported if m in self.cells_modules])
        sys.modules.update(self.cells_modules)
        sys.stdout, sys.stderr, sys.stdin, sys.excepthook, sys.displayhook = self.cells_streams
        sys.argv, sys.path[:] = self.cells_argv, self.cells_path
        try:
            os.chdir(self.cells_cwd)
        except OSError:
            pass
        _set_environment({k: None for k in os.environ if k not in self.cells_environ})
        _set_environment(self.cells_environ)
        library_state.restore(self.libraries)
        process_settings.restore_random(self.cells_random)
        process_settings.apply(self.cells_settings)
