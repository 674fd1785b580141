"""A cluster whose engines ipyparallel's launchers started (on this host or others), or that was
already running (``--connect``): the same interface as ``cluster.Cluster``, so a Session drives it
unchanged.

Start: pick the interface (``--interface``, else the one that reaches the engines' hosts), start
ipyparallel's controller there and the engines with the user's launcher, wait for them to register,
ask each where it runs (``engine/startup/launched_setup.identify``), order ranks by host then local device,
start the relay (``launch/relay.py``) and the rendezvous store on rank 0, set every engine up, then
close the store to newcomers. Anything wrong stops everything that was started, on every host, and
says so in one sentence naming the host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.cluster.local import ClusterSpec, state_record
from jupyter_mgpu.cluster.processes import kernel_identity, kill_group, spawn
from jupyter_mgpu.engine.startup import launched_setup
from jupyter_mgpu.engine.wire import link
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.init_options import InitOptions
from jupyter_mgpu.launch import ipp_cluster, ranks, relay
from jupyter_mgpu.launch.addresses import choose_address
from jupyter_mgpu.launch.options import LaunchOptions

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
            self._write_state("starting")
            self._start(host, init)
        except BaseException:
            self.stop()
            raise
        self._write_state("running")
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
            self.ipp = ipp_cluster.connect_cluster(opts.connect)
            client_file = Path(self.ipp.profile_dir) / "security" / f"ipcontroller-{self.ipp.cluster_id}-client.json"
            location = (rd.read_json(client_file) or {}).get("location")
            self.interface, self.address = choose_address(opts, host, location)
        else:
            self.interface, self.address = choose_address(opts, host)
            ipp_cluster.preflight(opts, host)
            self.ipp = ipp_cluster.make_cluster(
                opts, self.path / "profile", self.cluster_id, kernel_identity(), self.address
            )
            self._phase("starting the controller")
            self.loop.run(self.ipp.start_controller, 60)
            self._phase(f"starting the engines ({opts.launcher})")
            self.controller = getattr(self.ipp.controller, "process", None)
            try:
                with ipp_cluster.stderr_to(self.path / "processes.log"):
                    ipp_cluster.start_engines(self.ipp, opts, self.loop, max(REGISTER_TIMEOUT, timeout))
            except subprocess.CalledProcessError as exc:
                out = (exc.output or b"").decode(errors="replace").strip().splitlines()
                raise MgpuError(f"the {opts.launcher} launcher failed on {host}: {(out or [str(exc)])[-1]}") from None
            client_file = Path(self.ipp.profile_dir) / "security" / f"ipcontroller-{self.cluster_id}-client.json"
        self._phase("waiting for the engines to register")
        self.client = ipp.Client(str(client_file), timeout=max(10, timeout))
        engine_ids = self._wait_for_engines(max(REGISTER_TIMEOUT, timeout), host)
        self.link_key = link.derive_key(bytes(self.client.session.key), self.cluster_id)
        self._start_relay(self.link_key)
        self._phase("asking the engines where they run")
        engines = self._identify(engine_ids, timeout)
        ranked = ranks.order(engines, opts.host_names or None)
        devices = ranks.devices(ranked, init.cpu, mem_per_device)
        chosen = process_group.choose_backend(init.backend, devices[0].kind)
        self.spec = ClusterSpec.of_request(devices, chosen, init, timeout, mem_per_device)
        mine = launched_setup.host_key()
        for r, e in enumerate(ranked):
            self.rank_to_engine[r] = e.engine_id
            self.engine_pids[r] = int(e.info["pid"])
            self.hosts[r] = e.host
            if e.key == mine:
                self.local_ranks.add(r)
        self._write_state("starting")
        self._phase("setting the ranks up")
        self._setup_ranks(ranked, max(SETUP_TIMEOUT, timeout))
        self._phase("ready")

    def _wait_for_engines(self, timeout: float, host: str) -> list[int]:
        """The ids of the engines once ``n`` registered (``--connect``: those running)."""
        want = self.opts.n
        deadline = time.monotonic() + timeout
        if self.opts.launcher == "connect":
            if want:
                try:  # too few: said below, with the figures
                    self.client.wait_for_engines(want, timeout=timeout, block=True)
                except TimeoutError:
                    pass
            ids = sorted(self.client.ids)
            if not ids:
                raise MgpuError(f"the cluster in {self.opts.connect} has no engines running")
            if want is not None and want > len(ids):
                raise MgpuError(f"asked for {want} engines but the cluster in {self.opts.connect} has {len(ids)}")
            return ids[:want] if want else ids
        assert want is not None  # parse() gives every launcher its engine count
        while len(self.client.ids) < want:
            self._check_controller("while the engines started")
            ended = ipp_cluster.launcher_stopped(self.ipp)
            if ended or time.monotonic() > deadline:
                got = len(self.client.ids)
                tail = ipp_cluster.launcher_output(self.ipp)
                said = f"; it said: {tail}" if tail else ""
                if ended:
                    raise MgpuError(
                        f"the {self.opts.launcher} launcher (started from {host}) ended after {got} of "
                        f"{want} engines registered{said}"
                    )
                raise MgpuError(
                    f"only {got} of {want} engines registered within {timeout:.0f} s ({self.opts.launcher} "
                    f"launcher, started from {host}){said}"
                )
            self.client.spin()
            time.sleep(0.05)
        return sorted(self.client.ids)[:want]

    def _check_controller(self, when: str) -> None:
        failure = self.infrastructure_failure()
        if failure:
            raise MgpuError(f"{failure} {when}")

    def _start_relay(self, key: bytes) -> None:
        kernel_pid, kernel_ctime = kernel_identity()
        rd.write_json(
            self.path / relay.CONFIG_FILE,
            {
                "key": key.hex(),
                "address": self.address,
                "world_size": self.opts.n or len(self.client.ids),
                "kernel_pid": kernel_pid,
                "kernel_create_time": kernel_ctime,
            },
        )
        self.supervisor = spawn(self.path, ["jupyter_mgpu.launch.relay", str(self.path)])
        deadline = time.monotonic() + 15
        while not rd.complete_json(self.path / relay.PORT_FILE):
            if self.supervisor.poll() is not None or time.monotonic() > deadline:
                raise MgpuError(
                    f"the relay for remote engines did not start on {self.address} (see {self.path / 'processes.log'})"
                )
            time.sleep(0.01)
        written = rd.read_json(self.path / relay.PORT_FILE)
        assert written is not None  # complete_json() just saw it whole
        self.relay_port = int(written["port"])

    def _gather(self, futures: dict[int, Any], timeout: float, what: str, where: dict[int, str]) -> dict[int, Any]:
        """Results of one async call per engine; one clear sentence for the first that failed."""
        deadline = time.monotonic() + timeout
        out: dict[int, Any] = {}
        while len(out) < len(futures):  # the first failure is reported at once, not after the others' waits
            for key, ar in futures.items():
                if key in out or not ar.ready():
                    continue
                try:
                    out[key] = ar.get()
                except Exception as exc:
                    ename = getattr(exc, "ename", type(exc).__name__)
                    evalue = str(getattr(exc, "evalue", exc)).strip().splitlines()
                    raise MgpuError(f"{what} failed on {where[key]}: {ename}: {evalue[-1] if evalue else ''}") from None
            if len(out) == len(futures):
                break
            if time.monotonic() > deadline:
                late = [k for k in futures if k not in out]
                raise MgpuError(f"{what} did not finish within {timeout:.0f} s on {where[late[0]]}")
            self._check_controller(f"while {what}")
            time.sleep(0.02)
        return out

    def _identify(self, engine_ids: list[int], timeout: float) -> list[ranks.Engine]:
        futures = {
            eid: self.client[eid].apply_async(launched_setup.identify, self.opts.interface, self.address)
            for eid in engine_ids
        }
        where = {eid: f"engine {eid}" for eid in engine_ids}
        infos = self._gather(futures, max(30.0, timeout), "asking the engines where they run", where)
        for eid, info in infos.items():
            name = info.get("label") or info["hostname"]
            if not info.get("address"):
                if self.opts.interface:
                    raise MgpuError(
                        f"there is no interface {self.opts.interface} with an IPv4 address on {name}; "
                        f"it has {info.get('interfaces')}"
                    )
                raise MgpuError(f"{name} has no route to {self.address} (the notebook's host); give --interface")
        return [ranks.Engine(eid, infos[eid]) for eid in engine_ids]

    def _setup_ranks(self, ranked: list[ranks.Engine], timeout: float) -> None:
        spec = self.spec
        where = {r: f"rank {r} ({e.host})" for r, e in enumerate(ranked)}
        rank0 = ranked[0]
        port = self._gather(
            {
                0: self.client[rank0.engine_id].apply_async(
                    launched_setup.open_store, rank0.info["address"], len(ranked), spec.timeout
                )
            },
            60,
            "opening the rendezvous store",
            where,
        )[0]
        counts = ranks.per_host_counts(ranked)
        threads = ranks.threads(ranked)
        base = {
            "cluster_id": self.cluster_id,
            "devices": [d.to_dict() for d in spec.devices],
            "backend": spec.backend,
            "timeout": spec.timeout,
            "collective_timeout": spec.collective_timeout,
            "collective_checks": spec.collective_checks,
            "mem_per_device": spec.mem_per_device,
            "telemetry_period": spec.telemetry_period,
            "store": {"host": rank0.info["address"], "port": port, "world_size": len(ranked)},
            "relay": {"address": self.address, "port": self.relay_port},
            "cwd": os.getcwd(),
        }
        futures = {}
        hosts = list(dict.fromkeys(e.host for e in ranked))  # in rank order: torchrun's GROUP_RANK
        for r, e in enumerate(ranked):
            config = {
                **base,
                "rank": r,
                "local_rank": e.local_rank,
                "local_world_size": counts[e.host],
                "group_rank": hosts.index(e.host),
                "group_world_size": len(hosts),
                "host": e.host,
                "threads": threads[r],
                "interface": e.info["interface"],
            }
            futures[r] = self.client[e.engine_id].apply_async(launched_setup.setup, config)
        done = self._gather(futures, timeout, "setting the engine up", where)
        self._gather(
            {0: self.client[rank0.engine_id].apply_async(launched_setup.close_store_listener)},
            30,
            "closing the rendezvous store to newcomers",
            where,
        )
        linked = (relay.request(self.path, {"cmd": "linked"}) or {}).get("ranks", [])
        missing = [r for r in range(len(ranked)) if r not in linked]
        if missing:
            raise MgpuError(f"{where[missing[0]]} did not link up with {self.address} (the notebook's host)")
        for r, res in done.items():
            self.engine_pids[r] = int(res["pid"])

    # -- health -----------------------------------------------------------------------------
    def exits(self) -> dict[int, dict]:
        """How engines that ended did so (the relay writes a record when a rank's link ends)."""
        return rd.exit_records(self.path)

    def dead_ranks(self) -> dict[int, dict]:
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
    def _write_state(self, status: str) -> None:
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
            self._write_state("stopping")
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
