"""A cluster whose engines ipyparallel's launchers started (on this host or others), or that was
already running (``--connect``): the same interface as ``cluster.Cluster``, so a Session drives it
unchanged.

Start: pick the interface (``--interface``, else the one that reaches the engines' hosts), start
ipyparallel's controller there and the engines with the user's launcher, wait for them to register,
ask each where it runs (``engine/startup/launched_setup.identify``), order ranks by host then local device,
start the relay (``launch/relay.py``) and the rendezvous store on rank 0, set every engine up, then
close the store to newcomers. Anything wrong stops everything that was started, on every host, and
says so in one sentence naming the host.

The steps live beside this module: ``engine_start`` (the controller and engines, or ``--connect``),
``engine_waits`` (registration, one call per engine), ``relay_start`` and ``rank_setup`` (identify, set up).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.cluster.local import ClusterSpec, state_record
from jupyter_mgpu.cluster.processes import kill_group
from jupyter_mgpu.engine.startup import launched_setup
from jupyter_mgpu.engine.wire import link
from jupyter_mgpu.init_options import InitOptions
from jupyter_mgpu.launch import engine_start, engine_waits, ipp_cluster, rank_setup, ranks, relay, relay_start
from jupyter_mgpu.launch.launcher_options import LaunchOptions

REGISTER_TIMEOUT = 60.0  # at least this long for engines to register (batch queues, SSH)
SETUP_TIMEOUT = 120.0  # at least this long for torch to load and the group to meet everywhere


@dataclass
class HostCluster:
    """Engines started by an ipyparallel launcher, joined in one process group across their hosts."""

    opts: LaunchOptions
    cluster_id: str
    path: Path
    spec: Any = None  # ClusterSpec, once the engines said where they run
    ipp: Any = None
    loop: Any = None
    client: Any = None
    controller: Any = None  # psutil.Process of the controller we started (None with --connect)
    supervisor: Any = None  # the relay's Popen (the sidebar's "supervisor")
    address: str = "127.0.0.1"
    interface: str = "lo"
    engine_pids: dict[int, int] = field(default_factory=dict)
    rank_to_engine: dict[int, int] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)
    local_ranks: set[int] = field(default_factory=set)  # ranks on this host, in this PID/IPC/mount namespace
    rank_info: dict[int, dict[str, Any]] = field(default_factory=dict)  # what each rank's engine said of its host
    rank_configs: dict[int, dict[str, Any]] = field(default_factory=dict)  # each rank's setup (a restart reuses it)
    link_key: bytes = b""  # derived from ipyparallel's key (engine/wire/link.py); authenticates links and transfers
    relay_port: int = 0  # the relay's port on ``address``
    started_at: float = field(default_factory=time.time)
    timeline: list[tuple[str, float]] = field(default_factory=list)  # (phase, seconds since start) for launch.log
    pid_checks = False  # engine pids may live on other hosts: deaths come from the relay's exit records

    @property
    def world_size(self) -> int:
        return len(self.spec.devices) if self.spec else int(self.opts.n or 0)

    @property
    def remote_ranks(self) -> set[int]:
        return set(range(self.world_size)) - self.local_ranks

    # -- starting ---------------------------------------------------------------------------
    @classmethod
    def start(cls, opts: LaunchOptions, init: InitOptions) -> HostCluster:
        """Start (or join) the engines, make them ranks, and return the running cluster.

        ``init`` holds the checked options of the whole start (``session/options.checked``)."""
        host = socket.gethostname()
        rd.clean_stale()
        cluster_id = rd.new_cluster_id()
        path = rd.create(cluster_id)
        self = cls(opts, cluster_id, path)
        try:
            self.write_state("starting")
            self._start(host, init)
        except BaseException:
            self.stop()
            raise
        self.write_state("running")
        return self

    def _phase(self, name: str) -> None:
        """Note a phase of the start (written to ``launch.log`` in the cluster directory)."""
        self.timeline.append((name, time.time() - self.started_at))
        with open(self.path / "launch.log", "a") as f:
            f.write(f"{self.timeline[-1][1]:8.2f} s  {name}\n")

    def _start(self, host: str, init: InitOptions) -> None:
        import ipyparallel as ipp

        from jupyter_mgpu.engine.group import process_group

        opts = self.opts
        timeout = float(init.timeout if init.timeout is not None else process_group.DEFAULT_TIMEOUT)
        mem_per_device = int(init.mem_per_device) if init.mem_per_device is not None else None
        self.loop = ipp_cluster.LoopThread()
        if opts.connect is not None:  # parse() sets it exactly for the "connect" launcher
            client_file = engine_start.join_running(self, host, opts.connect)
        else:
            client_file = engine_start.start_controller_and_engines(
                self, host, max(REGISTER_TIMEOUT, timeout), self._phase, init.cpu, mem_per_device
            )
        self._phase("waiting for the engines to register")
        self.client = ipp.Client(str(client_file), timeout=max(10, timeout))
        engine_ids = engine_waits.wait_for_engines(self, max(REGISTER_TIMEOUT, timeout), host, client_file)
        self.link_key = link.derive_key(bytes(self.client.session.key), self.cluster_id)
        relay_start.start_relay(self, self.link_key)
        self._phase("asking the engines where they run")
        engines = rank_setup.identify(self, engine_ids, timeout)
        ranked = ranks.order(engines, opts.host_names or None)
        devices = ranks.devices(ranked, init.cpu, mem_per_device)
        chosen = process_group.choose_backend(init.backend, devices[0].kind)
        self.spec = ClusterSpec.of_request(devices, chosen, init, timeout, mem_per_device)
        self._assign(ranked)
        self.write_state("starting")
        self._phase("setting the ranks up")
        rank_setup.setup_ranks(self, ranked, max(SETUP_TIMEOUT, timeout))
        self._phase("ready")

    def _assign(self, ranked: list[ranks.Engine]) -> None:
        """Rank r is engine ``ranked[r]``: its engine id, pid and host, and whether it runs on this host."""
        mine = launched_setup.host_key()
        for r, e in enumerate(ranked):
            self.rank_to_engine[r] = e.engine_id
            self.engine_pids[r] = int(e.info["pid"])
            self.hosts[r] = e.host
            self.rank_info[r] = e.info
            if e.key == mine:
                self.local_ranks.add(r)

    # -- health -----------------------------------------------------------------------------
    def exits(self) -> dict[int, dict[str, Any]]:
        """How engines that ended did so (the relay writes a record when a rank's link ends)."""
        return rd.exit_records(self.path)

    def dead_ranks(self) -> dict[int, dict[str, Any]]:
        return self.exits()

    def infrastructure_failure(self) -> str | None:
        """Why the cluster as a whole is unusable (controller or relay gone), or None."""
        if self.controller is not None:
            try:
                gone = self.controller.status() == "zombie"
            except Exception:
                gone = True
            if gone:
                return "the cluster's ipyparallel controller ended"
        if self.supervisor is not None and self.supervisor.poll() is not None:
            code = self.supervisor.returncode
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
            return f"the cluster's relay to remote engines {how}"
        return None

    def interrupt(self, ranks_: list[int] | None = None) -> None:
        """SIGINT on the engines of ``ranks_`` (all by default), wherever they run (through their links)."""
        wanted = list(range(self.world_size)) if ranks_ is None else list(ranks_)
        relay.request(self.path, {"cmd": "interrupt", "ranks": wanted})

    # -- state and stopping -----------------------------------------------------------------
    def write_state(self, status: str) -> None:
        """Write the cluster's state file (as ``Cluster.write_state``, with the launcher, hosts and interface)."""
        rd.write_json(
            self.path / rd.STATE_FILE,
            {
                **state_record(self, status),
                "launcher": self.opts.launcher,
                "hosts": {str(r): h for r, h in self.hosts.items()},
                "interface": self.interface,
            },
        )

    def stop(self) -> None:
        """End every engine (through its link, then the launcher's own way), the relay and the controller."""
        from jupyter_mgpu.deferred_interrupt import deferred_interrupt

        with deferred_interrupt():
            self._stop()

    def _stop(self) -> None:
        import shutil

        try:
            self.write_state("stopping")
        except OSError:
            pass
        if self.supervisor is not None and self.supervisor.poll() is None:
            relay.request(self.path, {"cmd": "stop"}, timeout=10)  # every engine exits as its link ends
        if self.client is not None:
            try:  # engines not linked yet (a start that failed early) end through ipyparallel
                # --connect: the user's own engines that were not made ranks keep running
                ids = list(self.rank_to_engine.values()) if self.opts.launcher == "connect" else list(self.client.ids)
                if ids:
                    self.client.shutdown(targets=ids, hub=False, block=False)
                self.client.close(linger=1000)
            except Exception:
                pass
            self.client = None
        if self.ipp is not None and self.loop is not None and self.opts.launcher != "connect":
            # then the launcher's own cleanup (its watchers, batch jobs, mpiexec) and the controller
            ipp_cluster.stop(self.ipp, self.loop, self.path / "processes.log")
            ipp_cluster.remove_remote_files(self.opts, self.cluster_id)
        if self.supervisor is not None:
            try:
                self.supervisor.wait(3)
            except subprocess.TimeoutExpired:
                kill_group(self.supervisor.pid)
                self.supervisor.wait(2)
        if self.loop is not None:
            self.loop.close()
        rd.kill_processes_of(self.path)  # what outlived its launcher on this host (engines of local/mpi)
        shutil.rmtree(self.path, ignore_errors=True)
