"""The spare: what ``%load_ext`` (:func:`prewarm`) starts ahead of ``%mgpu_init`` — a controller and
a supervisor that has imported torch — so that the next local start only forks the engines."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.cluster.processes import kernel_identity, kill_group, spawn, spawn_controller
from jupyter_mgpu.deferred_interrupt import deferred_interrupt


@dataclass
class Spare:
    """What ``%load_ext`` starts ahead of ``%mgpu_init``: a controller and a supervisor that imports torch."""

    path: Path
    controller: subprocess.Popen[bytes]
    supervisor: subprocess.Popen[bytes]

    def usable(self) -> bool:
        return self.controller.poll() is None and self.supervisor.poll() is None

    def discard(self) -> None:
        import shutil

        for proc in (self.supervisor, self.controller):
            if proc.poll() is None:
                proc.terminate()
        for proc in (self.supervisor, self.controller):
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                proc.wait(2)
        rd.kill_processes_of(self.path)  # the controller's helpers, if it forked any
        shutil.rmtree(self.path, ignore_errors=True)


_spare: Spare | None = None


def prewarm() -> None:
    """Start a spare controller and supervisor now (the supervisor imports torch and waits), so the next
    start skips those costs; also starts compiling the allocator shim in the background if it is missing."""
    global _spare
    if _spare is not None and _spare.usable():
        return
    discard_spare()
    from jupyter_mgpu.engine.shards import allocator_budget

    allocator_budget.build_in_background()
    kernel_pid, kernel_ctime = kernel_identity()
    rd.clean_stale()
    cluster_id = rd.new_cluster_id()
    path = rd.create(cluster_id)
    rd.write_json(
        path / rd.STATE_FILE,
        {"cluster_id": cluster_id, "status": "spare", "kernel_pid": kernel_pid, "kernel_create_time": kernel_ctime},
    )
    with deferred_interrupt():  # both processes start and are known, or neither
        supervisor = spawn(
            path, ["jupyter_mgpu.engine.startup.launcher", str(path), str(kernel_pid), repr(kernel_ctime)]
        )
        try:
            controller = spawn_controller(path, kernel_pid, kernel_ctime)
        except BaseException:
            kill_group(supervisor.pid)
            raise
        _spare = Spare(path, controller, supervisor)
    # the kernel's own share of a start (ipyparallel's client) imported now, while nobody waits
    import importlib
    import threading

    threading.Thread(target=importlib.import_module, args=("ipyparallel",), daemon=True).start()


def discard_spare() -> None:
    """Stop the spare controller and supervisor, if any, and remove their directory."""
    global _spare
    spare, _spare = _spare, None
    if spare is not None:
        spare.discard()


def take() -> Spare | None:
    """The spare, now the caller's to use or discard (none is left behind)."""
    global _spare
    spare, _spare = _spare, None
    return spare
