"""Start and stop one cluster: an ipyparallel controller and one engine per device, fast and leak-free.

The controller (stock ipyparallel, schedulers in threads, a short heartbeat) and our supervisor (a
warm fork server that imports torch once and forks every engine) start at the same time in their
own sessions; every process watches the kernel's pid and ends within a second of it. ``%load_ext``
(``cluster/spare.py``) starts both ahead as a spare, which the next start takes over: it then only forks
the engines. Every process marks its moments of the start (``engine/records/startup_marks.py``).
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
from jupyter_mgpu.cluster import missed_registrations as registrations
from jupyter_mgpu.cluster.processes import kernel_identity, kill_group, spawn, spawn_controller
from jupyter_mgpu.cluster.spare import take as take_spare
from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.engine.records.startup_marks import CONTROLLER_LISTENING, mark
from jupyter_mgpu.engine.records.startup_marks import read as read_marks
from jupyter_mgpu.engine.startup.doorbell import ring as ring_supervisor
from jupyter_mgpu.errors import EngineDiedError, MgpuError
from jupyter_mgpu.init_options import HANG_AFTER_S, STATUS_AFTER_S
from jupyter_mgpu.wait_line import WaitLine

STOP_GRACE = 3.0  # seconds a stopped process gets before SIGKILL


def state_record(cluster: Any, status: str) -> dict[str, Any]:
    """What a cluster's state file says (read by the server extension and ``%mgpu_status``): who owns it
    (kernel pid and start time), its processes and devices; a cluster still starting has fewer."""
    kernel_pid, kernel_ctime = kernel_identity()
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
        "restarting": sorted(getattr(cluster, "restarting", ())),  # dead ranks being started again (mg.restart)
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
    collective_timeout: float | None = None  # the group's as given (None: torch's default); timeout bounds waits
    # seconds a collective's ranks may all sit blocked before they are named (0: never)
    hang_after: float = HANG_AFTER_S
    collective_checks: bool = True  # each collective's fingerprint compared across ranks before it runs
    status_after: float = STATUS_AFTER_S  # seconds a collective waits before the running cell gets a live status line

    @classmethod
    def of_request(
        cls, devices: list[DeviceInfo], backend: str, opts: Any, wait_timeout: float, mem_per_device: int | None
    ) -> ClusterSpec:
        """The spec a checked start request (``InitOptions``) makes: ``opts.timeout`` None keeps torch's
        own collective timeout; ``wait_timeout`` bounds starting and rebuilding."""
        return cls(
            devices,
            backend,
            wait_timeout,
            mem_per_device=mem_per_device,
            telemetry_period=opts.telemetry_period,
            collective_timeout=opts.timeout,
            hang_after=float(HANG_AFTER_S if opts.hang_after is None else opts.hang_after),
            collective_checks=not opts.no_collective_checks,
            status_after=float(STATUS_AFTER_S if opts.status_after is None else opts.status_after),
        )

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
    controller: subprocess.Popen[bytes]
    supervisor: subprocess.Popen[bytes]
    client: Any = None
    engine_pids: dict[int, int] = field(default_factory=dict)
    rank_to_engine: dict[int, int] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    restarting: list[int] = field(default_factory=list)  # dead ranks being started again (mg.restart)

    @property
    def world_size(self) -> int:
        return len(self.spec.devices)

    # -- starting ---------------------------------------------------------------------------
    @classmethod
    def start(cls, spec: ClusterSpec) -> Cluster:
        """Start the controller and engines, connect a client, and wait until every rank is ready.

        A supervisor pre-warmed by :func:`prewarm` (at ``%load_ext``) is used when there is one.
        """
        began = time.time()
        rd.clean_stale()
        kernel_pid, kernel_ctime = kernel_identity()
        spare = take_spare()
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
            "collective_timeout": spec.collective_timeout,
            "collective_checks": spec.collective_checks,
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
                    controller = spawn_controller(path, kernel_pid, kernel_ctime)
                try:
                    rd.write_json(path / "launch.json", config)
                    ring_supervisor(path)  # a spare's supervisor sleeps until then
                    if supervisor is None:
                        supervisor = spawn(path, ["jupyter_mgpu.engine.startup.launcher", str(path)])
                        mark(path, "supervisor.spawned")
                except BaseException:
                    kill_group(controller.pid)
                    raise
                cluster = cls(spec, cluster_id, path, controller, supervisor)
            cluster.write_state("starting")
            cluster._connect()
        except BaseException:
            if cluster is not None:
                cluster.stop()
            raise
        cluster.write_state("running")
        mark(path, "kernel.ready")
        from jupyter_mgpu.engine.shards import allocator_budget

        # a missing budget shim (a first start after install, without %load_ext) is compiled from now
        # on, in the background: this cluster did not wait for it, the next one uses it
        allocator_budget.build_in_background()
        return cluster

    def startup_marks(self) -> dict[str, float]:
        """The start's timeline so far (``engine/records/startup_marks.py``): mark name -> epoch seconds."""
        return read_marks(self.path)

    def _connect(self) -> None:
        with WaitLine(f"starting {self.world_size} engines") as line:  # said in the cell past 2 s
            self._wait_for_engines(line)

    def _wait_for_engines(self, line: WaitLine) -> None:
        deadline = time.monotonic() + max(30.0, self.spec.timeout)
        client_file = self.path / "profile" / "security" / "ipcontroller-client.json"
        # the file is written before the controller binds most of its ports and answers: a client made
        # at once would wait its whole timeout for a controller that died binding ("Hub connection
        # request timed out"); here such a death is told with the controller's last words
        while not (rd.complete_json(client_file) and CONTROLLER_LISTENING in read_marks(self.path)):
            line.tick("the controller")
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
        next_check = time.monotonic() + registrations.CHECK_EVERY_S
        while len(self.client.ids) < n:
            line.tick(f"{len(self.client.ids)} of {n} ready")
            self._check_alive("while starting")
            if time.monotonic() > next_check:  # an engine that registered while the client connected
                self.client = registrations.caught_up(self.client, client_file, max(10, self.spec.timeout))
                next_check = time.monotonic() + registrations.CHECK_EVERY_S
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
    def exits(self) -> dict[int, dict[str, Any]]:
        """How engines that ended did so: rank -> {returncode, signal, signal_name, error, time}."""
        return rd.exit_records(self.path)

    def dead_ranks(self) -> dict[int, dict[str, Any]]:
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
            first = exits[min(exits)]
            # a rank that merely exited (its engine crashed, or gave up registering) said why in a log
            words = None if first.get("error") or first.get("signal_name") else self._exit_words(min(exits))
            raise EngineDiedError(describe_exit(min(exits), first, when, words), ranks=sorted(exits))
        failure = self.infrastructure_failure()
        if failure:
            raise MgpuError(f"{failure} {when}; its last words: {self._last_log_line()}")

    def _last_log_line(self) -> str:
        return self._log_tail() or "(no log)"

    def _exit_words(self, rank: int) -> str | None:
        """Why ``rank`` exited: the supervisor's note of its crash, else the last line of the processes' log."""
        try:
            notes = (self.path / "launcher.log").read_text(errors="replace").splitlines()
        except OSError:
            notes = []
        crashed = [ln.split(" ", 1)[-1] for ln in notes if f" rank {rank} crashed: " in f" {ln}"]
        return crashed[-1][:300] if crashed else self._log_tail()

    def _log_tail(self) -> str | None:
        """The last line the cluster's processes wrote to their log, if any."""
        try:
            lines = [ln for ln in (self.path / "processes.log").read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return None
        return lines[-1].strip()[:300] if lines else None

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the engines of ``ranks`` (all by default): a KeyboardInterrupt in their code."""
        for rank, pid in self.engine_pids.items():
            if ranks is None or rank in ranks:
                try:
                    os.kill(pid, signal.SIGINT)
                except ProcessLookupError:
                    pass

    # -- state and stopping -----------------------------------------------------------------
    def write_state(self, status: str) -> None:
        """Write the cluster's state file (status, ranks, pids, ranks restarting): what the sidebar reads."""
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
            self.write_state("stopping")  # the sidebar shows the ranks stopping, not dead
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
                kill_group(proc.pid)
                proc.wait(2)
        rd.kill_processes_of(self.path)  # what outlived a killed parent: engines, the controller's helpers
        shutil.rmtree(self.path, ignore_errors=True)


def describe_exit(rank: int, record: dict[str, Any], when: str = "", last_words: str | None = None) -> str:
    """``rank 2 died (killed by SIGKILL) while ...`` from an exits record (``last_words``: what a log says of
    the rank's end, added to a plain exit code, which names no reason by itself)."""
    if record.get("lost"):  # an engine on another host: its link to this host ended
        host = f" on {record['host']}" if record.get("host") else ""
        how = f"died{host} (its connection to the notebook's host closed: the engine or its host is gone)"
    elif record.get("error"):
        how = f"failed to start: {record['error']}"
    elif record.get("signal_name"):
        how = f"died (killed by {record['signal_name']})"
        if record["signal_name"] == "SIGSEGV":
            how = "died (segmentation fault, SIGSEGV)"
        if record.get("fault"):  # where its threads were (engine/startup/fault_record.py)
            how += f" {record['fault']}"
    else:
        how = f"exited with code {record.get('returncode')}"
        if last_words:
            how += f" (the log says: {last_words})"
    tail = (", " if record.get("fault") else " ") + when if when else ""
    return (
        f"rank {rank} {how}{tail}; run %mgpu_init --restart (or mg.init(..., restart=True)) to start a new cluster, "
        f"or %mgpu_restart --rank {rank} (mg.restart([{rank}])) to start this rank again, keeping the other ranks' variables"
    )
