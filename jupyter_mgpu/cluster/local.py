"""Start and stop one cluster: an ipyparallel controller and one engine per device, fast and leak-free.

The controller (stock ipyparallel, schedulers in threads, a short heartbeat) and our supervisor (a
warm fork server that imports torch once and forks every engine) start at the same time in their
own sessions; every process watches the kernel's pid and ends within a second of it. ``%load_ext``
(:func:`prewarm`) starts both ahead as a spare, which the next start takes over: it then only forks
the engines. Every process marks its moments of the start (``engine/startup_marks.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.engine.startup_marks import mark
from jupyter_mgpu.engine.startup_marks import read as read_marks
from jupyter_mgpu.errors import EngineDiedError, MgpuError

# heartbeat period: an engine counts as registered at the first beat after it starts its heart, so a
# shorter period is a quicker start; the misses allowed before the hub drops an engine keep its
# tolerance at 1 s, as with ipyparallel's own 100 ms x 10
CONTROLLER_PING_MS = 50
CONTROLLER_PING_MISSES = 20
STOP_GRACE = 3.0


def _kernel_identity() -> tuple[int, float]:
    import psutil

    pid = os.getpid()
    return pid, psutil.Process(pid).create_time()


def state_record(cluster: Any, status: str) -> dict:
    """What a cluster's state file says (read by the server extension and ``%mgpu_status``): who owns it
    (kernel pid and start time), its processes and devices; a cluster still starting has fewer."""
    kernel_pid, kernel_ctime = _kernel_identity()
    spec, controller, supervisor = cluster.spec, cluster.controller, cluster.supervisor
    return {
        "cluster_id": cluster.cluster_id,
        "status": status,
        "kernel_pid": kernel_pid,
        "kernel_create_time": kernel_ctime,
        "notebook": os.environ.get("JPY_SESSION_NAME"),
        "world_size": cluster.world_size,
        "backend": spec.backend if spec else None,
        "devices": [d.to_dict() for d in spec.devices] if spec else [],
        "controller_pid": controller.pid if controller is not None else None,
        "supervisor_pid": supervisor.pid if supervisor is not None else None,
        "engine_pids": {str(r): p for r, p in cluster.engine_pids.items()},
        "started_at": cluster.started_at,
        "telemetry_period": spec.telemetry_period if spec else None,
    }


@dataclass
class ClusterSpec:
    """Everything needed to start a cluster."""

    devices: list[DeviceInfo]
    backend: str
    timeout: float
    mem_per_device: int | None = None
    telemetry_period: float = 0.1

    @property
    def threads(self) -> int:
        if self.devices and self.devices[0].kind == "cuda":
            return max(1, (os.cpu_count() or 1) // len(self.devices))
        return max(1, (os.cpu_count() or 1) // len(self.devices))


@dataclass
class Cluster:
    """A running controller + engines; ``rank_to_engine[r]`` is rank r's ipyparallel engine id."""

    spec: ClusterSpec
    cluster_id: str
    path: Path
    controller: subprocess.Popen
    supervisor: subprocess.Popen
    client: Any = None
    engine_pids: dict[int, int] = field(default_factory=dict)
    rank_to_engine: dict[int, int] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)

    @property
    def world_size(self) -> int:
        return len(self.spec.devices)

    # -- starting ---------------------------------------------------------------------------
    @classmethod
    def start(cls, spec: ClusterSpec) -> Cluster:
        """Start the controller and engines, connect a client, and wait until every rank is ready.

        A supervisor pre-warmed by :func:`prewarm` (at ``%load_ext``) is used when there is one.
        """
        global _spare
        began = time.time()
        rd.clean_stale()
        kernel_pid, kernel_ctime = _kernel_identity()
        spare, _spare = _spare, None
        controller = supervisor = None
        if spare is not None and spare.usable():
            path, controller, supervisor = spare.path, spare.controller, spare.supervisor
            cluster_id = path.name
        else:
            if spare is not None:  # one of its processes died: start afresh
                spare.discard()
            cluster_id = rd.new_cluster_id()
            path = rd.create(cluster_id)
        mark(path, "kernel.start", began)
        # engines see what the notebook sees: environment, working directory, import path
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env = {**os.environ, "MGPU_TELEMETRY_PERIOD": str(spec.telemetry_period)}
        config = {
            "cluster_id": cluster_id,
            "rundir": str(path),
            "start_time": began,
            "kernel_pid": kernel_pid,
            "kernel_create_time": kernel_ctime,
            "devices": [d.to_dict() for d in spec.devices],
            "backend": spec.backend,
            "timeout": spec.timeout,
            "threads": spec.threads,
            "mem_per_device": spec.mem_per_device,
            "env": env,
            "cwd": os.getcwd(),
            "sys_path": list(dict.fromkeys([os.getcwd(), *paths])),
        }
        cluster = None
        try:
            with deferred_interrupt():  # both processes start (or the spare's are taken over) and are known, or neither
                if controller is None:
                    controller = _spawn_controller(path, kernel_pid, kernel_ctime)
                try:
                    rd.write_json(path / "launch.json", config)
                    if supervisor is None:
                        supervisor = _spawn(path, ["jupyter_mgpu.engine.launcher", str(path)])
                        mark(path, "supervisor.spawned")
                except BaseException:
                    _kill_group(controller.pid)
                    raise
                cluster = cls(spec, cluster_id, path, controller, supervisor)
            cluster._write_state("starting")
            cluster._connect()
        except BaseException:
            if cluster is not None:
                cluster.stop()
            raise
        cluster._write_state("running")
        mark(path, "kernel.ready")
        from jupyter_mgpu.engine import allocator_budget

        # a missing budget shim (a first start after install, without %load_ext) is compiled from now
        # on, in the background: this cluster did not wait for it, the next one uses it
        allocator_budget.build_in_background()
        return cluster

    def startup_marks(self) -> dict[str, float]:
        """The start's timeline so far (``engine/startup_marks.py``): mark name -> epoch seconds."""
        return read_marks(self.path)

    def _connect(self) -> None:
        deadline = time.monotonic() + max(30.0, self.spec.timeout)
        client_file = self.path / "profile" / "security" / "ipcontroller-client.json"
        while not rd.complete_json(client_file):
            self._check_alive("while starting")
            if time.monotonic() > deadline:
                raise MgpuError(
                    f"the ipyparallel controller did not start within {self.spec.timeout:.0f} s "
                    f"(see {self.path / 'processes.log'})"
                )
            time.sleep(0.01)
        mark(self.path, "controller.ready")
        import ipyparallel as ipp

        self.client = ipp.Client(str(client_file), timeout=max(10, self.spec.timeout))
        mark(self.path, "client.connected")
        n = self.world_size
        while len(self.client.ids) < n:
            self._check_alive("while starting")
            if time.monotonic() > deadline:
                missing = sorted(set(range(n)) - set(self.client.ids))
                raise MgpuError(
                    f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not register "
                    f"within {max(30.0, self.spec.timeout):.0f} s (see {self.path / 'processes.log'})"
                )
            self.client.spin()
            time.sleep(0.005)
        mark(self.path, "engines.registered")
        self.rank_to_engine = {r: r for r in range(n)}  # engines request their rank as id
        if sorted(self.client.ids) != list(range(n)):
            raise MgpuError(f"engines registered with ids {self.client.ids}, expected 0..{n - 1}")
        engines = rd.read_json(self.path / "engines.json") or {}
        self.engine_pids = {int(r): int(p) for r, p in engines.items()}

    # -- health -----------------------------------------------------------------------------
    def exits(self) -> dict[int, dict]:
        """How engines that ended did so: rank -> {returncode, signal, signal_name, error, time}."""
        return rd.exit_records(self.path)

    def dead_ranks(self) -> dict[int, dict]:
        return self.exits()

    def infrastructure_failure(self) -> str | None:
        """Why the cluster as a whole is unusable (controller or supervisor gone), or None."""
        for name, proc in (("ipyparallel controller", self.controller), ("supervisor", self.supervisor)):
            code = proc.poll()
            if code is not None:
                how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                return f"the cluster's {name} {how}"
        return None

    def _check_alive(self, when: str) -> None:
        exits = self.exits()
        if exits:
            raise EngineDiedError(describe_exit(min(exits), exits[min(exits)], when), ranks=sorted(exits))
        failure = self.infrastructure_failure()
        if failure:
            raise MgpuError(f"{failure} {when}; its last words: {self._last_log_line()}")

    def _last_log_line(self) -> str:
        try:
            lines = [ln for ln in (self.path / "processes.log").read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "(no log)"
        return lines[-1].strip()[:300] if lines else "(empty log)"

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the engines of ``ranks`` (all by default): a KeyboardInterrupt in their code."""
        for rank, pid in self.engine_pids.items():
            if ranks is None or rank in ranks:
                try:
                    os.kill(pid, signal.SIGINT)
                except ProcessLookupError:
                    pass

    # -- state and stopping -----------------------------------------------------------------
    def _write_state(self, status: str) -> None:
        rd.write_json(self.path / rd.STATE_FILE, state_record(self, status))

    def stop(self) -> None:
        """End engines, supervisor and controller (SIGTERM, then SIGKILL), close the client, remove files.

        The stop button cannot cut this short: a second press takes effect when everything is gone.
        """
        with deferred_interrupt():
            self._stop()

    def _stop(self) -> None:
        import shutil

        try:
            self._write_state("stopping")  # the sidebar shows the ranks stopping, not dead
        except OSError:
            pass
        if self.client is not None:
            try:
                self.client.close(linger=0)
            except Exception:
                pass
            self.client = None
        procs = [self.supervisor, self.controller]
        for proc in procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_GRACE
        for proc in procs:
            try:
                proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait(2)
        rd.kill_processes_of(self.path)  # what outlived a killed parent: engines, the controller's helpers
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass
class _Spare:
    """What ``%load_ext`` starts ahead of ``%mgpu_init``: a controller and a supervisor that imports torch."""

    path: Path
    controller: subprocess.Popen
    supervisor: subprocess.Popen

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
                _kill_group(proc.pid)
                proc.wait(2)
        rd.kill_processes_of(self.path)  # the controller's helpers, if it forked any
        shutil.rmtree(self.path, ignore_errors=True)


_spare: _Spare | None = None


def _spawn_controller(path: Path, kernel_pid: int, kernel_ctime: float) -> subprocess.Popen:
    proc = _spawn(
        path,
        [
            "jupyter_mgpu.engine.controller",
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


# ``python -c _BOOTSTRAP <module> <args>`` runs <module> as ``python -m`` would, but the package's own
# __init__ (the notebook API: ~0.13 s of imports on the start's critical path) runs only when one of
# its names is first used, which the controller and the supervisor never do; a submodule asked for by
# name (``from jupyter_mgpu import devices``) is imported alone. No module shares a name with an API
# name (tests/unit/test_spawn_bootstrap.py checks), so a name means what it means in the notebook.
_BOOTSTRAP = (
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


def _spawn(path: Path, module_args: list[str]) -> subprocess.Popen:
    """Start ``python -m <module_args>`` (see _BOOTSTRAP) in its own session, logging into the cluster directory."""
    with open(path / "processes.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, *module_args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=os.getcwd(),
            umask=0o077,
        )


def prewarm() -> None:
    """Start a spare controller and supervisor now (the supervisor imports torch and waits), so the next
    start skips those costs; also starts compiling the allocator shim in the background if it is missing."""
    global _spare
    if _spare is not None and _spare.usable():
        return
    discard_spare()
    from jupyter_mgpu.engine import allocator_budget

    allocator_budget.build_in_background()
    kernel_pid, kernel_ctime = _kernel_identity()
    rd.clean_stale()
    cluster_id = rd.new_cluster_id()
    path = rd.create(cluster_id)
    rd.write_json(
        path / rd.STATE_FILE,
        {"cluster_id": cluster_id, "status": "spare", "kernel_pid": kernel_pid, "kernel_create_time": kernel_ctime},
    )
    with deferred_interrupt():  # both processes start and are known, or neither
        supervisor = _spawn(path, ["jupyter_mgpu.engine.launcher", str(path), str(kernel_pid), repr(kernel_ctime)])
        try:
            controller = _spawn_controller(path, kernel_pid, kernel_ctime)
        except BaseException:
            _kill_group(supervisor.pid)
            raise
        _spare = _Spare(path, controller, supervisor)
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


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def describe_exit(rank: int, record: dict, when: str = "") -> str:
    """``rank 2 died (killed by SIGKILL) while ...`` from an exits record."""
    if record.get("lost"):  # an engine on another host: its link to this host ended
        host = f" on {record['host']}" if record.get("host") else ""
        how = f"died{host} (its connection to the notebook's host closed: the engine or its host is gone)"
    elif record.get("error"):
        how = f"failed to start: {record['error']}"
    elif record.get("signal_name"):
        how = f"died (killed by {record['signal_name']})"
        if record["signal_name"] == "SIGSEGV":
            how = "died (segmentation fault, SIGSEGV)"
    else:
        how = f"exited with code {record.get('returncode')}"
    tail = f" {when}" if when else ""
    return f"rank {rank} {how}{tail}; run %mgpu_init --restart (or mg.init(..., restart=True)) to start a new cluster"
