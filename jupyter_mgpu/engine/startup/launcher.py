"""The cluster supervisor: a warm fork server that becomes every engine of one cluster.

Run as ``python -m jupyter_mgpu.engine.startup.launcher RUNDIR``. It imports torch and the ipyparallel
engine once (without touching CUDA), waits for the controller's connection file, forks one engine
per device, then stays as their parent: it records how each engine ended (``exits/<rank>.json``),
forks a dead rank's engine again when the kernel asks (``restart/<rank>.json``), ends them all on
SIGTERM or when the kernel is gone, and removes nothing it did not create.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

ENGINE_FILE = "profile/security/ipcontroller-engine.json"
RESTART_DIR = "restart"  # the kernel's requests to start a dead rank again (session/rank_restart.py)
_warmed = False
_bell: Any = None  # this supervisor's doorbell (engine/startup/doorbell.py), once it waits for anything
SHIM_GRACE = 0.3


def _log(rundir: Path, message: str) -> None:
    with open(rundir / "launcher.log", "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {message}\n")


def _engine_child(rundir: Path, config: dict[str, Any], rank: int) -> None:
    """Body of one forked engine process; never returns."""
    code = 0
    try:
        if _bell is not None:
            _bell.leave()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if "env" in config:
            os.environ.clear()
            os.environ.update(config["env"])
        if config.get("cwd"):
            os.chdir(config["cwd"])
        sys.path[:0] = [p for p in config.get("sys_path", []) if p not in sys.path]
        from jupyter_mgpu.engine import state as rank_state
        from jupyter_mgpu.engine.records.startup_marks import mark
        from jupyter_mgpu.engine.startup import fault_record, runtime, watchdog

        mark(rundir, f"engine.forked.{rank}")
        fault_record.enable(rundir, rank)  # a fatal signal's stacks: read back when this engine is reaped
        watchdog.start(config["kernel_pid"], config["kernel_create_time"])
        try:
            runtime.setup(config, rank)
            mark(rundir, f"pg.joined.{rank}")
        except Exception as exc:  # reported to the kernel through the exits file
            _write_exit(rundir, rank, os.getpid(), None, f"{type(exc).__name__}: {exc}")
            os._exit(4)
        from jupyter_mgpu.engine.records import memory_sampler

        memory_sampler.maybe_start(rank_state.get())
        from ipyparallel.engine.app import IPEngine

        mark(rundir, f"ipengine.start.{rank}")
        IPEngine.launch_instance(
            argv=[
                f"--file={rundir / ENGINE_FILE}",
                f"--IPEngine.id={rank}",
                "--IPEngine.enable_nanny=False",
                "--IPEngine.startup_command=from jupyter_mgpu.engine.startup.runtime import populate as _mgpu_populate; "
                "_mgpu_populate(globals()); del _mgpu_populate",
                f"--IPEngine.timeout={config['timeout']}",
                f"--profile-dir={rundir / 'profile'}",
                "--log-level=WARN",
            ]
        )
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException as exc:
        _log(rundir, f"rank {rank} crashed: {type(exc).__name__}: {exc}")
        code = 1
    finally:
        os._exit(code)


def _write_exit(rundir: Path, rank: int, pid: int, status: int | None, error: str | None = None) -> None:
    from jupyter_mgpu.rundir import write_json

    record: dict[str, Any] = {"rank": rank, "pid": pid, "time": time.time(), "returncode": None, "signal": None}
    if status is not None:
        if os.WIFSIGNALED(status):
            record["signal"] = os.WTERMSIG(status)
            record["signal_name"] = signal.Signals(record["signal"]).name
            from jupyter_mgpu.engine.startup import fault_record

            fault = fault_record.read_summary(rundir, rank)
            if fault:
                record["fault"] = fault
        elif os.WIFEXITED(status):
            record["returncode"] = os.WEXITSTATUS(status)
    if error:
        record["error"] = error
    path = rundir / "exits" / f"{rank}.json"
    if error is None and path.exists():
        previous = json.loads(path.read_text())
        record["error"] = previous.get("error")
    write_json(path, record)


def _warm_up(rundir: Path) -> None:
    """Import everything an engine needs, once, leaving CUDA untouched (children inherit it)."""
    global _warmed
    if _warmed:
        return  # a spare supervisor did this already
    import gc

    from jupyter_mgpu.engine.records.startup_marks import mark

    mark(rundir, "torch.start")
    # these imports allocate ~300k objects that live as long as the process: collecting garbage
    # among them while they are made costs ~15% of the import time (measured); afterwards they are
    # frozen, so no engine's collector scans them again or touches their pages (copy on write)
    gc.disable()
    try:
        _import_engine_modules()
        gc.freeze()
    finally:
        gc.enable()
    mark(rundir, "torch.imported")
    import torch

    assert not torch.cuda.is_initialized()
    _warmed = True


def _import_engine_modules() -> None:
    # what every engine imports while it registers (its kernel's debugger, shell extras): once here,
    # not four times over on a start where the engines compete for the cores
    import sqlite3  # noqa: F401

    import ipykernel.ipkernel
    import ipykernel.zmqshell
    import ipyparallel.engine.app
    import ipyparallel.engine.kernel  # noqa: F401
    import IPython.core.completerlib
    import IPython.core.logger
    import IPython.core.oinspect
    import IPython.extensions.storemagic  # noqa: F401
    import torch
    import torch.distributed  # noqa: F401
    import tornado.gen
    import tornado.locks
    import tornado.queues  # noqa: F401

    from jupyter_mgpu.engine.execution import calls, cellapi  # noqa: F401

    try:
        import ipykernel.debugger  # noqa: F401  (imports debugpy)
    except Exception:
        pass


def _wait_for(path: Path, timeout: float) -> bool:
    from jupyter_mgpu.rundir import complete_json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if complete_json(path):
            return True
        time.sleep(0.01)
    return False


class _Engines:
    """The engines this supervisor forked, by rank: reaped as they end (each one's exit record written),
    ended together on SIGTERM or when the kernel is gone."""

    def __init__(self, rundir: Path) -> None:
        self.rundir = rundir
        self.children: dict[int, int] = {}  # rank -> pid
        self.stopping = False

    def stop(self, *_: object) -> None:
        """SIGTERM to every engine, SIGKILL to those still there after 3 s; returns once all are reaped."""
        self.stopping = True
        for pid in self.children.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        while self.children and time.monotonic() < deadline:
            self.reap(block=False)
            time.sleep(0.02)
        for pid in self.children.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while self.children:
            self.reap(block=True)

    def reap(self, block: bool) -> bool:
        """Wait for one child to end (or, without ``block``, look); write how its engine ended. Whether one
        was reaped."""
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.children.clear()
            return False
        if pid == 0:
            return False
        for rank, cpid in list(self.children.items()):
            if cpid == pid:
                del self.children[rank]
                _write_exit(self.rundir, rank, pid, status)
                if not self.stopping:
                    _log(self.rundir, f"rank {rank} (pid {pid}) ended with status {status}")
        return True


def main(rundir_arg: str, kernel_pid: str | None = None, kernel_create_time: str | None = None) -> None:
    """Supervise one cluster. With a kernel pid, start as a spare: warm up, then wait for launch.json."""
    rundir = Path(rundir_arg)
    from jupyter_mgpu.engine.records.startup_marks import mark

    mark(rundir, "supervisor.main")
    if kernel_pid is not None:
        _wait_as_spare(rundir, int(kernel_pid), float(kernel_create_time or 0) or None)
    config = json.loads((rundir / "launch.json").read_text())
    engines = _Engines(rundir)
    _handle_signals(engines, config)
    _warm_up(rundir)
    _settle_budget(rundir, config)
    if not _wait_for(rundir / ENGINE_FILE, config["timeout"]):
        _log(rundir, "the controller never wrote its connection file")
        sys.exit(2)
    mark(rundir, "supervisor.engine_file")
    bell = _doorbell(rundir)
    _fork_engines(rundir, config, engines)
    bell.ring_when_a_child_ends()
    while engines.children:  # reaped as they end; a dead rank started again when the kernel asks
        while engines.reap(block=False):
            pass
        _serve_restarts(rundir, config, engines)
        if engines.children:
            bell.wait()
    _log(rundir, "all engines ended; supervisor exits")


def _serve_restarts(rundir: Path, config: dict[str, Any], engines: _Engines) -> None:
    """Fork a new engine for each dead rank the kernel asked for (``restart/<rank>.json``: the process
    group generation it joins, and the master address of the one-host store), as the first ones were."""
    folder = rundir / RESTART_DIR
    if engines.stopping or not folder.is_dir():
        return
    from jupyter_mgpu.engine.startup import fault_record
    from jupyter_mgpu.rundir import complete_json, write_json

    for path in sorted(folder.glob("*.json")):
        if not complete_json(path):
            continue  # still being written
        request = json.loads(path.read_text())
        path.unlink()
        rank = int(request["rank"])
        if rank in engines.children:
            _log(rundir, f"rank {rank} is alive: not restarted")
            continue
        (rundir / "exits" / f"{rank}.json").unlink(missing_ok=True)
        fault_record.forget(rundir, rank)
        pid = os.fork()
        if pid == 0:
            _engine_child(rundir, {**config, "restart": request}, rank)
        engines.children[rank] = pid
        _log(rundir, f"rank {rank} restarted (pid {pid}, generation {request['generation']})")
        write_json(rundir / "engines.json", {str(r): p for r, p in engines.children.items()})


def _wait_as_spare(rundir: Path, kernel_pid: int, kernel_create_time: float | None) -> None:
    """A spare supervisor: watch the kernel, warm up, then wait for a start to write launch.json."""
    from jupyter_mgpu.engine.startup import watchdog

    watchdog.start(kernel_pid, kernel_create_time)
    bell = _doorbell(rundir)  # before the first look: the start rings it after writing launch.json
    _warm_up(rundir)
    while not (rundir / "launch.json").exists():
        bell.wait()


def _doorbell(rundir: Path) -> Any:
    """This supervisor's doorbell, opened once."""
    global _bell
    if _bell is None:
        from jupyter_mgpu.engine.startup.doorbell import Doorbell

        _bell = Doorbell(rundir)
    return _bell


def _handle_signals(engines: _Engines, config: dict[str, Any]) -> None:
    """Ignore SIGINT (the engines get theirs); end the engines on SIGTERM, or when the kernel is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_sigterm(*_: object) -> None:
        engines.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)

    from jupyter_mgpu.engine.startup import watchdog

    watchdog.start(config["kernel_pid"], config["kernel_create_time"], on_gone=engines.stop)


def _settle_budget(rundir: Path, config: dict[str, Any]) -> None:
    """Settle how the engines' memory budget is enforced, once, before any engine is forked."""
    from jupyter_mgpu.engine.records.startup_marks import mark
    from jupyter_mgpu.engine.shards import allocator_budget

    # the engines forked below share one decision: the budget shim if built (a compile started in the
    # background at %load_ext gets SHIM_GRACE more seconds, one begun by this start none), else the OS limit
    mark(rundir, "shim.settle")
    allocator_budget.settle(SHIM_GRACE, config.get("start_time"))
    mark(rundir, "shim.ready")


def _fork_engines(rundir: Path, config: dict[str, Any], engines: _Engines) -> None:
    """Fork one engine per device (each becomes its rank's engine) and write their pids to engines.json."""
    from jupyter_mgpu.engine.records.startup_marks import mark

    for rank in range(len(config["devices"])):
        pid = os.fork()
        if pid == 0:
            _engine_child(rundir, config, rank)
        engines.children[rank] = pid
    mark(rundir, "supervisor.forked")
    from jupyter_mgpu.rundir import write_json

    write_json(rundir / "engines.json", {str(r): p for r, p in engines.children.items()})


if __name__ == "__main__":
    main(*sys.argv[1:4])
