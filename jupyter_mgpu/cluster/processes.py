"""The processes of a local cluster: the kernel's identity, and how the controller and the
supervisor are started (``python -c BOOTSTRAP``, each in its own session) and killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from jupyter_mgpu import rundir
from jupyter_mgpu.engine.records.startup_marks import mark

# heartbeat period: an engine counts as registered at the first beat after it starts its heart, so a
# shorter period is a quicker start. The controller drops an engine whose heart is silent for
# HEART_SILENCE_MS, for good (its later beats are ignored: every call through ipyparallel then fails):
# 30 s, ipyparallel's own default (3 s x 10), since a loaded machine (two cores, a load of 8, a node
# swapping) can leave a live engine unscheduled for over a second. A rank known dead need not wait for
# it: its engine is dropped at once (cluster/engine_restart.forget_dead), and the session learns of
# deaths from the supervisor, not from the heartbeat.
CONTROLLER_PING_MS = 50
HEART_SILENCE_MS = 30_000
CONTROLLER_PING_MISSES = HEART_SILENCE_MS // CONTROLLER_PING_MS


def kernel_identity() -> tuple[int, float]:
    """This kernel's pid and start (``rundir.process_start``): what every process of its cluster watches."""
    pid = os.getpid()
    return pid, rundir.process_start(pid)


def spawn_controller(path: Path, kernel_pid: int, kernel_ctime: float) -> subprocess.Popen[bytes]:
    proc = spawn(
        path,
        [
            "jupyter_mgpu.engine.startup.controller",
            str(kernel_pid),
            repr(kernel_ctime),
            "--usethreads",
            f"--ping={CONTROLLER_PING_MS}",
            f"--HeartMonitor.max_heartmonitor_misses={CONTROLLER_PING_MISSES}",
            "--ip=127.0.0.1",
            f"--profile-dir={path / 'profile'}",
            "--log-level=WARN",
        ],
    )
    mark(path, "controller.spawned")
    return proc


# ``python -c BOOTSTRAP <module> <args>`` runs <module> as ``python -m`` would, but the package's own
# __init__ (the notebook API: ~0.13 s of imports on the start's critical path) runs only when one of
# its names is first used, which the controller and the supervisor never do; a submodule asked for by
# name (``from jupyter_mgpu import devices``) is imported alone. No module shares a name with an API
# name (tests/unit/test_spawn_bootstrap.py checks), so a name means what it means in the notebook.
BOOTSTRAP = (
    "import importlib, importlib.util as u, runpy, sys\n"
    "s = u.find_spec('jupyter_mgpu'); p = u.module_from_spec(s)\n"
    "def __getattr__(name):\n"
    "    if not name.startswith('_') and u.find_spec('jupyter_mgpu.' + name):\n"
    "        return importlib.import_module('jupyter_mgpu.' + name)\n"
    "    p.__dict__.pop('__getattr__', None)\n"
    "    try:\n"
    "        s.loader.exec_module(p)\n"
    "    except BaseException:\n"  # an interrupt mid-way: the next use loads it again
    "        p.__getattr__ = __getattr__; raise\n"
    "    return getattr(p, name)\n"
    "p.__getattr__ = __getattr__; sys.modules['jupyter_mgpu'] = p\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def spawn(path: Path, module_args: list[str]) -> subprocess.Popen[bytes]:
    """Start ``python -m <module_args>`` (see BOOTSTRAP) in its own session, logging into the cluster directory."""
    with open(path / "processes.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP, *module_args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=os.getcwd(),
            umask=0o077,
        )


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
